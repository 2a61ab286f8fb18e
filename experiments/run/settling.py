"""Whether a group is stable again after a membership change, read from the members' own events.

A timeline entry with `after = "stable"` waits for this before its steps are taken (experiments.run.runner):
every member that should be running is up and has finished a rebalance since it started, none has a
rebalance open, the partitions those members own are every subscribed partition, each owned once, and no
member has started or ended a rebalance or taken or given up a partition for `quiet_ns`. A newcomer whose
JoinGroup (or first heartbeat) is still unanswered has a rebalance open, so a join is stable only once
the newcomer holds its assignment and the others are done giving theirs up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rebalance import events as ev

_MOVES = (ev.MEMBER_STARTED, ev.MEMBER_STOPPED, ev.REBALANCE_STARTED, ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED,
          ev.PARTITIONS_ASSIGNED, ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST)


@dataclass
class Settling:
    up: set = field(default_factory=set)            # started, not stopped
    done: set = field(default_factory=set)          # finished a rebalance since starting, none open since
    owned: dict = field(default_factory=dict)       # member -> partitions it holds
    last_move_ns: int = 0                           # ts_ns of the latest event of `_MOVES`

    def feed(self, event: dict) -> None:
        kind, member = event.get("type"), event.get("member", "")
        if kind not in _MOVES:
            return
        self.last_move_ns = max(self.last_move_ns, int(event.get("ts_ns") or 0))
        if kind == ev.MEMBER_STARTED:
            self.up.add(member)
            self.done.discard(member)
            self.owned.pop(member, None)
        elif kind == ev.MEMBER_STOPPED:
            self.up.discard(member)
            self.done.discard(member)
            self.owned.pop(member, None)
        elif kind == ev.REBALANCE_COMPLETED:
            self.done.add(member)
        elif kind in (ev.REBALANCE_STARTED, ev.REBALANCE_FAILED):
            self.done.discard(member)
        elif kind == ev.PARTITIONS_ASSIGNED:
            self.owned.setdefault(member, set()).update(event.get("partitions") or [])
        else:
            self.owned.setdefault(member, set()).difference_update(event.get("partitions") or [])

    def stable(self, members: Iterable[str], partitions: set[str], *, now_ns: int, quiet_ns: int) -> bool:
        """`members` (the ids their events carry) all up and done, `partitions` owned once among them, and
        nothing moving for `quiet_ns`."""
        members = set(members)
        if not members <= self.up or not members <= self.done:
            return False
        claims = [partition for member in members for partition in self.owned.get(member, ())]
        if len(claims) != len(set(claims)) or set(claims) != partitions:
            return False
        return now_ns - self.last_move_ns >= quiet_ns

    def why_not(self, members: Iterable[str], partitions: set[str]) -> str:
        """What keeps the group from stable, in a few words (for the run's record)."""
        members = set(members)
        claims = [partition for member in members for partition in self.owned.get(member, ())]
        return (f"{len(members - self.up)} of {len(members)} members not up, {len(members - self.done)} not done "
                f"rebalancing, {len(partitions - set(claims))} partitions unowned, "
                f"{len(claims) - len(set(claims))} owned twice")


def running_before(schedule, index: int) -> list[str]:
    """The members that should be running when step `index` of `schedule` (an experiments.scenario Schedule)
    is taken: the first members, with every earlier join, scaling, leave, crash and restart applied."""
    running = dict.fromkeys(schedule.initial_members)
    for step in schedule.steps[:index]:
        if step.op != "start":
            continue
        if step.action in ("leave", "crash") or (step.action == "scale" and set(step.targets) <= set(running)):
            for name in step.targets:
                running.pop(name, None)
        elif step.action in ("join", "scale", "restart"):
            running.update(dict.fromkeys(step.targets))
    return list(running)
