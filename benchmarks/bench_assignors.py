"""How long each assignor takes on a large group, and where the optimal solver stops.

    .venv/bin/python benchmarks/bench_assignors.py [--members 1000] [--partitions 10000] [--topics 10]

Prints figures only; nothing here asserts about time.
1. a fresh group, every member on every topic;
2. one member joins a settled group (sticky strategies see what members own);
3. unequal subscriptions (each member on half the topics);
4. the optimal solver: flow-network size and time as groups grow, up to its edge limit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from rebalance.assignors import cooperative_rounds, get_assignor, solve_optimal
from rebalance.assignors.base import Group
from rebalance.assignors.checks import moves, spread
from rebalance.assignors.optimal import MAX_FLOW_WORK
from rebalance.types import Subscription

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "optimal", "legacy-range", "legacy-roundrobin")


def timed(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def owners(result):
    return {m: a.partitions for m, a in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10_000, help="in total, spread evenly over the topics")
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is printed")
    args = parser.parse_args()

    topics = {f"topic{i:02d}": args.partitions // args.topics for i in range(args.topics)}
    members = [f"member-{i:05d}" for i in range(args.members)]
    total = sum(topics.values())
    print(f"group: {args.members} members, {total} partitions over {args.topics} topics; median of {args.repeat} runs")

    print("\n1. fresh group, identical subscriptions")
    fresh = {m: Subscription(tuple(topics)) for m in members}
    settled = None
    for name in STRATEGIES:
        seconds, result = timed(lambda n=name: get_assignor(n).assign(topics, fresh), args.repeat)
        print(f"   {name:20s} {seconds:8.3f} s   spread {spread(owners(result))}")
        if name == "sticky":
            settled = owners(result)

    print("\n2. one member joins the settled (sticky) group")
    joined = {m: Subscription(tuple(topics), settled[m], 1) for m in members}
    joined["member-new"] = Subscription(tuple(topics))
    for name in ("range", "roundrobin", "sticky", "optimal"):
        seconds, result = timed(lambda n=name: get_assignor(n).assign(topics, joined), args.repeat)
        print(f"   {name:20s} {seconds:8.3f} s   moved {moves(settled, owners(result))}"
              f"   spread {spread(owners(result))}")
    seconds, rounds = timed(lambda: cooperative_rounds(topics, joined), args.repeat)
    print(f"   {'cooperative-sticky':20s} {seconds:8.3f} s   moved {moves(settled, owners(rounds[-1]))}"
          f" over {len(rounds)} rounds (both rounds timed)")

    print("\n3. unequal subscriptions (each member on a random half of the topics)")
    rng = random.Random(42)
    half = max(1, args.topics // 2)
    unequal = {m: Subscription(tuple(sorted(rng.sample(sorted(topics), half)))) for m in members}
    for name in ("range", "roundrobin", "sticky", "optimal"):
        seconds, result = timed(lambda n=name: get_assignor(n).assign(topics, unequal), args.repeat)
        print(f"   {name:20s} {seconds:8.3f} s   spread {spread(owners(result))}")

    print(f"\n4. optimal solver (min-cost flow; refuses nodes x edges above {MAX_FLOW_WORK:,})")
    print("   members  partitions  topics  subscription sets  flow nodes  flow edges    seconds")
    for count, parts, topic_count, mixed in (
        (1_000, 10_000, 10, False),
        (2_000, 20_000, 10, False),
        (4_000, 40_000, 10, False),
        (8_000, 80_000, 10, False),
        (300, 3_000, 100, True),
        (600, 6_000, 100, True),
        (1_000, 10_000, 100, True),
        (2_000, 20_000, 100, True),
    ):
        _optimal_row(count, parts, topic_count, mixed)


def _optimal_row(count: int, parts: int, topic_count: int, mixed: bool) -> None:
    rng = random.Random(count)
    topics = {f"t{i:03d}": parts // topic_count for i in range(topic_count)}
    names = sorted(topics)
    subs = {
        f"m{i:05d}": Subscription(tuple(sorted(rng.sample(names, topic_count // 2))) if mixed else tuple(names))
        for i in range(count)
    }
    sets = len({s.topics for s in subs.values()})
    start = time.perf_counter()
    try:
        solution = solve_optimal(Group.of(topics, subs))
    except ValueError as error:
        print(f"   {count:7d}  {parts:10d}  {topic_count:6d}  {sets:17d}  refused ({error})")
        return
    seconds = time.perf_counter() - start
    print(f"   {count:7d}  {parts:10d}  {topic_count:6d}  {sets:17d}  {solution.flow_nodes:10,d}"
          f"  {solution.flow_edges:10,d}  {seconds:9.2f}")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
