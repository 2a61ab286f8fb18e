"""Whether a group is stable again after a membership change, read from the members' own events.

A timeline entry with `after = "stable"` waits for this before its steps are taken (experiments.run.runner):
every member that should be running is up and has finished a rebalance since it started, none has a
rebalance open, the partitions those members own are every subscribed partition, each owned once, and no
member has started or ended a rebalance or taken or given up a partition for `quiet_ns`. A newcomer whose
JoinGroup (or first heartbeat) is still unanswered has a rebalance open, so a join is stable only once
the newcomer holds its assignment and the others are done giving theirs up.

Where a coordinator records a KIP-848 group (`coordinator_event`), its state must be Stable too. The members'
own events cannot tell it: a newcomer whose first heartbeat brings an empty assignment is done, and the member
that must give it partitions hears so only at its next heartbeat, up to the heartbeat interval (5 s) later,
longer than the quiet window; every partition is owned once meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from modern.coordinator.consumer_group import (
    REMOVAL_REASONS,
    ConsumerGroupState,
    MemberState,
    group_state,
)
from rebalance import events as ev

_MOVES = (ev.MEMBER_STARTED, ev.MEMBER_STOPPED, ev.REBALANCE_STARTED, ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED,
          ev.PARTITIONS_ASSIGNED, ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST)


@dataclass
class CoordinatorView:
    """One KIP-848 group as its coordinator's events describe it: the epochs and each member's state and epoch."""

    node: object = None
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict = field(default_factory=dict)     # member id -> (MemberState, member epoch)

    def feed(self, event: dict) -> None:
        kind, member = event.get("event"), event.get("member", "")
        if kind == "group_epoch":
            self.group_epoch = int(event["group_epoch"])
            if event.get("reason") in REMOVAL_REASONS:
                self.members.pop(member, None)
        elif kind == "target_assignment":
            self.assignment_epoch = int(event["assignment_epoch"])
        elif kind == "member_state":
            self.members[member] = (MemberState(event["state"]), int(event["member_epoch"]))

    def state(self) -> ConsumerGroupState:
        return group_state(self.group_epoch, self.assignment_epoch, self.members.values())


_GROUP_EVENTS = {"group_epoch", "target_assignment", "member_state"}


@dataclass
class Settling:
    up: set = field(default_factory=set)            # started, not stopped
    done: set = field(default_factory=set)          # finished a rebalance since starting, none open since
    owned: dict = field(default_factory=dict)       # member -> partitions it holds
    last_move_ns: int = 0                           # ts_ns of the latest event of `_MOVES`
    coordinators: dict = field(default_factory=dict)   # group -> CoordinatorView (KIP-848 groups)

    def feed(self, event: dict) -> None:
        kind, member = event.get("type"), event.get("member", "")
        if kind == ev.COORDINATOR_EVENT:
            self._coordinator(event)
            return
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

    def _coordinator(self, event: dict) -> None:
        """A coordinator's account of a KIP-848 group. A group loaded or unloaded (a coordinator moved) is known
        again only from what its new coordinator records next; a coordinator that died records nothing more."""
        group, kind, node = event.get("group"), event.get("event"), event.get("node")
        if kind in ("loaded", "unloaded"):
            self.coordinators.pop(group, None)
            return
        if kind not in _GROUP_EVENTS:
            return
        view = self.coordinators.get(group)
        if view is None or view.node != node:
            view = self.coordinators[group] = CoordinatorView(node=node)
        view.feed(event)

    def unsettled_groups(self) -> list[str]:
        """The KIP-848 groups whose coordinator has them other than Stable."""
        states = {group: view.state() for group, view in self.coordinators.items()}
        return [f"{group}: {state.value}" for group, state in states.items() if state is not ConsumerGroupState.STABLE]

    def stable(self, members: Iterable[str], partitions: set[str], *, now_ns: int, quiet_ns: int) -> bool:
        """`members` (the ids their events carry) all up and done, `partitions` owned once among them, the
        coordinator's KIP-848 group (if it records one) Stable, and nothing moving for `quiet_ns`."""
        members = set(members)
        if not members <= self.up or not members <= self.done or self.unsettled_groups():
            return False
        claims = [partition for member in members for partition in self.owned.get(member, ())]
        if len(claims) != len(set(claims)) or set(claims) != partitions:
            return False
        return now_ns - self.last_move_ns >= quiet_ns

    def why_not(self, members: Iterable[str], partitions: set[str]) -> str:
        """What keeps the group from stable, in a few words (for the run's record)."""
        members = set(members)
        claims = [partition for member in members for partition in self.owned.get(member, ())]
        groups = "".join(f", coordinator: {group}" for group in self.unsettled_groups())
        return (f"{len(members - self.up)} of {len(members)} members not up, {len(members - self.done)} not done "
                f"rebalancing, {len(partitions - set(claims))} partitions unowned, "
                f"{len(claims) - len(set(claims))} owned twice{groups}")


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
