"""What an idle member's data path costs its process: kafka-python's KafkaConsumer against the lab's fetcher.

    .venv/bin/python benchmarks/bench_fetch_idle.py [--members 25] [--seconds 20] [--repeat 3]

One broker in its own process, a topic of 2 partitions per member and nothing produced. In one process,
`--members` threads each fetch their two partitions in a loop of 0.5 s polls, as a member host polls
its members; the process's CPU time (user + system) over `--seconds` is printed as a share of one core,
alternating the two clients `--repeat` times, with the broker's share beside it. A herd of a thousand
members on two cores is only possible if this share is small.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

POLL_MS = 500


def _kafka_python(bootstrap: str, topic: str, index: int, stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=f"m{index}", group_id=None,
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 2 * index), TopicPartition(topic, 2 * index + 1)])
    while not stop.is_set():
        consumer.poll(timeout_ms=POLL_MS)
    consumer.close()


def _lab(bootstrap: str, topic: str, index: int, stop: threading.Event) -> None:
    from modern.client.fetcher import Fetcher
    from rebalance.types import TopicPartition

    fetcher = Fetcher([bootstrap], client_id=f"m{index}")
    fetcher.assign([TopicPartition(topic, 2 * index), TopicPartition(topic, 2 * index + 1)])
    while not stop.is_set():
        fetcher.poll(POLL_MS)
    fetcher.close()


CLIENTS = {"kafka-python": _kafka_python, "lab": _lab}


def measure_in_child(client: str, bootstrap: str, topic: str, members: int, seconds: float) -> float:
    """Run the members in a fresh process; its CPU share of one core, printed by the child."""
    out = subprocess.run([sys.executable, __file__, "--child", client, "--bootstrap", bootstrap, "--topic", topic,
                          "--members", str(members), "--seconds", str(seconds)],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def child(client: str, bootstrap: str, topic: str, members: int, seconds: float) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=CLIENTS[client], args=(bootstrap, topic, index, stop), daemon=True)
               for index in range(members)]
    for thread in threads:
        thread.start()
    time.sleep(3)   # connected, positioned
    before, started = os.times(), time.monotonic()
    time.sleep(seconds)
    after, ended = os.times(), time.monotonic()
    stop.set()
    for thread in threads:
        thread.join(5)
    cpu = (after.user - before.user) + (after.system - before.system)
    print(cpu / (ended - started))


def broker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=25)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=sorted(CLIENTS))
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    args = parser.parse_args()
    if args.members < 1 or args.seconds <= 0 or args.repeat < 1:
        parser.error("--members, --seconds and --repeat must be positive")
    if args.child:
        return child(args.child, args.bootstrap, args.topic, args.members, args.seconds)

    from broker.admin import create_topic
    from broker.cluster import start_cluster

    topic = f"idle-{uuid.uuid4().hex[:6]}"
    with start_cluster(1) as cluster:
        create_topic(cluster.bootstrap, topic, partitions=2 * args.members)
        pid = cluster.brokers[0].pid
        shares: dict[str, list[float]] = {name: [] for name in CLIENTS}
        broker_shares: dict[str, list[float]] = {name: [] for name in CLIENTS}
        for round_ in range(args.repeat):
            for name in CLIENTS:
                broker_before, started = broker_cpu_s(pid), time.monotonic()
                shares[name].append(measure_in_child(name, cluster.bootstrap, topic, args.members, args.seconds))
                broker_shares[name].append((broker_cpu_s(pid) - broker_before) / (time.monotonic() - started))
                print(f"round {round_ + 1}/{args.repeat} {name}: members {100 * shares[name][-1]:.1f}% of a core",
                      flush=True)
    print(f"\n{args.members} idle members, {args.seconds:.0f} s each, n = {args.repeat} per client "
          f"(median [min-max], % of one core); load average {os.getloadavg()[0]:.2f}")
    for name in CLIENTS:
        values, broker = shares[name], broker_shares[name]
        print(f"  {name:>12}: members {100 * statistics.median(values):5.1f} [{100 * min(values):.1f}-"
              f"{100 * max(values):.1f}]  broker {100 * statistics.median(broker):5.1f} "
              f"[{100 * min(broker):.1f}-{100 * max(broker):.1f}]")
    ratios = [k / max(lab, 1e-9) for k, lab in zip(shares["kafka-python"], shares["lab"], strict=True)]
    print(f"  kafka-python / lab, round by round: {statistics.median(ratios):.1f} "
          f"[{min(ratios):.1f}-{max(ratios):.1f}]")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
