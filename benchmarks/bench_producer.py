"""What the experiments' producer costs its process: records sent one at a time against a tick's worth at once.

    .venv/bin/python benchmarks/bench_producer.py [--rate 600] [--seconds 15] [--repeat 3]

One broker in its own process and a topic of 50 partitions. In a fresh process each, the producer runs for
`--seconds` at `--rate` records a second, paced either as it is (`ticks`: the token bucket drained every
`PACE_TICK_S`, the records due sent together) or record by record (`one-by-one`: a token taken and a record
sent each time one is due, the producer's earlier pacing). The process's CPU time (user + system) over the
run, its start and imports excluded, is printed as a share of one core, alternating the two `--repeat`
times, with the broker's share beside it. At seed 002's 600 records/s every share taken here is taken from
the members of a two-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

PACINGS = ("ticks", "one-by-one")


def child(pacing: str, bootstrap: str, topic: str, rate: float, seconds: float) -> None:
    import broker.workload as workload

    if pacing == "one-by-one":   # at most one token a wake, as before the ticks
        take_all = workload.TokenBucket.take_all
        workload.TokenBucket.take_all = lambda self, now, at_most=None: take_all(self, now, at_most=1)
        workload.PACE_TICK_S = 0.0
    config = workload.WorkloadConfig(bootstrap=bootstrap, topic=topic, partitions=50, rate=rate,
                                     duration_s=seconds, create_topic=False)
    producer = workload.ProducerWorkload(config)
    before, started = os.times(), time.monotonic()
    summary = producer.run()
    after, ended = os.times(), time.monotonic()
    if summary.failed or summary.acknowledged != summary.sent:
        raise SystemExit(f"{pacing}: {summary.failed} records failed of {summary.sent}")
    cpu = (after.user - before.user) + (after.system - before.system)
    print(cpu / (ended - started))


def measure_in_child(pacing: str, bootstrap: str, topic: str, rate: float, seconds: float) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", pacing, "--bootstrap", bootstrap, "--topic", topic,
                          "--rate", str(rate), "--seconds", str(seconds)],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def broker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=600.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=PACINGS)
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    args = parser.parse_args()
    if args.rate <= 0 or args.seconds <= 0 or args.repeat < 1:
        parser.error("--rate, --seconds and --repeat must be positive")
    if args.child:
        return child(args.child, args.bootstrap, args.topic, args.rate, args.seconds)

    from broker.admin import create_topic
    from broker.cluster import start_cluster

    topic = f"produce-{uuid.uuid4().hex[:6]}"
    with start_cluster(1) as cluster:
        create_topic(cluster.bootstrap, topic, partitions=50)
        pid = cluster.brokers[0].pid
        shares: dict[str, list[float]] = {name: [] for name in PACINGS}
        broker_shares: dict[str, list[float]] = {name: [] for name in PACINGS}
        for round_ in range(args.repeat):
            for name in PACINGS:
                broker_before, started = broker_cpu_s(pid), time.monotonic()
                shares[name].append(measure_in_child(name, cluster.bootstrap, topic, args.rate, args.seconds))
                broker_shares[name].append((broker_cpu_s(pid) - broker_before) / (time.monotonic() - started))
                print(f"round {round_ + 1}/{args.repeat} {name}: producer {100 * shares[name][-1]:.1f}% of a core",
                      flush=True)
    print(f"\n{args.rate:.0f} records/s over 50 partitions, {args.seconds:.0f} s each, n = {args.repeat} per pacing "
          f"(median [min-max], % of one core); load average {os.getloadavg()[0]:.2f}")
    for name in PACINGS:
        values, broker = shares[name], broker_shares[name]
        print(f"  {name:>10}: producer {100 * statistics.median(values):5.1f} [{100 * min(values):.1f}-"
              f"{100 * max(values):.1f}]  broker {100 * statistics.median(broker):5.1f} "
              f"[{100 * min(broker):.1f}-{100 * max(broker):.1f}]")
    ratios = [t / max(o, 1e-9) for t, o in zip(shares["ticks"], shares["one-by-one"], strict=True)]
    print(f"  ticks / one-by-one, round by round: {statistics.median(ratios):.2f} "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
