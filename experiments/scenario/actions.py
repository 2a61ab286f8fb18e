"""Every timeline action, declared once: what it takes, what it hits, how long it lasts, what ends it.

One row per action in `ACTIONS`. Scenario validation reads the fields from it, the resolver the
target and the span, the runner which fault events to write and when, the summary which faults end a
member without a word. The doing is elsewhere, one class per kind of target, each named in the rows:
members in `experiments.faults.members.MemberFaults`, links in `experiments.faults.proxy.ProxyHub`,
ZooKeeper nodes and brokers in `experiments.faults.server.ServerFaults`; `experiments.faults.registry`
maps each action to the call that carries it out.

A member action on part of a shared host process (`per_process` > 1) cannot use a signal without
hitting the neighbours; where `emulated_in_shared_host` is set it goes through the host's control
channel instead (docs/scenarios.md, "Large groups").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Action(Enum):
    JOIN = "join"
    LEAVE = "leave"
    SCALE = "scale"
    ROLLING_RESTART = "rolling_restart"
    CRASH = "crash"
    PAUSE = "pause"
    RESTART = "restart"
    LINK = "link"
    ZK_KILL = "zk_kill"
    ZK_RESTART = "zk_restart"
    ZK_PAUSE = "zk_pause"
    ZK_ISOLATE = "zk_isolate"
    BROKER_KILL = "broker_kill"
    BROKER_RESTART = "broker_restart"
    COORDINATOR_KILL = "coordinator_kill"
    COORDINATOR_RESTART = "coordinator_restart"
    PHASE = "phase"


class Link(Enum):
    COORD = "coord"   # legacy: to ZooKeeper; classic, kip848: to the group coordinator
    DATA = "data"     # to the brokers (fetch)
    BOTH = "both"


class LinkFault(Enum):
    PARTITION = "partition"   # black hole: connections stay open, nothing passes
    RESET = "reset"           # connections reset (RST), new ones too
    LATENCY = "latency"       # each chunk delayed by latency_ms +- jitter_ms
    BANDWIDTH = "bandwidth"   # throughput capped at rate_kbps
    DOWN = "down"             # the proxy is disabled: connections closed, new ones closed at once


class Direction(Enum):
    BOTH = "both"
    UPSTREAM = "upstream"      # client -> server
    DOWNSTREAM = "downstream"  # server -> client


class Target(Enum):
    """What an action hits, and so which field of a timeline entry names it."""

    GROUP = "group"               # members started or stopped as the group grows or shrinks
    MEMBER = "member"             # one member (`member`)
    LINK = "link"                 # one member's link(s) (`member`, `link`)
    ZK_NODE = "zk_node"           # a ZooKeeper node (`node`)
    BROKER = "broker"             # a broker (`broker`)
    COORDINATOR = "coordinator"   # the broker leading the group's __consumer_offsets partition
    NOTHING = "nothing"           # a phase mark


class Span(Enum):
    """How long a fault is in force, i.e. its window between fault_started and fault_stopped."""

    NOT_A_FAULT = "not_a_fault"     # a membership change or a mark, written as a phase event
    INSTANT = "instant"             # stopped as soon as it started (a restart)
    TIMED = "timed"                 # `duration` seconds; a heal step ends it
    UNTIL_UNDONE = "until_undone"   # until an action that undoes it, else the final heal


@dataclass(frozen=True, kw_only=True)
class ActionSpec:
    action: Action
    target: Target
    span: Span
    fields: frozenset[str]                       # accepted besides `at` and `action`; others are typos
    required: tuple[str, ...] = ()
    undoes: frozenset[Action] = frozenset()      # faults in force on the same target that this ends
    emulated_in_shared_host: bool = False        # on part of a host process: through its control channel
    holds_links_when_emulated: bool = False      # the emulation black-holes both of the member's links
    silences_member: bool = False                # the member writes nothing more: ownership ends here
    changes_membership: bool = False             # a member joins or leaves on purpose: not a fault to a reader
    seen_by_proxy: bool = False                  # its effect is seen when traffic first meets the toxic
    min_zookeeper_nodes: int = 0                 # the ensemble it needs
    expands_into: Action | None = None           # the resolver turns it into steps of this action

    @property
    def is_fault(self) -> bool:
        return self.span is not Span.NOT_A_FAULT

    @property
    def hits_members(self) -> bool:
        return self.target in (Target.GROUP, Target.MEMBER, Target.LINK)

    @property
    def takes_a_server_down(self) -> bool:
        return self.span is Span.UNTIL_UNDONE and self.target in _SERVERS


_SERVERS = (Target.ZK_NODE, Target.BROKER, Target.COORDINATOR)
_KILLED_BROKER = frozenset({Action.BROKER_KILL, Action.COORDINATOR_KILL})

ACTIONS: dict[Action, ActionSpec] = {spec.action: spec for spec in (
    # `count` new members start (default 1). A join wave's members are started before the step and join at it
    # (experiments.run.runner); `spread_s` spreads their joins uniformly over that many seconds, drawn with the
    # scenario's seed (pods that become ready one after another), whatever the machine.
    ActionSpec(action=Action.JOIN, target=Target.GROUP, span=Span.NOT_A_FAULT, fields=frozenset({"count", "spread_s"}),
               changes_membership=True),
    # The group grows to `to` (new members) or shrinks to it, the most recently started first: all at once and
    # cleanly, or (`interval`, `how`) one member after another and/or crashed, which the resolver turns into
    # a phase mark and LEAVEs or CRASHes. Its mark names the phase `scale-to-<to>` unless `name` says otherwise.
    # Growing, it is a join wave, with `spread_s` as a join's.
    ActionSpec(action=Action.SCALE, target=Target.GROUP, span=Span.NOT_A_FAULT,
               fields=frozenset({"to", "interval", "how", "name", "spread_s"}), required=("to",), changes_membership=True),
    # `count` members restarted one after another, `interval` apart: the resolver turns it into RESTARTs.
    ActionSpec(action=Action.ROLLING_RESTART, target=Target.GROUP, span=Span.NOT_A_FAULT,
               fields=frozenset({"count", "interval", "pick"}), expands_into=Action.RESTART),
    # A clean leave: SIGTERM to its own host process, else its shared host closes just it, which is a
    # real clean close too (so never `emulated`). MemberFaults.leave.
    ActionSpec(action=Action.LEAVE, target=Target.MEMBER, span=Span.UNTIL_UNDONE, fields=frozenset({"member"}),
               required=("member",), changes_membership=True),
    # SIGKILL of its host process. Emulated: both links black-holed, then the host drops the member
    # without a word; its session expires on the server's clock. MemberFaults.crash.
    ActionSpec(action=Action.CRASH, target=Target.MEMBER, span=Span.UNTIL_UNDONE, fields=frozenset({"member"}),
               required=("member",), emulated_in_shared_host=True, holds_links_when_emulated=True,
               silences_member=True),
    # SIGSTOP for `duration`, then SIGCONT. Emulated: both links black-holed and the host stops polling
    # the member until the heal. MemberFaults.pause / MemberFaults.resume.
    ActionSpec(action=Action.PAUSE, target=Target.MEMBER, span=Span.TIMED, fields=frozenset({"member", "duration"}),
               required=("member", "duration"), emulated_in_shared_host=True, holds_links_when_emulated=True),
    # A clean stop if running, then a start under the same name; ends a crash or leave of that member.
    # Emulated: the host starts a fresh instance (a crashed one's links healed first). MemberFaults.restart.
    ActionSpec(action=Action.RESTART, target=Target.MEMBER, span=Span.INSTANT, fields=frozenset({"member"}),
               required=("member",), undoes=frozenset({Action.CRASH, Action.LEAVE}), emulated_in_shared_host=True),
    # A toxic on a member's coord and/or data link for `duration`, through its own proxies. ProxyHub.
    ActionSpec(action=Action.LINK, target=Target.LINK, span=Span.TIMED,
               fields=frozenset({"member", "link", "fault", "duration", "latency_ms", "jitter_ms", "rate_kbps",
                                 "direction"}),
               required=("member", "link", "fault", "duration"), seen_by_proxy=True),
    # SIGKILL a ZooKeeper node / start it again. ServerFaults.zk_kill / zk_restart.
    ActionSpec(action=Action.ZK_KILL, target=Target.ZK_NODE, span=Span.UNTIL_UNDONE, fields=frozenset({"node"}),
               min_zookeeper_nodes=1),
    ActionSpec(action=Action.ZK_RESTART, target=Target.ZK_NODE, span=Span.INSTANT, fields=frozenset({"node"}),
               undoes=frozenset({Action.ZK_KILL}), min_zookeeper_nodes=1),
    # Freeze a node for `duration` (SIGSTOP or docker pause). ServerFaults.zk_pause / zk_resume.
    ActionSpec(action=Action.ZK_PAUSE, target=Target.ZK_NODE, span=Span.TIMED, fields=frozenset({"node", "duration"}),
               required=("duration",), min_zookeeper_nodes=1),
    # Cut a node off from its peers (not its clients) for `duration`. ServerFaults.zk_isolate / zk_heal.
    ActionSpec(action=Action.ZK_ISOLATE, target=Target.ZK_NODE, span=Span.TIMED,
               fields=frozenset({"node", "duration"}), required=("duration",), min_zookeeper_nodes=3),
    # SIGKILL a broker / start it again on its port. ServerFaults.broker_kill / broker_restart.
    ActionSpec(action=Action.BROKER_KILL, target=Target.BROKER, span=Span.UNTIL_UNDONE, fields=frozenset({"broker"})),
    ActionSpec(action=Action.BROKER_RESTART, target=Target.BROKER, span=Span.INSTANT, fields=frozenset({"broker"}),
               undoes=_KILLED_BROKER),
    # The same on the coordinator's broker, picked before the run, so every backend loses the same broker.
    ActionSpec(action=Action.COORDINATOR_KILL, target=Target.COORDINATOR, span=Span.UNTIL_UNDONE,
               fields=frozenset()),
    ActionSpec(action=Action.COORDINATOR_RESTART, target=Target.COORDINATOR, span=Span.INSTANT, fields=frozenset(),
               undoes=_KILLED_BROKER),
    # Only marks a named phase in the events.
    ActionSpec(action=Action.PHASE, target=Target.NOTHING, span=Span.NOT_A_FAULT, fields=frozenset({"name"}),
               required=("name",)),
)}


# Accepted on every timeline entry besides its action's own fields: when, and what it waits for first.
ENTRY_FIELDS = frozenset({"at", "action", "after", "timeout"})
# `after = "stable"`: the entry's steps are taken at `at` or later, once the group is stable again (every
# member up and done rebalancing, every partition owned once, nothing moving for a moment), but no more than
# `timeout` seconds late; the rest of the timeline moves back by the wait (experiments.run.runner).
WAITS = ("stable",)


def spec_of(action: Action | str) -> ActionSpec:
    return ACTIONS[Action(action)]


# A fault event's `kind` is its action, or for a link fault the fault (`partition`, `latency`, ...).
SILENCING_KINDS: tuple[str, ...] = tuple(spec.action.value for spec in ACTIONS.values() if spec.silences_member)

# Membership changes are not faults to a reader (charts, counts, the live display), although a leave is
# written as fault events (a restart undoes it; the final heal closes it). Joins and scaling are phases.
MEMBERSHIP_KINDS: tuple[str, ...] = tuple(spec.action.value for spec in ACTIONS.values()
                                          if spec.changes_membership and spec.is_fault)
_MEMBERSHIP_PHASE = re.compile(r"(join-\d+|scale-to-\d+)")   # as `phase_name` writes them


def phase_name(action: Action | str, targets: tuple[str, ...], params: dict) -> str:
    """The phase event a membership change or a mark writes: `join-2`, `scale-to-100`, a named phase."""
    action = Action(action)
    if action is Action.PHASE:
        return str(params["name"])
    if action is Action.SCALE:
        return str(params.get("name") or f"scale-to-{params['to']}")
    return f"{action.value}-{len(targets)}"


def is_membership_phase(name: str) -> bool:
    """Whether a phase event marks a join or a scaling step (`join-2`, `scale-to-100`)."""
    return bool(_MEMBERSHIP_PHASE.fullmatch(name or ""))


# A herd sweep inside one run marks each size it measures with a phase named `herd-N`, taken once the group
# has grown to N and is stable: the changes from the mark to the next phase that is not a join's (the next
# scaling step, the next mark, the teardown) are the herd's at N (experiments.summary.herd_sizes).
_HERD_MARK = re.compile(r"herd-(\d+)")
_JOIN_PHASE = re.compile(r"join-\d+")


def herd_mark(size: int) -> str:
    """The phase name that opens the measurement of a herd sweep at group size `size`."""
    return f"herd-{size}"


def herd_mark_size(name: str | None) -> int | None:
    """The group size a `herd-N` phase mark measures at, or None for any other phase."""
    found = _HERD_MARK.fullmatch(name or "")
    return int(found.group(1)) if found else None


def is_join_phase(name: str | None) -> bool:
    """Whether a phase event is a join's (`join-1`), which a herd mark's window runs through."""
    return bool(_JOIN_PHASE.fullmatch(name or ""))
