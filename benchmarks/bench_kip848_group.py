"""What one membership change costs a KIP-848 group, measured on the sans-I/O group itself.

A group of N members (each subscribed to one topic of 2N partitions, `uniform` assignor) is
brought to a stable state; then one member joins, or one leaves. Every member heartbeats once per
round, in member order, reporting what it owns (as a client does after a change). Printed per N:

  rounds          heartbeat rounds until every member is stable at the new assignment epoch
  beats changed   heartbeats whose answer changed an assignment (the protocol's work for this change)
  members moved   members whose partitions changed
  revoked         partitions that changed owner
  target ms       coordinator CPU for the heartbeat that recomputed the target (median, min-max of n)

    .venv/bin/python benchmarks/bench_kip848_group.py                  # N = 5, 10, 100, 500, 1000
    .venv/bin/python benchmarks/bench_kip848_group.py --sizes 50 --repeat 9
"""

from __future__ import annotations

import argparse
import statistics
import time

from modern.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    MemberState,
)


class Members:
    def __init__(self, partitions: int) -> None:
        self.topics = {"t": partitions}
        self.group = ConsumerGroup("bench", ConsumerGroupConfig())
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, frozenset] = {}
        self.now = 0

    def beat(self, member: str, epoch: int | None = None) -> tuple[bool, float]:
        epoch = self.epoch.get(member, 0) if epoch is None else epoch
        joining = epoch == 0
        request = HeartbeatRequest(member_id=member, member_epoch=epoch, member_id_from_client=True,
                                   rebalance_timeout_ms=60_000 if joining else -1,
                                   subscribed_topics=("t",) if joining else None,
                                   owned=None if joining else self.owned.get(member, frozenset()))
        started = time.perf_counter()
        result = self.group.heartbeat(request, self.topics, self.now).result
        elapsed = time.perf_counter() - started
        changed = False
        if epoch >= 0:
            self.epoch[member] = result.member_epoch
            if result.assignment is not None and result.assignment != self.owned.get(member, frozenset()):
                self.owned[member] = result.assignment
                changed = True
        return changed, elapsed

    def settle(self) -> tuple[int, int]:
        """Rounds of heartbeats until everybody is stable; (rounds, heartbeats that changed something)."""
        rounds = changed = 0
        while not self.stable():
            rounds += 1
            for member in sorted(self.group.members):
                changed += self.beat(member)[0]
        return rounds, changed

    def stable(self) -> bool:
        epoch = self.group.assignment_epoch
        return all(m.state is MemberState.STABLE and m.member_epoch == epoch for m in self.group.members.values())


def measure(size: int, change: str) -> dict[str, float]:
    members = Members(2 * size)
    for index in range(size):
        members.beat(f"m{index:05d}")
    members.settle()
    before = dict(members.owned)
    if change == "join":
        _, target_s = members.beat("newcomer")
    else:
        target_s = 0.0
        started = time.perf_counter()
        members.beat("m00000", epoch=-1)
        target_s = time.perf_counter() - started
        members.owned.pop("m00000")
    rounds, changed = members.settle()
    moved = [m for m in members.owned if members.owned[m] != before.get(m, frozenset())]
    revoked = sum(len(before[m] - members.owned.get(m, frozenset())) for m in before if m in members.owned)
    revoked += len(before.get("m00000", ())) if change == "leave" else 0
    return {"rounds": rounds, "changed": changed, "moved": len(moved), "revoked": revoked, "target_ms": target_s * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 100, 500, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'change':>6} {'N':>5} {'rounds':>6} {'beats changed':>13} {'members moved':>13} {'revoked':>7} "
          f"{'target ms (median, min-max, n)':>32}")
    for size in args.sizes:
        for change in ("join", "leave"):
            runs = [measure(size, change) for _ in range(args.repeat)]
            first = runs[0]
            timings = [r["target_ms"] for r in runs]
            print(f"{change:>6} {size:>5} {first['rounds']:>6} {first['changed']:>13} {first['moved']:>13} "
                  f"{first['revoked']:>7} {statistics.median(timings):>12.2f} "
                  f"({min(timings):.2f}-{max(timings):.2f}, n={len(timings)})", flush=True)


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
