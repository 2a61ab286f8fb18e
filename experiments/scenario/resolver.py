"""From a declared timeline to a concrete schedule: every "random" target picked with the scenario's
seed, every scale and rolling restart expanded into single steps, every fault with a duration
followed by its heal. Deterministic in the scenario and its seed, so the runs of one file, on
`legacy`, `classic` and `kip848`, get the same steps at the same times on the same targets.

One method per action on `_Resolver`; what each action is (its target, its span, what undoes it,
whether it is emulated on part of a shared host) comes from experiments/scenario/actions.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from experiments.scenario.actions import ACTIONS, Action, Link, LinkFault, Target, herd_mark_size, phase_name
from experiments.scenario.model import (
    MAX_MEMBERS,
    Host,
    Problem,
    Scenario,
    ScenarioError,
    Schedule,
    Step,
    TimelineEntry,
    member_name,
)
from rebalance.javahash import coordinator_partition

ROLLING_INTERVAL_S = 5.0


def coordinator_broker(group: str, brokers: int) -> int:
    """The broker leading the group's __consumer_offsets partition: leaders are spread round-robin."""
    return coordinator_partition(group) % brokers


def resolve(scenario: Scenario) -> Schedule:
    """Expand the timeline into concrete steps, or raise ScenarioError with every impossible step."""
    resolver = _Resolver(scenario)
    for counter, entry in enumerate(scenario.timeline, start=1):
        resolver.entry(entry, f"f{counter:03d}")
    if resolver.problems:
        raise ScenarioError(scenario.source or "<scenario>", resolver.problems)
    steps = sorted(resolver.steps, key=lambda step: (step.at, step.op != "heal", step.fault_id))
    return Schedule(seed=scenario.seed, initial_members=resolver.initial, hosts=tuple(resolver.group.hosts),
                    coordinator_broker=resolver.coordinator, steps=tuple(steps))


def waits_of(entry: TimelineEntry) -> dict[str, object]:
    """What a step waits for before it is taken (`after`, `timeout`), as its params carry it to the runner."""
    return {"after": entry.after, "timeout": entry.timeout} if entry.after else {}


class _Membership:
    """The group as the timeline changes it, for picking targets and catching impossible steps."""

    def __init__(self, per_process: int) -> None:
        self.per_process = per_process
        self.next_index = 0
        self.names: list[str] = []       # every member ever started, by index
        self.running: list[str] = []     # started, not crashed, not left (paused ones included)
        self.paused_until: dict[str, float] = {}
        self.crashed: set[str] = set()
        self.left: set[str] = set()
        self.hosts: list[Host] = []
        self._host_by_member: dict[str, Host] = {}   # host_of in one look-up: a group may have thousands
        self.hosts_down: set[str] = set()   # host processes stopped or killed as a whole

    def whole_hosts(self, names: Iterable[str]) -> bool:
        """Whether `names` are every member of each host process they are in (then process signals
        serve; otherwise the members are acted on one by one through the host's control channel)."""
        names = set(names)
        return all(set(self.host_of(name).members) <= names for name in names)

    def is_paused(self, member: str, at: float) -> bool:
        return self.paused_until.get(member, -1.0) > at

    def add(self, count: int) -> list[str]:
        names: list[str] = []
        for start in range(0, count, self.per_process):
            size = min(self.per_process, count - start)
            host = f"h{len(self.hosts):03d}"
            # Shared hosts name their members HOST-0..HOST-K-1, as `rebalance-lab member --count` does.
            chunk = ((member_name(self.next_index),) if self.per_process == 1
                     else tuple(f"{host}-{offset}" for offset in range(size)))
            self.hosts.append(Host(name=host, members=chunk))
            self._host_by_member.update(dict.fromkeys(chunk, self.hosts[-1]))
            self.next_index += size
            names.extend(chunk)
        self.names.extend(names)
        self.running.extend(names)
        return names

    def remove(self, names: Iterable[str], *, crashed: bool) -> None:
        names = list(names)
        gone = set(names)
        if not gone <= set(self.running):
            raise ValueError(f"not running: {sorted(gone - set(self.running))}")
        self.running = [name for name in self.running if name not in gone]   # one pass: thousands may go at once
        (self.crashed if crashed else self.left).update(names)
        for host in {self.host_of(name).name: self.host_of(name) for name in names}.values():
            if set(host.members) <= gone:   # a host whose members are all gone is down as a process
                self.hosts_down.add(host.name)

    def bring_back(self, names: Iterable[str]) -> None:
        for name in names:
            self.crashed.discard(name)
            self.left.discard(name)
            if name not in self.running:
                self.running.append(name)

    def host_of(self, member: str) -> Host:
        return self._host_by_member[member]


class _Resolver:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        self.group = _Membership(scenario.group.per_process)
        self.initial = tuple(self.group.add(scenario.group.members))
        self.shared = scenario.group.per_process > 1
        self.coordinator = coordinator_broker(scenario.group.name, scenario.cluster.brokers)
        self.steps: list[Step] = []
        self.problems: list[Problem] = []
        self.busy: dict[tuple[str, str], tuple[float, int]] = {}   # (target, what) -> (fault end, line)
        self.zk_down: set[int] = set()
        self.brokers_down: set[int] = set()

    def entry(self, entry: TimelineEntry, fault_id: str) -> None:
        self.entry_now, self.fault_id = entry, fault_id
        getattr(self, RESOLVED_BY[entry.action])(entry)

    # ---- helpers

    def add(self, *, op: str = "start", at: float | None = None, **fields) -> None:
        entry = self.entry_now
        if op == "start":
            fields["params"] = {**fields.get("params", {}), **waits_of(entry)}
        self.steps.append(Step(at=entry.at if at is None else at, fault_id=self.fault_id, op=op,
                               action=entry.action.value, line=entry.line, **fields))

    def add_with_heal(self, duration: float, **fields) -> None:
        """A timed fault: its start now, its heal `duration` later."""
        self.add(**fields)
        self.add(op="heal", at=self.entry_now.at + duration, **fields)

    def fail(self, entry: TimelineEntry, key: str, message: str) -> None:
        self.problems.append(Problem(f"timeline[{entry.index}].{key}", entry.line_of(key), message))

    def new_members(self, entry: TimelineEntry, count: int) -> tuple[str, ...]:
        """Members started by a step; a timeline may start at most MAX_MEMBERS in all (a file that scales
        up and down by tens of thousands again and again would take minutes to expand)."""
        if self.group.next_index + count > MAX_MEMBERS:
            self.fail(entry, "count" if entry.count else "to",
                      f"the timeline starts {self.group.next_index + count:,} members in all by {entry.at} s; "
                      f"at most {MAX_MEMBERS:,}")
            return ()
        return tuple(self.group.add(count))

    def out_of_range(self, entry: TimelineEntry) -> None:
        self.fail(entry, "member", f"member {entry.member} is out of range: at {entry.at} s the group has had "
                                   f"{self.group.next_index} member(s), numbered from 0")

    def pick_member(self, entry: TimelineEntry, *, exclude_paused: bool) -> str | None:
        group = self.group
        candidates = [name for name in group.running if not (exclude_paused and group.is_paused(name, entry.at))]
        if entry.member in ("random", "last"):
            if not candidates:
                self.fail(entry, "member", f"no member to pick at {entry.at} s")
                return None
            return self.rng.choice(candidates) if entry.member == "random" else candidates[-1]
        if entry.member >= group.next_index:
            self.out_of_range(entry)
            return None
        name = group.names[entry.member]
        if name not in candidates:
            state = ("crashed" if name in group.crashed else "gone (left)" if name in group.left
                     else "paused" if group.is_paused(name, entry.at) else "not running")
            self.fail(entry, "member", f"member {entry.member} is {state} at {entry.at} s")
            return None
        return name

    def claim(self, entry: TimelineEntry, target: str, what: str, end: float) -> bool:
        """Faults on one target (a member's process or link, a ZooKeeper node) must not overlap."""
        previous = self.busy.get((target, what))
        if previous and previous[0] > entry.at:
            self.fail(entry, "at", f"{target} ({what}) already has a fault until {previous[0]} s "
                                   f"(line {previous[1]}); faults on one target must not overlap")
            return False
        self.busy[(target, what)] = (end, entry.line)
        return True

    def emulated(self, action: Action, names: Iterable[str]) -> bool:
        """On part of a shared host, a member action goes through the host's control channel."""
        return ACTIONS[action].emulated_in_shared_host and self.shared and not self.group.whole_hosts(names)

    def node_index(self, value: int | str | None, limit: int) -> int:
        if value == "random":
            return self.rng.randrange(limit)
        return 0 if value is None else int(value)

    # ---- membership changes

    def phase(self, entry: TimelineEntry) -> None:
        size = herd_mark_size(entry.name)
        if size is not None and size != len(self.group.running):
            self.fail(entry, "name", f"{entry.name} marks the herd at N = {size}, but at {entry.at} s the group "
                                     f"has {len(self.group.running)} members (a `scale` to {size} goes first)")
            return
        self.add(targets=(), params={"name": entry.name})

    def join(self, entry: TimelineEntry) -> None:
        targets = self.new_members(entry, entry.count or 1)
        self.add(targets=targets, params=self.spread(entry, targets))

    def spread(self, entry: TimelineEntry, targets: tuple[str, ...]) -> dict[str, object]:
        """A join wave's start offsets, one per target in order: uniform over `spread_s`, drawn with the
        scenario's seed and the step's place in the timeline (the same on every backend)."""
        if not entry.spread_s:
            return {}
        draw = random.Random(f"{self.scenario.seed}/spread/{entry.index}")
        return {"spread_s": entry.spread_s,
                "start_offsets_s": [round(draw.uniform(0, entry.spread_s), 3) for _ in targets]}

    def scale(self, entry: TimelineEntry) -> None:
        current = len(self.group.running)
        one_by_one = entry.interval is not None or entry.how != "leave"
        params = {"to": entry.to, **({"name": entry.name} if entry.name else {})}   # `name`: the mark's phase
        if entry.to > current:
            if one_by_one:
                self.fail(entry, "interval" if entry.interval is not None else "how",
                          "`interval` and `how` shape a scale down; this scale grows the group")
                return
            targets = self.new_members(entry, entry.to - current)
            self.add(targets=targets, params={**params, **self.spread(entry, targets)})
        elif entry.to < current:
            if entry.spread_s:
                self.fail(entry, "spread_s", "`spread_s` spreads a join wave; this scale shrinks the group")
                return
            names = self.group.running[entry.to:]   # the most recently started leave first
            if one_by_one:
                self.depart_one_by_one(entry, names[::-1])
                return
            self.group.remove(names, crashed=False)
            self.add(targets=tuple(names), params=params)

    def depart_one_by_one(self, entry: TimelineEntry, names: list[str]) -> None:
        """A scale down as single departures: the phase mark a scale writes (carrying the entry's wait), then a
        clean leave or a crash per member, `interval` apart (0 or unset: together), as pods deleted one by one."""
        action = Action.CRASH if entry.how == "crash" else Action.LEAVE
        interval = entry.interval or 0.0
        last_at = entry.at + (len(names) - 1) * interval
        if last_at >= self.scenario.duration:
            self.fail(entry, "interval", f"the last of {len(names)} departures would fall at {last_at} s, "
                                         f"after the end of the timeline ({self.scenario.duration} s)")
            return
        mark = phase_name(Action.SCALE, (), {"to": entry.to, "name": entry.name})
        self.steps.append(Step(at=entry.at, fault_id=self.fault_id, op="start", action=Action.PHASE.value,
                               targets=(), line=entry.line, params={"name": mark, **waits_of(entry)}))
        width = len(str(len(names) - 1))   # ids that sort in the order the members go (steps sort by id)
        for position, name in enumerate(names):
            self.group.remove([name], crashed=action is Action.CRASH)
            self.steps.append(Step(at=entry.at + position * interval, fault_id=f"{self.fault_id}.{position:0{width}d}",
                                   op="start", action=action.value, targets=(name,), line=entry.line,
                                   params={"scale": self.fault_id}, emulated=self.emulated(action, [name])))

    # ---- member faults

    def leave(self, entry: TimelineEntry) -> None:
        name = self.pick_member(entry, exclude_paused=False)
        if name is not None:
            self.group.remove([name], crashed=False)
            self.add(targets=(name,), emulated=self.emulated(Action.LEAVE, [name]))

    def restart(self, entry: TimelineEntry) -> None:
        if entry.member in ("random", "last"):
            name = self.pick_member(entry, exclude_paused=True)
        elif entry.member >= self.group.next_index:
            name = None
            self.out_of_range(entry)
        elif self.group.is_paused(self.group.names[entry.member], entry.at):
            name = None
            self.fail(entry, "member", f"member {entry.member} is paused at {entry.at} s")
        else:
            name = self.group.names[entry.member]   # a crashed or departed member may be restarted
        if name is None:
            return
        host = self.group.host_of(name)
        # A host process that is down comes back whole, with all of its members.
        targets = host.members if host.name in self.group.hosts_down else (name,)
        self.group.hosts_down.discard(host.name)
        self.group.bring_back(targets)
        self.add(targets=tuple(targets), emulated=self.emulated(Action.RESTART, targets))

    def rolling_restart(self, entry: TimelineEntry) -> None:
        count = entry.count or 1
        candidates = [name for name in self.group.running if not self.group.is_paused(name, entry.at)]
        if count > len(candidates):
            self.fail(entry, "count", f"cannot restart {count} members: {len(candidates)} are running at {entry.at} s")
            return
        chosen = self.rng.sample(candidates, count) if entry.pick == "random" else candidates[:count]
        # A host covered whole restarts as a process; members of a host covered in part one by one.
        units: list[tuple[str, ...]] = []
        picked, whole_hosts = set(chosen), set()   # one pass: a restart may cover tens of thousands of members
        for name in chosen:
            host = self.group.host_of(name)
            if not picked.issuperset(host.members):
                units.append((name,))
            elif host.name not in whole_hosts:
                whole_hosts.add(host.name)
                units.append(host.members)
        interval = entry.interval if entry.interval is not None else ROLLING_INTERVAL_S
        for position, unit in enumerate(units):
            at = entry.at + position * interval
            if at >= self.scenario.duration:
                self.fail(entry, "interval", f"restart {position + 1} of {len(units)} would fall at {at} s, "
                                             f"after the end of the timeline ({self.scenario.duration} s)")
                return
            self.steps.append(Step(at=at, fault_id=f"{self.fault_id}.{position}", op="start",
                                   action=Action.RESTART.value, targets=tuple(unit), line=entry.line,
                                   params={"rolling": self.fault_id, **waits_of(entry)},
                                   emulated=self.emulated(Action.RESTART, unit)))

    def hold(self, entry: TimelineEntry, name: str, end: float) -> bool | None:
        """Claim the member's process (and, when the fault is emulated, its links, which the emulation
        black-holes) until `end`; whether the fault is emulated, or None if something else holds them."""
        fake = self.emulated(entry.action, [name])
        held = ("process", "coord", "data") if fake and ACTIONS[entry.action].holds_links_when_emulated \
            else ("process",)
        if not all(self.claim(entry, name, what, end) for what in held):
            return None
        return fake

    def crash(self, entry: TimelineEntry) -> None:
        name = self.pick_member(entry, exclude_paused=True)
        fake = None if name is None else self.hold(entry, name, entry.at)
        if fake is not None:
            self.group.remove([name], crashed=True)
            self.add(targets=(name,), emulated=fake)

    def pause(self, entry: TimelineEntry) -> None:
        name = self.pick_member(entry, exclude_paused=True)
        fake = None if name is None else self.hold(entry, name, entry.at + entry.duration)
        if fake is not None:
            self.group.paused_until[name] = entry.at + entry.duration
            self.add_with_heal(entry.duration, targets=(name,), params={"duration": entry.duration}, emulated=fake)

    # ---- links

    def link(self, entry: TimelineEntry) -> None:
        name = self.pick_member(entry, exclude_paused=False)
        if name is None:
            return
        # Every member has links (and proxies) of its own, shared host or not.
        links = ("coord", "data") if entry.link is Link.BOTH else (entry.link.value,)
        if not all(self.claim(entry, name, link, entry.at + entry.duration) for link in links):
            return
        params = {"fault": entry.fault.value, "duration": entry.duration, "direction": entry.direction.value}
        if entry.fault is LinkFault.LATENCY:
            params.update(latency_ms=entry.latency_ms, jitter_ms=entry.jitter_ms)
        if entry.fault is LinkFault.BANDWIDTH:
            params.update(rate_kbps=entry.rate_kbps)
        self.add_with_heal(entry.duration, targets=(name,), link=entry.link.value, params=params)

    # ---- servers

    def server_target(self, entry: TimelineEntry) -> tuple[set[int], int, str]:
        """The servers that are down of the entry's kind, the index it names, and its target name."""
        cluster = self.scenario.cluster
        target = ACTIONS[entry.action].target
        if target is Target.ZK_NODE:
            node = self.node_index(entry.node, cluster.zookeeper_nodes)
            return self.zk_down, node, f"zk-{node}"
        if target is Target.COORDINATOR:
            return self.brokers_down, self.coordinator, f"broker-{self.coordinator}"
        broker = self.node_index(entry.broker, cluster.brokers)
        return self.brokers_down, broker, f"broker-{broker}"

    def server(self, entry: TimelineEntry) -> None:
        """A kill (the server stays down until a restart) or a restart."""
        down, index, target = self.server_target(entry)
        spec = ACTIONS[entry.action]
        if spec.takes_a_server_down:
            if index in down:
                key = "node" if target.startswith("zk-") else "broker"
                self.fail(entry, key, f"{'ZooKeeper node' if key == 'node' else 'broker'} {index} is already "
                                      f"down at {entry.at} s")
                return
            down.add(index)
        else:
            down.discard(index)
        self.add(targets=(target,))

    def timed_server(self, entry: TimelineEntry) -> None:
        """A pause or an isolation of a ZooKeeper node, healed after `duration`."""
        _, _, target = self.server_target(entry)
        if self.claim(entry, target, "node", entry.at + entry.duration):
            self.add_with_heal(entry.duration, targets=(target,), params={"duration": entry.duration})


# Which of the resolver's methods turns each action of the table (experiments.scenario.actions.ACTIONS) into
# steps: checked against the table when this module loads, as the fault registry checks its handlers.
RESOLVED_BY: dict[Action, str] = {
    Action.PHASE: "phase", Action.JOIN: "join", Action.SCALE: "scale", Action.LEAVE: "leave",
    Action.RESTART: "restart", Action.ROLLING_RESTART: "rolling_restart", Action.CRASH: "crash",
    Action.PAUSE: "pause", Action.LINK: "link",
    Action.ZK_KILL: "server", Action.ZK_RESTART: "server", Action.ZK_PAUSE: "timed_server",
    Action.ZK_ISOLATE: "timed_server", Action.BROKER_KILL: "server", Action.BROKER_RESTART: "server",
    Action.COORDINATOR_KILL: "server", Action.COORDINATOR_RESTART: "server",
}
_unresolved = sorted(action.value for action in set(ACTIONS) ^ set(RESOLVED_BY))
_unresolved += sorted(name for name in set(RESOLVED_BY.values()) if not hasattr(_Resolver, name))
if _unresolved:
    raise RuntimeError(f"actions the resolver has no method for, or that the action table does not declare: {_unresolved}")
