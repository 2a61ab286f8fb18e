"""Herd effect of the 0.8 ZooKeeper consumer: what one join costs a stable group of N.

For each N, members are spread over several worker processes (the cost is client-side
Python per request, so one process would measure the GIL), a stable group of N is built,
then one member joins and the script counts, from the members' own events:

  notifications  watch notifications received by the group after the join
  requests       ZooKeeper requests the group made until it was stable again
  rebalances     synced rebalances started; attempts; owner conflicts; exhausted runs
  stable after   from the join until the last member completed its last rebalance
  server pkts    ZooKeeper's own counter (mntr zk_packets_received) over the same window,
                 less the idle rate of pings: an independent witness

Members here do not fetch (the script never polls them): the figures are coordination only.

    .venv/bin/python benchmarks/bench_legacy_herd.py                 # N = 5 10 25 50 100
    .venv/bin/python benchmarks/bench_legacy_herd.py --sizes 5 10 --processes 2
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from kazoo.client import KazooClient

import zkensemble
from legacy_zk.member import LegacyMember
from rebalance.assignors.legacy import legacy_range
from rebalance.events import EventRecorder
from rebalance.member import MemberConfig

GROUP_SETTINGS = {"rebalance.max.retries": 20, "rebalance.backoff.ms": 500, "auto.commit.enable": False}
SESSION_MS = 6000
READS = {"get", "get_children", "exists"}


# -- a worker process: K members, until SIGTERM ------------------------------------------------------

def worker(zk: str, group: str, names: list[str], events: Path) -> None:
    recorder = EventRecorder(events, run_id="bench", backend="legacy")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    members = [LegacyMember(member_config(zk, group, name), recorder=recorder) for name in names]
    for member in members:
        member.start()
    print("started", flush=True)
    stop.wait()
    closers = [threading.Thread(target=m.close) for m in members]
    for thread in closers:
        thread.start()
    for thread in closers:
        thread.join(60)
    recorder.close()


def member_config(zk: str, group: str, name: str) -> MemberConfig:
    return MemberConfig(group=group, topics=("t",), member_name=name, zk_connect=zk,
                        session_timeout_ms=SESSION_MS, extra=GROUP_SETTINGS)


# -- reading the members' events as they are written ---------------------------------------------------

class EventTail:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def read(self, everything: bool) -> list[dict]:
        """New events; only rebalance events unless `everything` (cheap while a big group builds)."""
        events = []
        for path in sorted(self.directory.glob("*.jsonl")):
            with open(path, "rb") as handle:
                handle.seek(self._offsets.get(path, 0))
                data = self._partial.pop(path, b"") + handle.read()
                self._offsets[path] = handle.tell()
            lines = data.split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]
            for line in lines[:-1]:
                if everything or b'"type":"rebalance_' in line:
                    events.append(json.loads(line))
        return events


class GroupWatch:
    """Each member's last rebalance event, to tell when the group is stable on the expected split."""

    def __init__(self, tail: EventTail) -> None:
        self.tail = tail
        self.last: dict[str, dict] = {}
        self.last_change = time.monotonic()

    def update(self, everything: bool = False) -> list[dict]:
        events = self.tail.read(everything)
        for event in events:
            if event["type"] in ("rebalance_started", "rebalance_completed", "rebalance_failed"):
                self.last[event["member"]] = event
                self.last_change = time.monotonic()
        return events

    def stable(self, expected: dict[str, list[str]], quiet_s: float) -> bool:
        if set(self.last) != set(expected) or time.monotonic() - self.last_change < quiet_s:
            return False
        return all(e["type"] == "rebalance_completed" and sorted(e["assigned"]) == expected[m]
                   for m, e in self.last.items())

    def failed(self) -> list[str]:
        return [m for m, e in self.last.items() if e["type"] == "rebalance_failed"]


def expected_split(group: str, names: list[str], partitions: int) -> dict[str, list[str]]:
    ids = [f"{group}_{name}" for name in names]
    by_thread = legacy_range({"t": partitions}, {cid: {"t": 1} for cid in ids})
    return {cid: sorted(str(tp) for tp in by_thread[f"{cid}-0"]) for cid in ids}


def wait_stable(watch: GroupWatch, expected, timeout_s: float, quiet_s: float, collect: list | None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = watch.update(everything=collect is not None)
        if collect is not None:
            collect.extend(events)
        if watch.stable(expected, quiet_s):
            return
        time.sleep(0.1)
    raise TimeoutError(f"group of {len(expected)} not stable after {timeout_s} s; "
                       f"exhausted: {watch.failed()[:5]}")


# -- one size ----------------------------------------------------------------------------------------

def measure(ensemble, size: int, processes: int, workdir: Path, build_timeout_s: float) -> dict:
    zk = ensemble.chroot("herd")
    group = f"herd-{size}-{uuid.uuid4().hex[:6]}"
    partitions = 2 * (size + 1)
    admin = KazooClient(zk.partition("/")[0])
    admin.start(timeout=30)
    chroot = "/" + zk.partition("/")[2]
    admin.create(f"{chroot}/brokers/ids/0", json.dumps(
        {"version": 1, "host": "127.0.0.1", "port": 9, "jmx_port": -1, "timestamp": "0"}).encode(), makepath=True)
    admin.create(f"{chroot}/brokers/topics/t", json.dumps(
        {"version": 1, "partitions": {str(p): [0] for p in range(partitions)}}).encode(), makepath=True)

    events_dir = workdir / f"n{size}"
    events_dir.mkdir(parents=True)
    names = [f"m{i:03d}" for i in range(size)]
    chunks = [names[i::processes] for i in range(min(processes, size))]
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", zk, group, str(events_dir / f"w{i}.jsonl"),
                                 *chunk], stdout=subprocess.PIPE) for i, chunk in enumerate(chunks)]
    joiner = None
    try:
        for process in workers:
            process.stdout.readline()
        watch = GroupWatch(EventTail(events_dir))
        built = time.monotonic()
        wait_stable(watch, expected_split(group, names, partitions), build_timeout_s, 1.5, None)
        build_s = time.monotonic() - built

        node = ensemble.nodes[0]
        idle_before, idle_t0 = node.mntr()["zk_packets_received"], time.monotonic()
        time.sleep(2.0)
        idle_rate = (node.mntr()["zk_packets_received"] - idle_before) / (time.monotonic() - idle_t0)

        post: list[dict] = []
        watch.update(everything=True)  # skip what is already written
        packets_before = node.mntr()["zk_packets_received"]
        window_t0 = time.monotonic()
        joiner_recorder = EventRecorder(events_dir / "joiner.jsonl", run_id="bench", backend="legacy")
        joiner = LegacyMember(member_config(zk, group, "zjoin"), recorder=joiner_recorder)
        joined_ns = time.monotonic_ns()
        joiner.start()
        wait_stable(watch, expected_split(group, [*names, "zjoin"], partitions), 300, 1.5, post)
        stable_ns = max(e["ts_ns"] for e in watch.last.values())
        window_s = time.monotonic() - window_t0
        packets = node.mntr()["zk_packets_received"] - packets_before - idle_rate * window_s
    finally:
        if joiner is not None:
            joiner.close()
            joiner_recorder.close()
        for process in workers:
            process.send_signal(signal.SIGTERM)
        for process in workers:
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
        admin.stop()
        admin.close()

    after = [e for e in post if e["ts_ns"] >= joined_ns]
    kinds = Counter(e["type"] for e in after)
    requests = [e for e in after if e["type"] == "coordination_request"]
    attempts = [e for e in after if e["type"] == "rebalance_attempt"]
    return {
        "N": size,
        "partitions": partitions,
        "build_s": build_s,
        "notifications": kinds["watch_notification"],
        "requests": len(requests),
        "reads": sum(1 for e in requests if e["op"] in READS),
        "writes": sum(1 for e in requests if e["op"] not in READS),
        "rebalances": kinds["rebalance_started"],
        "attempts": len(attempts),
        "conflicts": sum(1 for a in attempts if a["outcome"] == "owner_conflict"),
        "exhausted": kinds["rebalance_failed"],
        "stable_s": (stable_ns - joined_ns) / 1e9,
        "server_packets": max(0, round(packets)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 25, 50, 100])
    parser.add_argument("--processes", type=int, default=4, help="worker processes the members are spread over")
    parser.add_argument("--provider", default="local", help="ZooKeeper provider: local, docker or auto")
    parser.add_argument("--build-timeout", type=float, default=600.0, help="seconds to build each stable group")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        zk, group, events, *names = args.worker
        worker(zk, group, names, Path(events))
        return

    workdir = args.workdir or Path("runs") / f"bench-legacy-herd-{time.strftime('%Y%m%d-%H%M%S')}"
    rows = []
    with zkensemble.start(nodes=1, provider=args.provider) as ensemble:
        for size in args.sizes:
            row = measure(ensemble, size, args.processes, workdir, args.build_timeout)
            rows.append(row)
            print(f"N={size}: {row}", file=sys.stderr, flush=True)
    header = ("| N | partitions | notifications | ZK requests (reads/writes) | rebalances | attempts | conflicts "
              "| exhausted | stable after (s) | server packets | group build (s) |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for r in rows:
        print(f"| {r['N']} | {r['partitions']} | {r['notifications']} | {r['requests']} ({r['reads']}/{r['writes']}) "
              f"| {r['rebalances']} | {r['attempts']} | {r['conflicts']} | {r['exhausted']} "
              f"| {r['stable_s']:.2f} | {r['server_packets']} | {r['build_s']:.1f} |")
    print(f"\nper-N cost of one join; events in {workdir}; processes={args.processes}, "
          f"session={SESSION_MS} ms, {GROUP_SETTINGS}")
    if len(rows) > 1:
        per_member = [r["requests"] / r["N"] for r in rows]
        print(f"requests per existing member: {', '.join(f'{x:.1f}' for x in per_member)} "
              f"(median {statistics.median(per_member):.1f})")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
