"""How the group coordinator copes with many members joining at once, and with their heartbeats.

For each N, N members spread over several processes connect to one lab broker, wait at a
barrier, then all join the same group at once. Each member speaks the protocol itself
(asyncio, kafka-python's codec): FindCoordinator, JoinGroup (v5: MEMBER_ID_REQUIRED first),
SyncGroup (the leader runs the range assignor over every member), then heartbeats every
3 s. Printed per N:

  join->stable   from the last JoinGroup sent to the last member holding its assignment
  coord. wait    the part of that the coordinator spent in its join phase (initial delay)
  sync fan-out   join phase complete -> every member Stable (what is left without the delay), made of
                 leader: join phase complete -> the leader's SyncGroup applied (answers out, assignor run)
                 release: group Stable -> the last member has its SyncGroup answer
  req/member     requests per member besides heartbeats (FindCoordinator included)
  hb CPU         the broker's CPU while all N members heartbeat every 3 s

    .venv/bin/python benchmarks/bench_modern.py                 # N = 10, 100, 500, 1000
    .venv/bin/python benchmarks/bench_modern.py --sizes 1000 --processes 4 --heartbeat-s 30
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.admin import create_topic
from broker.cluster import start_cluster
from modern.classic.consumer_protocol import decode_subscription, encode_assignment, encode_subscription
from rebalance.assignors import get_assignor
from rebalance.kafka_frames import response_class
from rebalance.types import Subscription

TOPIC_PARTITIONS = 100
SESSION_MS = 30_000
REBALANCE_MS = 60_000
HEARTBEAT_MS = 3_000


class AsyncConnection:
    """One member's connection: one request at a time, like the real clients' group requests."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.reader = self.writer = None
        self.correlation = itertools.count(1)
        self.sent: Counter[str] = Counter()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, request):
        self.sent[type(request).__name__.split("_v")[0].removesuffix("Request")] += 1
        correlation_id = next(self.correlation)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        self.writer.write(bytes(request.encode(header=True, framed=True)))
        await self.writer.drain()
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        frame = await self.reader.readexactly(size)
        return response_class(request.API_KEY, request.API_VERSION).decode(frame, header=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def join_member(index: int, address: tuple[str, int], group: str, topic: str,
                      start: asyncio.Event) -> tuple[AsyncConnection, dict]:
    """Phases 1-3 for one member; returns its connection (for heartbeats) and its timings."""
    conn = AsyncConnection(*address, client_id=f"bench-{index}")
    await conn.open()
    await start.wait()
    found = await conn.request(FindCoordinatorRequest[3](key=group, key_type=0))
    assert found.error_code == 0, found
    if (found.host, found.port) != address:
        conn.close()
        conn = AsyncConnection(found.host, found.port, conn.client_id)
        await conn.open()
    metadata = encode_subscription(Subscription(topics=(topic,)))
    member_id = ""
    while True:
        join_sent = time.monotonic_ns()
        joined = await conn.request(JoinGroupRequest[5](
            group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)]))
        if joined.error_code == 79:  # MEMBER_ID_REQUIRED: rejoin with the id we were given
            member_id = joined.member_id
            continue
        assert joined.error_code == 0, joined
        break
    plan = []
    if joined.leader == joined.member_id:
        subscriptions = {m.member_id: decode_subscription(bytes(m.metadata)) for m in joined.members}
        assignment = get_assignor("range").assign({topic: TOPIC_PARTITIONS}, subscriptions)
        plan = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(a))
                for m, a in assignment.items()]
    synced = await conn.request(SyncGroupRequest[3](group_id=group, generation_id=joined.generation_id,
                                                    member_id=joined.member_id, group_instance_id=None,
                                                    assignments=plan))
    assert synced.error_code == 0, synced
    timings = {"join_sent": join_sent, "stable": time.monotonic_ns(), "requests": dict(conn.sent),
               "generation": joined.generation_id, "member_id": joined.member_id}
    return conn, timings


async def heartbeat_member(conn: AsyncConnection, timings: dict, group: str, index: int, seconds: float) -> dict:
    await asyncio.sleep((index % 100) * HEARTBEAT_MS / 100_000)  # spread over the interval, as real members are
    until = time.monotonic() + seconds
    beats, failed = 0, 0
    while time.monotonic() < until:
        answer = await conn.request(HeartbeatRequest[3](group_id=group, generation_id=timings["generation"],
                                                        member_id=timings["member_id"], group_instance_id=None))
        beats += 1
        failed += answer.error_code != 0
        await asyncio.sleep(HEARTBEAT_MS / 1000)
    conn.close()
    return {"beats": beats, "beat_errors": failed}


def worker(indices: list[int], address: tuple[str, int], group: str, topic: str, go, heartbeat_s: float,
           results) -> None:
    """One member process: all its members join at the barrier, report Stable, then heartbeat."""
    async def main() -> None:
        start = asyncio.Event()
        joins = [asyncio.create_task(join_member(i, address, group, topic, start)) for i in indices]
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        start.set()
        joined = await asyncio.gather(*joins)
        results.put(("stable", [timings for _, timings in joined]))
        beats = await asyncio.gather(*(heartbeat_member(conn, timings, group, i, heartbeat_s)
                                       for i, (conn, timings) in zip(indices, joined, strict=True)))
        results.put(("done", beats))

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(size: int, processes: int, heartbeat_s: float, delay_ms: int) -> dict:
    events = Path(tempfile.mkdtemp(prefix="bench-modern-")) / "coordinator.jsonl"
    os.environ["REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS"] = str(delay_ms)
    os.environ["REBALANCE_LAB_COORDINATOR_EVENTS"] = str(events)
    with start_cluster(1) as cluster:
        broker = cluster.brokers[0]
        topic, group = f"bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:6]}"
        create_topic(cluster.bootstrap, topic, TOPIC_PARTITIONS)
        context = mp.get_context("spawn")
        go, results = context.Event(), context.Queue()
        shares = [share for share in (list(range(size))[p::processes] for p in range(processes)) if share]
        procs = [context.Process(target=worker, args=(share, (broker.host, broker.port), group, topic, go,
                                                      heartbeat_s, results), daemon=True) for share in shares]
        try:
            for proc in procs:
                proc.start()
            time.sleep(3 + size / 300)  # let every process start and open its connections (not measured)
            go.set()
            members: list[dict] = []
            beats: list[dict] = []
            for _ in procs:
                kind, payload = results.get(timeout=300)
                assert kind == "stable", kind
                members.extend(payload)
            cpu_start, wall_start = cpu_seconds(broker.pid), time.monotonic()
            for _ in procs:
                kind, payload = results.get(timeout=heartbeat_s + 120)
                beats.extend(payload)
            cpu_end, wall_end = cpu_seconds(broker.pid), time.monotonic()
        finally:
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
    transitions = [json.loads(line) for line in events.read_text().splitlines()]
    completed = [e for e in transitions if e.get("group") == group and e.get("to_state") == "CompletingRebalance"]
    stabilised = [e for e in transitions if e.get("group") == group and e.get("to_state") == "Stable"]
    stable_at = max(m["stable"] for m in members)
    last_join = max(m["join_sent"] for m in members)
    join_done_ns = completed[-1]["ts_ns"] if completed else None
    requests: Counter[str] = Counter()
    for m in members:
        requests.update(m["requests"])
    return {
        "N": size,
        "generations": sorted({m["generation"] for m in members}),
        "join_to_stable_ms": (stable_at - last_join) / 1e6,
        "coordinator_wait_ms": (join_done_ns - last_join) / 1e6 if join_done_ns else float("nan"),
        "sync_fanout_ms": (stable_at - join_done_ns) / 1e6 if join_done_ns else float("nan"),
        "leader_ms": (stabilised[-1]["ts_ns"] - join_done_ns) / 1e6 if stabilised and join_done_ns else float("nan"),
        "release_ms": (stable_at - stabilised[-1]["ts_ns"]) / 1e6 if stabilised else float("nan"),
        "requests_per_member": {api: count / size for api, count in sorted(requests.items())},
        "heartbeats": sum(b["beats"] for b in beats),
        "heartbeat_errors": sum(b["beat_errors"] for b in beats),
        "hb_cpu_percent": 100 * (cpu_end - cpu_start) / (wall_end - wall_start),
        "hb_window_s": wall_end - wall_start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 500, 1000])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--heartbeat-s", type=float, default=30.0, help="How long members heartbeat once Stable.")
    parser.add_argument("--delay-ms", type=int, default=3000, help="group.initial.rebalance.delay.ms")
    args = parser.parse_args()
    print(f"initial delay {args.delay_ms} ms, {args.processes} member processes, heartbeat every {HEARTBEAT_MS} ms")
    print(f"{'N':>5} {'gen':>4} {'join->stable':>13} {'coord. wait':>12} {'sync fan-out':>13} {'leader':>8} "
          f"{'release':>8} "
          f"{'req/member (besides heartbeats)':>40} {'hb CPU':>8} {'hb errors':>9}")
    for size in args.sizes:
        r = bench(size, args.processes, args.heartbeat_s, args.delay_ms)
        per = ", ".join(f"{api} {count:.2f}" for api, count in r["requests_per_member"].items())
        print(f"{r['N']:>5} {','.join(map(str, r['generations'])):>4} {r['join_to_stable_ms']:>11.0f}ms "
              f"{r['coordinator_wait_ms']:>10.0f}ms {r['sync_fanout_ms']:>11.0f}ms {r['leader_ms']:>6.0f}ms "
              f"{r['release_ms']:>6.0f}ms {per:>40} "
              f"{r['hb_cpu_percent']:>7.1f}% {r['heartbeat_errors']:>9}", flush=True)
    print("hb CPU: the broker process's user+sys time over the heartbeat window, in % of one core")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
