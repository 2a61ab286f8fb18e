"""Scenario files: one TOML file declares a cluster, a workload, a group and a timeline of actions.

The file is parsed and validated completely before anything starts; every problem names the field
and the line it is on. `resolve()` then turns the timeline into a concrete schedule (every "random"
target picked with the scenario's seed, every scale and rolling restart expanded into single steps).
The runner applies that one schedule to whichever backend it runs, so two runs of the same file on
`legacy` and `modern` see the same faults at the same times on the same targets.

docs/scenarios.md is the reference for the file format.
"""

from __future__ import annotations

import math
import random
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

BACKENDS = ("legacy", "modern")
MODERN_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
LEGACY_STRATEGIES = ("range", "roundrobin")  # 0.8 knew only these two
OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions: picks the coordinator


class Action(Enum):
    JOIN = "join"                         # count new members join
    LEAVE = "leave"                       # a member leaves cleanly (SIGTERM, or its shared host closes it)
    SCALE = "scale"                       # the group grows or shrinks to `to` members
    ROLLING_RESTART = "rolling_restart"   # `count` members restarted one after another
    CRASH = "crash"                       # SIGKILL (emulated on part of a shared host)
    PAUSE = "pause"                       # SIGSTOP for `duration`, then SIGCONT (emulated likewise)
    RESTART = "restart"                   # clean stop (if running), then start again
    LINK = "link"                         # a fault on a member's coord/data link
    ZK_KILL = "zk_kill"
    ZK_RESTART = "zk_restart"
    ZK_PAUSE = "zk_pause"
    ZK_ISOLATE = "zk_isolate"             # a ZooKeeper node cut off from its peers
    BROKER_KILL = "broker_kill"
    BROKER_RESTART = "broker_restart"
    COORDINATOR_KILL = "coordinator_kill"        # the broker that coordinates the group
    COORDINATOR_RESTART = "coordinator_restart"
    PHASE = "phase"                       # only marks a named phase in the events


class Link(Enum):
    COORD = "coord"   # legacy: to ZooKeeper; modern: to the group coordinator
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


# Fields each action accepts besides `at` and `action`; anything else is a typo and rejected.
ACTION_FIELDS: dict[Action, frozenset[str]] = {
    Action.JOIN: frozenset({"count"}),
    Action.LEAVE: frozenset({"member"}),
    Action.SCALE: frozenset({"to"}),
    Action.ROLLING_RESTART: frozenset({"count", "interval", "pick"}),
    Action.CRASH: frozenset({"member"}),
    Action.PAUSE: frozenset({"member", "duration"}),
    Action.RESTART: frozenset({"member"}),
    Action.LINK: frozenset({"member", "link", "fault", "duration", "latency_ms", "jitter_ms", "rate_kbps",
                            "direction"}),
    Action.ZK_KILL: frozenset({"node"}),
    Action.ZK_RESTART: frozenset({"node"}),
    Action.ZK_PAUSE: frozenset({"node", "duration"}),
    Action.ZK_ISOLATE: frozenset({"node", "duration"}),
    Action.BROKER_KILL: frozenset({"broker"}),
    Action.BROKER_RESTART: frozenset({"broker"}),
    Action.COORDINATOR_KILL: frozenset(),
    Action.COORDINATOR_RESTART: frozenset(),
    Action.PHASE: frozenset({"name"}),
}
REQUIRED_FIELDS: dict[Action, tuple[str, ...]] = {
    Action.LEAVE: ("member",),
    Action.SCALE: ("to",),
    Action.CRASH: ("member",),
    Action.PAUSE: ("member", "duration"),
    Action.RESTART: ("member",),
    Action.LINK: ("member", "link", "fault", "duration"),
    Action.ZK_PAUSE: ("duration",),
    Action.ZK_ISOLATE: ("duration",),
    Action.PHASE: ("name",),
}


# --------------------------------------------------------------------------- the declared scenario


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    zookeeper_nodes: int = 1
    brokers: int = 1
    # Failover timing of the brokers (broker.cluster.FailoverTiming); 0 is the lab's quick default.
    broker_session_timeout_ms: int = 0
    fail_back_delay_ms: int = 0
    coordinator_load_delay_ms: int = 0


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int


@dataclass(frozen=True, kw_only=True)
class ProducerSpec:
    rate: float = 0.0               # records per second; 0 = no producer
    duration: float | None = None   # seconds from the start of the timeline; None = until its end
    topic: str | None = None        # default: the first topic


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    name: str = "lab-group"
    members: int = 3
    strategy: str = "range"
    session_timeout_ms: int = 6000
    per_process: int = 1            # members sharing one host process (faults on part of it are emulated)
    static: bool = False            # modern: group.instance.id = member name
    topics: tuple[str, ...] = ()    # default: every topic
    warmup_timeout: float = 120.0   # seconds to wait for a stable group before the timeline starts
    extra: Mapping[str, object] = field(default_factory=dict)    # native settings for both backends
    legacy: Mapping[str, object] = field(default_factory=dict)   # native settings, legacy only
    modern: Mapping[str, object] = field(default_factory=dict)   # native settings, modern only


@dataclass(frozen=True, kw_only=True)
class TimelineEntry:
    """One `[[timeline]]` table as written (targets may still say "random")."""

    index: int
    line: int
    at: float
    action: Action
    member: int | str | None = None
    count: int | None = None
    to: int | None = None
    interval: float | None = None
    pick: str = "first"
    link: Link | None = None
    fault: LinkFault | None = None
    duration: float | None = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rate_kbps: float | None = None
    direction: Direction = Direction.BOTH
    node: int | str | None = None
    broker: int | str | None = None
    name: str | None = None
    field_lines: Mapping[str, int] = field(default_factory=dict)

    def line_of(self, key: str) -> int:
        return self.field_lines.get(key) or self.line


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    description: str
    seed: int
    duration: float
    settle: float
    backends: tuple[str, ...]
    cluster: ClusterSpec
    topics: tuple[TopicSpec, ...]
    producer: ProducerSpec
    group: GroupSpec
    timeline: tuple[TimelineEntry, ...]
    source: str = ""
    lines: _LineIndex | None = field(default=None, compare=False, repr=False)

    def line_of(self, *path: str | int) -> int | None:
        return self.lines.line_of(tuple(path)) if self.lines else None

    @property
    def subscribed_topics(self) -> tuple[str, ...]:
        return self.group.topics or tuple(topic.name for topic in self.topics)

    @property
    def producer_topic(self) -> str:
        return self.producer.topic or self.topics[0].name


def member_name(index: int) -> str:
    """Members are named by their index, so a schedule reads the same for both backends."""
    return f"m{index:03d}"


# --------------------------------------------------------------------------- errors with lines


@dataclass(frozen=True)
class Problem:
    field: str
    line: int | None
    message: str


class ScenarioError(ValueError):
    """Every problem found in a scenario file, each naming its field and line."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [
            f"{self.source}:{problem.line if problem.line is not None else '?'}: {problem.field}: {problem.message}"
            for problem in self.problems
        ]


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\".]+)\s*=")


class _LineIndex:
    """Where each key sits in the TOML text. tomllib keeps no positions, so scan the text:
    table headers, array-of-tables counters and `key =` lines. Approximate but enough to point
    a reader at the right table entry."""

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple, int] = {}
        table: tuple = ()
        arrays: dict[tuple, int] = {}
        in_multiline = False
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
            if in_multiline:
                if '"""' in line or "'''" in line:
                    in_multiline = False
                continue
            header = _HEADER.match(line)
            if header:
                path = tuple(part.strip().strip('"') for part in header.group(2).split("."))
                if header.group(1) == "[[":
                    arrays[path] = arrays.get(path, -1) + 1
                    table = (*path, arrays[path])
                else:
                    table = path
                self._lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                parts = tuple(part.strip('"') for part in key.group(1).split("."))
                self._lines.setdefault((*table, *parts), number)
                if line.count('"""') == 1 or line.count("'''") == 1:
                    in_multiline = True

    def line_of(self, path: tuple) -> int | None:
        """The line of `path`, or of the nearest enclosing table that has one."""
        for end in range(len(path), 0, -1):
            if path[:end] in self._lines:
                return self._lines[path[:end]]
        return None


# --------------------------------------------------------------------------- loading


def load(path: str | Path, *, overrides: Iterable[str] = ()) -> Scenario:
    """Read and validate a scenario file; `overrides` are "dotted.key=value" strings (`--set`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ScenarioError(str(path), [Problem("file", None, f"cannot read: {error.strerror}")]) from None
    return loads(text, source=str(path), overrides=overrides)


def loads(text: str, *, source: str = "<scenario>", overrides: Iterable[str] = ()) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        raise ScenarioError(source, [Problem("toml", int(line.group(1)) if line else None, str(error))]) from None
    problems: list[Problem] = []
    for override in overrides:
        _apply_override(data, override, problems)
    checker = _Checker(source, _LineIndex(text), problems)
    scenario = checker.scenario(data)
    # A dry run of the timeline finds what only shows in order: targets out of range, a member
    # crashed twice, overlapping faults on one target. Entries with problems of their own are
    # left out of it, so each problem is reported once.
    try:
        resolve(scenario)
    except ScenarioError as error:
        problems.extend(error.problems)
    if problems:
        problems.sort(key=lambda problem: (problem.line or 0))
        raise ScenarioError(source, problems)
    return scenario


def _apply_override(data: dict, override: str, problems: list[Problem]) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        problems.append(Problem(override, None, "an override is KEY=VALUE, e.g. group.members=50"))
        return
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    *parents, last = key.strip().split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            problems.append(Problem(key, None, f"cannot set inside {part!r}: it is not a table"))
            return
    node[last] = value


class _Checker:
    """Turns the parsed TOML into a Scenario, collecting every problem instead of stopping at one."""

    def __init__(self, source: str, lines: _LineIndex, problems: list[Problem]) -> None:
        self.source = source
        self.lines = lines
        self.problems = problems

    def fail(self, path: tuple, message: str) -> None:
        label = ".".join(f"[{part}]" if isinstance(part, int) else part for part in path).replace(".[", "[")
        self.problems.append(Problem(label or "scenario", self.lines.line_of(path), message))

    def unknown_keys(self, table: Mapping, allowed: Iterable[str], path: tuple) -> None:
        allowed = set(allowed)
        for key in table:
            if key not in allowed:
                self.fail((*path, key), f"unknown field (expected one of: {', '.join(sorted(allowed))})")

    def number(self, table: Mapping, key: str, path: tuple, *, default=None, minimum=None, positive=False,
               integer=False):
        value = table.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
            self.fail((*path, key), f"must be {'an integer' if integer else 'a number'}, got {value!r}")
            return default
        if not math.isfinite(value):
            self.fail((*path, key), f"must be finite, got {value!r}")
            return default
        if positive and value <= 0:
            self.fail((*path, key), f"must be positive, got {value!r}")
            return default
        if minimum is not None and value < minimum:
            self.fail((*path, key), f"must be at least {minimum}, got {value!r}")
            return default
        return value

    def string(self, table: Mapping, key: str, path: tuple, *, default=None, choices=None):
        value = table.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail((*path, key), f"must be a string, got {value!r}")
            return default
        if choices is not None and value not in choices:
            self.fail((*path, key), f"unknown value {value!r} (expected one of: {', '.join(choices)})")
            return default
        return value

    def table(self, data: Mapping, key: str) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            self.fail((key,), "must be a table")
            return {}
        return value

    def settings(self, table: Mapping, key: str, path: tuple) -> dict:
        value = table.get(key, {})
        if not isinstance(value, dict):
            self.fail((*path, key), "must be a table of native settings, e.g. {\"rebalance.max.retries\" = 4}")
            return {}
        for name, setting in value.items():
            if not isinstance(setting, (str, int, float, bool)):
                self.fail((*path, key, name), f"a setting must be a string, number or boolean, got {setting!r}")
        return dict(value)

    # ---- sections

    def scenario(self, data: dict) -> Scenario:
        self.unknown_keys(data, {"name", "description", "seed", "duration", "settle", "backends", "cluster",
                                 "topics", "producer", "group", "timeline"}, ())
        name = self.string(data, "name", (), default="") or ""
        if not name:
            name = Path(self.source).stem if self.source and not self.source.startswith("<") else "scenario"
        description = self.string(data, "description", (), default="") or ""
        seed = self.number(data, "seed", (), default=1, integer=True)
        duration = self.number(data, "duration", (), default=None, positive=True)
        if duration is None and "duration" not in data:
            self.fail(("duration",), "missing: the length of the timeline in seconds")
        settle = self.number(data, "settle", (), default=10, minimum=0)
        backends = self.backends(data)
        cluster = self.cluster(self.table(data, "cluster"), backends)
        topics = self.topics(data)
        topic_names = tuple(topic.name for topic in topics)
        producer = self.producer(self.table(data, "producer"), topic_names)
        group = self.group(self.table(data, "group"), backends, topic_names)
        timeline = self.timeline(data, duration or 0.0, cluster)
        return Scenario(
            name=name, description=description, seed=seed, duration=float(duration or 0.0), settle=float(settle),
            backends=backends, cluster=cluster, topics=topics, producer=producer, group=group, timeline=timeline,
            source=self.source, lines=self.lines,
        )

    def backends(self, data: dict) -> tuple[str, ...]:
        value = data.get("backends", list(BACKENDS))
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            self.fail(("backends",), f"must be a non-empty list drawn from {list(BACKENDS)}")
            return BACKENDS
        for item in value:
            if item not in BACKENDS:
                self.fail(("backends",), f"unknown backend {item!r} (expected {' or '.join(BACKENDS)})")
        return tuple(item for item in value if item in BACKENDS) or BACKENDS

    def cluster(self, table: dict, backends: tuple[str, ...]) -> ClusterSpec:
        path = ("cluster",)
        timing_keys = ("broker_session_timeout_ms", "fail_back_delay_ms", "coordinator_load_delay_ms")
        self.unknown_keys(table, {"zookeeper_nodes", "brokers", *timing_keys}, path)
        zk_nodes = self.number(table, "zookeeper_nodes", path, default=1, minimum=0, integer=True)
        if zk_nodes not in (0, 1, 3):
            self.fail((*path, "zookeeper_nodes"), f"must be 0, 1 or 3, got {zk_nodes!r}")
            zk_nodes = 1
        if zk_nodes == 0 and "legacy" in backends:
            self.fail((*path, "zookeeper_nodes"), "the legacy backend needs ZooKeeper (1 or 3 nodes)")
        brokers = self.number(table, "brokers", path, default=1, minimum=1, integer=True)
        timing = {key: self.number(table, key, path, default=0, minimum=0, integer=True) for key in timing_keys}
        return ClusterSpec(zookeeper_nodes=zk_nodes, brokers=brokers, **timing)

    def topics(self, data: dict) -> tuple[TopicSpec, ...]:
        value = data.get("topics")
        if not isinstance(value, list) or not value:
            self.fail(("topics",), "missing: at least one [[topics]] table with name and partitions")
            return (TopicSpec(name="t0", partitions=1),)
        topics = []
        for index, table in enumerate(value):
            path = ("topics", index)
            if not isinstance(table, dict):
                self.fail(path, "must be a table")
                continue
            self.unknown_keys(table, {"name", "partitions"}, path)
            name = self.string(table, "name", path)
            if not name or not re.fullmatch(r"[A-Za-z0-9._\-]+", name):
                self.fail((*path, "name"), f"a topic name of letters, digits, '.', '_' or '-' is required, got {name!r}")
                name = f"t{index}"
            partitions = self.number(table, "partitions", path, default=None, positive=True, integer=True)
            if partitions is None:
                if "partitions" not in table:
                    self.fail((*path, "partitions"), "missing: the number of partitions")
                partitions = 1
            if name in {topic.name for topic in topics}:
                self.fail((*path, "name"), f"topic {name!r} declared twice")
            topics.append(TopicSpec(name=name, partitions=partitions))
        return tuple(topics)

    def producer(self, table: dict, topics: tuple[str, ...]) -> ProducerSpec:
        path = ("producer",)
        self.unknown_keys(table, {"rate", "duration", "topic"}, path)
        rate = self.number(table, "rate", path, default=0.0, minimum=0)
        duration = table.get("duration")
        if duration == "until-end":
            duration = None
        else:
            duration = self.number(table, "duration", path, default=None, positive=True)
        topic = self.string(table, "topic", path, default=None, choices=topics)
        return ProducerSpec(rate=float(rate), duration=duration, topic=topic)

    def group(self, table: dict, backends: tuple[str, ...], topics: tuple[str, ...]) -> GroupSpec:
        path = ("group",)
        self.unknown_keys(table, {"name", "members", "strategy", "session_timeout_ms", "per_process", "static",
                                  "topics", "warmup_timeout", "extra", "legacy", "modern"}, path)
        name = self.string(table, "name", path, default="lab-group")
        if not re.fullmatch(r"[A-Za-z0-9._\-]+", name or ""):
            self.fail((*path, "name"), f"a group name of letters, digits, '.', '_' or '-' is required, got {name!r}")
            name = "lab-group"
        members = self.number(table, "members", path, default=3, minimum=1, integer=True)
        choices = LEGACY_STRATEGIES if "legacy" in backends else MODERN_STRATEGIES
        strategy = table.get("strategy", "range")
        if strategy not in choices:
            why = " (the legacy backend knows only range and roundrobin)" if strategy in MODERN_STRATEGIES else ""
            self.fail((*path, "strategy"), f"unknown strategy {strategy!r} for backends {list(backends)}; "
                                          f"expected one of: {', '.join(choices)}{why}")
            strategy = "range"
        session = self.number(table, "session_timeout_ms", path, default=6000, positive=True, integer=True)
        per_process = self.number(table, "per_process", path, default=1, minimum=1, integer=True)
        static = table.get("static", False)
        if not isinstance(static, bool):
            self.fail((*path, "static"), f"must be true or false, got {static!r}")
            static = False
        subscribed = table.get("topics", [])
        if not isinstance(subscribed, list) or any(topic not in topics for topic in subscribed):
            self.fail((*path, "topics"), f"must list declared topics ({', '.join(topics)}), got {subscribed!r}")
            subscribed = []
        warmup = self.number(table, "warmup_timeout", path, default=120.0, positive=True)
        return GroupSpec(
            name=name, members=members, strategy=strategy, session_timeout_ms=session, per_process=per_process,
            static=static, topics=tuple(subscribed), warmup_timeout=float(warmup),
            extra=self.settings(table, "extra", path), legacy=self.settings(table, "legacy", path),
            modern=self.settings(table, "modern", path),
        )

    def timeline(self, data: dict, duration: float, cluster: ClusterSpec) -> tuple[TimelineEntry, ...]:
        value = data.get("timeline", [])
        if not isinstance(value, list):
            self.fail(("timeline",), "must be an array of [[timeline]] tables")
            return ()
        entries = []
        for index, table in enumerate(value):
            entry = self.entry(table, index, duration, cluster)
            if entry is not None:
                entries.append(entry)
        return tuple(sorted(entries, key=lambda entry: (entry.at, entry.index)))

    def entry(self, table: object, index: int, duration: float, cluster: ClusterSpec) -> TimelineEntry | None:
        path = ("timeline", index)
        if not isinstance(table, dict):
            self.fail(path, "must be a table")
            return None
        problems_before = len(self.problems)
        entry = self._entry(table, path, index, duration, cluster)
        return entry if len(self.problems) == problems_before else None

    def _entry(self, table: dict, path: tuple, index: int, duration: float,
               cluster: ClusterSpec) -> TimelineEntry | None:
        action_name = table.get("action")
        try:
            action = Action(action_name)
        except ValueError:
            self.fail((*path, "action"), f"unknown action {action_name!r} (expected one of: "
                                         f"{', '.join(action.value for action in Action)})")
            return None
        self.unknown_keys(table, {"at", "action", *ACTION_FIELDS[action]}, path)
        for key in REQUIRED_FIELDS.get(action, ()):
            if key not in table:
                self.fail((*path, key), f"missing: {action.value} needs {key}")
        at = self.number(table, "at", path, default=None, minimum=0)
        if at is None:
            if "at" not in table:
                self.fail((*path, "at"), "missing: the time of the action in seconds from the start")
            at = 0.0
        elif duration and at >= duration:
            self.fail((*path, "at"), f"at {at} s is not before the end of the timeline (duration {duration} s)")
        fault_duration = self.number(table, "duration", path, default=None, positive=True)
        if fault_duration is not None and duration and at + fault_duration > duration:
            self.fail((*path, "duration"), f"the fault would last until {at + fault_duration} s, "
                                           f"after the end of the timeline ({duration} s)")
        link = fault = None
        if action is Action.LINK:
            link = self.enum(table, "link", path, Link)
            fault = self.enum(table, "fault", path, LinkFault)
            if fault is LinkFault.LATENCY and not table.get("latency_ms"):
                self.fail((*path, "latency_ms"), "a latency fault needs latency_ms > 0")
            if fault is LinkFault.BANDWIDTH and "rate_kbps" not in table:
                self.fail((*path, "rate_kbps"), "a bandwidth fault needs rate_kbps")
        direction = self.enum(table, "direction", path, Direction) or Direction.BOTH
        member = self.target(table, "member", path)
        node = self.target(table, "node", path)
        broker = self.target(table, "broker", path)
        if action.value.startswith("zk_"):
            if cluster.zookeeper_nodes == 0:
                self.fail((*path, "action"), "there is no ZooKeeper in this cluster ([cluster] zookeeper_nodes = 0)")
            elif isinstance(node, int) and node >= cluster.zookeeper_nodes:
                self.fail((*path, "node"), f"node {node} is out of range: the ensemble has "
                                           f"{cluster.zookeeper_nodes} node(s), numbered from 0")
            if action is Action.ZK_ISOLATE and cluster.zookeeper_nodes < 3:
                self.fail((*path, "action"), "cutting a node off from its peers needs a 3-node ensemble")
        if isinstance(broker, int) and broker >= cluster.brokers:
            self.fail((*path, "broker"), f"broker {broker} is out of range: the cluster has {cluster.brokers} "
                                         f"broker(s), numbered from 0")
        name = self.string(table, "name", path, default=None)
        pick = self.string(table, "pick", path, default="first", choices=("first", "random"))
        return TimelineEntry(
            index=index, line=self.lines.line_of(path) or 0,
            field_lines={key: self.lines.line_of((*path, key)) or 0 for key in table}, at=float(at), action=action, member=member,
            count=self.number(table, "count", path, default=None, positive=True, integer=True),
            to=self.number(table, "to", path, default=None, minimum=0, integer=True),
            interval=self.number(table, "interval", path, default=None, minimum=0),
            pick=pick or "first", link=link, fault=fault, duration=fault_duration,
            latency_ms=float(self.number(table, "latency_ms", path, default=0.0, minimum=0) or 0.0),
            jitter_ms=float(self.number(table, "jitter_ms", path, default=0.0, minimum=0) or 0.0),
            rate_kbps=self.number(table, "rate_kbps", path, default=None, positive=True),
            direction=direction, node=node, broker=broker, name=name,
        )

    def enum(self, table: dict, key: str, path: tuple, kind: type[Enum]):
        if key not in table:
            return None
        try:
            return kind(table[key])
        except ValueError:
            self.fail((*path, key), f"unknown {key} {table[key]!r} (expected one of: "
                                    f"{', '.join(item.value for item in kind)})")
            return None

    def target(self, table: dict, key: str, path: tuple) -> int | str | None:
        value = table.get(key)
        if value is None or value == "random" or (value == "last" and key == "member"):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            extra = ', "last"' if key == "member" else ""
            self.fail((*path, key), f"must be an index (0, 1, ...), \"random\"{extra}, got {value!r}")
            return None
        return value


# --------------------------------------------------------------------------- the resolved schedule


@dataclass(frozen=True, kw_only=True)
class Step:
    """One thing the runner does at time `at` (seconds from the start of the timeline).

    Steps that start a fault with a duration are followed by a matching `heal` step with the same
    fault_id. `targets` are member names, "zk-<i>" or "broker-<i>".
    """

    at: float
    fault_id: str
    op: str                     # "start" (or the only step of an instant action) | "heal"
    action: str
    targets: tuple[str, ...]
    line: int
    link: str | None = None
    params: Mapping[str, object] = field(default_factory=dict)
    emulated: bool = False

    def to_json(self) -> dict:
        data = asdict(self)
        data["targets"] = list(self.targets)
        data["params"] = dict(self.params)
        return data


@dataclass(frozen=True, kw_only=True)
class Host:
    """A member host process and the members it runs (one, unless per_process > 1)."""

    name: str
    members: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Schedule:
    seed: int
    initial_members: tuple[str, ...]
    hosts: tuple[Host, ...]          # every host process the run may start, initial ones first
    coordinator_broker: int          # the broker the coordinator formula picks for the group
    steps: tuple[Step, ...]

    def host_of(self, member: str) -> Host:
        for host in self.hosts:
            if member in host.members:
                return host
        raise KeyError(member)

    def proxied_members(self) -> tuple[str, ...]:
        """Members whose links some step touches (a link fault, or an emulated crash or pause, which
        black-holes them): only these get fault proxies."""
        names = {target for step in self.steps
                 if step.action == Action.LINK.value
                 or (step.emulated and step.action in (Action.CRASH.value, Action.PAUSE.value))
                 for target in step.targets}
        return tuple(sorted(names))

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "initial_members": list(self.initial_members),
            "hosts": [{"name": host.name, "members": list(host.members)} for host in self.hosts],
            "coordinator_broker": self.coordinator_broker,
            "steps": [step.to_json() for step in self.steps],
        }


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, with 32-bit wrap."""
    value = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        value = (31 * value + int(unit, 16)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(group: str) -> int:
    """`abs(hash) % 50` with Java's abs, for which abs(Integer.MIN_VALUE) stays negative -> 0 here."""
    value = java_string_hash(group)
    return 0 if value == -(1 << 31) else abs(value) % OFFSETS_TOPIC_PARTITIONS


def coordinator_broker(group: str, brokers: int) -> int:
    """The broker leading the group's __consumer_offsets partition: leaders are spread round-robin."""
    return coordinator_partition(group) % brokers


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
        self.hosts_down: set[str] = set()   # host processes stopped or killed as a whole

    def whole_hosts(self, names: Iterable[str]) -> bool:
        """Whether `names` are every member of each host process they are in (then process signals
        serve; otherwise the members are acted on one by one through the host's control channel)."""
        names = set(names)
        return all(set(self.host_of(name).members) <= names for name in names)

    def mark_down(self, names: Iterable[str]) -> None:
        names = set(names)
        for name in names:
            host = self.host_of(name)
            if set(host.members) <= names:
                self.hosts_down.add(host.name)

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
            self.next_index += size
            names.extend(chunk)
        self.names.extend(names)
        self.running.extend(names)
        return names

    def host_of(self, member: str) -> Host:
        return next(host for host in self.hosts if member in host.members)


def resolve(scenario: Scenario) -> Schedule:
    """Expand the timeline into concrete steps. Deterministic in the scenario and its seed."""
    problems: list[Problem] = []
    rng = random.Random(scenario.seed)
    group = _Membership(scenario.group.per_process)
    initial = tuple(group.add(scenario.group.members))
    shared = scenario.group.per_process > 1
    steps: list[Step] = []
    busy: dict[tuple[str, str], tuple[float, int]] = {}   # (target, link) -> (fault end, line)
    zk_down: set[int] = set()
    brokers_down: set[int] = set()
    coordinator = coordinator_broker(scenario.group.name, scenario.cluster.brokers)
    counter = 0

    def fail(entry: TimelineEntry, key: str, message: str) -> None:
        problems.append(Problem(f"timeline[{entry.index}].{key}", entry.line_of(key), message))

    def pick_member(entry: TimelineEntry, *, exclude_paused: bool) -> str | None:
        candidates = [name for name in group.running if not (exclude_paused and group.is_paused(name, entry.at))]
        if entry.member in ("random", "last"):
            if not candidates:
                fail(entry, "member", f"no member to pick at {entry.at} s")
                return None
            return rng.choice(candidates) if entry.member == "random" else candidates[-1]
        if entry.member >= group.next_index:
            fail(entry, "member", f"member {entry.member} is out of range: at {entry.at} s the group has had "
                                  f"{group.next_index} member(s), numbered from 0")
            return None
        name = group.names[entry.member]
        if name not in candidates:
            state = ("crashed" if name in group.crashed else "gone (left)" if name in group.left
                     else "paused" if group.is_paused(name, entry.at) else "not running")
            fail(entry, "member", f"member {entry.member} is {state} at {entry.at} s")
            return None
        return name

    def claim(entry: TimelineEntry, target: str, link: str, end: float) -> bool:
        previous = busy.get((target, link))
        if previous and previous[0] > entry.at:
            fail(entry, "at", f"{target} ({link}) already has a fault until {previous[0]} s "
                              f"(line {previous[1]}); faults on one target must not overlap")
            return False
        busy[(target, link)] = (end, entry.line)
        return True

    def emulated(names: Iterable[str]) -> bool:
        return shared and not group.whole_hosts(names)

    def node_index(value: int | str | None, limit: int) -> int:
        if value == "random":
            return rng.randrange(limit)
        return 0 if value is None else int(value)

    for entry in scenario.timeline:
        counter += 1
        fault_id = f"f{counter:03d}"
        action = entry.action
        base = dict(at=entry.at, fault_id=fault_id, action=action.value, line=entry.line)

        if action is Action.PHASE:
            steps.append(Step(**base, op="start", targets=(), params={"name": entry.name}))
        elif action is Action.JOIN:
            names = group.add(entry.count or 1)
            steps.append(Step(**base, op="start", targets=tuple(names)))
        elif action is Action.SCALE:
            current = len(group.running)
            if entry.to > current:
                names = group.add(entry.to - current)
                steps.append(Step(**base, op="start", targets=tuple(names), params={"to": entry.to}))
            elif entry.to < current:
                names = group.running[entry.to:]   # the most recently started leave first
                for name in names:
                    group.running.remove(name)
                    group.left.add(name)
                group.mark_down(names)
                steps.append(Step(**base, op="start", targets=tuple(names), params={"to": entry.to}))
        elif action is Action.LEAVE:
            name = pick_member(entry, exclude_paused=False)
            if name is None:
                continue
            # A clean close either way (SIGTERM to a host of its own, else the host closes just it).
            group.running.remove(name)
            group.left.add(name)
            group.mark_down([name])
            steps.append(Step(**base, op="start", targets=(name,)))
        elif action is Action.RESTART:
            if entry.member in ("random", "last"):
                name = pick_member(entry, exclude_paused=True)
            else:
                name = group.names[entry.member] if entry.member < group.next_index else None
                if name is None:
                    fail(entry, "member", f"member {entry.member} is out of range: at {entry.at} s the group has "
                                          f"had {group.next_index} member(s), numbered from 0")
                elif group.is_paused(name, entry.at):
                    fail(entry, "member", f"member {entry.member} is paused at {entry.at} s")
                    name = None
            if name is None:
                continue
            host = group.host_of(name)
            # A host process that is down comes back whole, with all of its members.
            targets = host.members if host.name in group.hosts_down else (name,)
            group.hosts_down.discard(host.name)
            for target in targets:
                group.crashed.discard(target)
                group.left.discard(target)
                if target not in group.running:
                    group.running.append(target)
            steps.append(Step(**base, op="start", targets=tuple(targets), emulated=emulated(targets)))
        elif action is Action.ROLLING_RESTART:
            count = entry.count or 1
            candidates = [name for name in group.running if not group.is_paused(name, entry.at)]
            if count > len(candidates):
                fail(entry, "count", f"cannot restart {count} members: {len(candidates)} are running at {entry.at} s")
                continue
            chosen = rng.sample(candidates, count) if entry.pick == "random" else candidates[:count]
            # A host covered whole restarts as a process; members of a host covered in part one by one.
            units: list[tuple[str, ...]] = []
            for name in chosen:
                host = group.host_of(name)
                if not set(host.members) <= set(chosen):
                    units.append((name,))
                elif host.members not in units:
                    units.append(host.members)
            interval = entry.interval if entry.interval is not None else 5.0
            for position, unit in enumerate(units):
                at = entry.at + position * interval
                if at >= scenario.duration:
                    fail(entry, "interval", f"restart {position + 1} of {len(units)} would fall at {at} s, "
                                            f"after the end of the timeline ({scenario.duration} s)")
                    break
                steps.append(Step(at=at, fault_id=f"{fault_id}.{position}", op="start", action=Action.RESTART.value,
                                  targets=tuple(unit), line=entry.line, params={"rolling": fault_id},
                                  emulated=emulated(unit)))
        elif action in (Action.CRASH, Action.PAUSE):
            name = pick_member(entry, exclude_paused=True)
            if name is None:
                continue
            # Only the named member: a signal when it has its host process to itself, otherwise
            # emulated (its links black-holed, its host stops polling it).
            targets = (name,)
            fake = emulated(targets)
            end = entry.at + (entry.duration if action is Action.PAUSE else 0.0)
            held = ("process", "coord", "data") if fake else ("process",)   # emulation holds the links
            if not all(claim(entry, name, what, end) for what in held):
                continue
            if action is Action.CRASH:
                group.running.remove(name)
                group.crashed.add(name)
                group.mark_down(targets)
                steps.append(Step(**base, op="start", targets=targets, emulated=fake))
            else:
                group.paused_until[name] = end
                params = {"duration": entry.duration}
                steps.append(Step(**base, op="start", targets=targets, params=params, emulated=fake))
                steps.append(Step(**{**base, "at": end}, op="heal", targets=targets, params=params, emulated=fake))
        elif action is Action.LINK:
            name = pick_member(entry, exclude_paused=False)
            if name is None:
                continue
            targets = (name,)   # every member has links (and proxies) of its own, shared host or not
            links = ("coord", "data") if entry.link is Link.BOTH else (entry.link.value,)
            if not all(claim(entry, target, link, entry.at + entry.duration) for target in targets for link in links):
                continue
            params = {"fault": entry.fault.value, "duration": entry.duration, "direction": entry.direction.value}
            if entry.fault is LinkFault.LATENCY:
                params.update(latency_ms=entry.latency_ms, jitter_ms=entry.jitter_ms)
            if entry.fault is LinkFault.BANDWIDTH:
                params.update(rate_kbps=entry.rate_kbps)
            steps.append(Step(**base, op="start", targets=tuple(targets), link=entry.link.value, params=params))
            steps.append(Step(**{**base, "at": entry.at + entry.duration}, op="heal", targets=tuple(targets),
                              link=entry.link.value, params=params))
        elif action.value.startswith("zk_"):
            node = node_index(entry.node, scenario.cluster.zookeeper_nodes)
            target = f"zk-{node}"
            if action is Action.ZK_KILL:
                if node in zk_down:
                    fail(entry, "node", f"ZooKeeper node {node} is already down at {entry.at} s")
                    continue
                zk_down.add(node)
                steps.append(Step(**base, op="start", targets=(target,)))
            elif action is Action.ZK_RESTART:
                zk_down.discard(node)
                steps.append(Step(**base, op="start", targets=(target,)))
            else:
                if not claim(entry, target, "node", entry.at + entry.duration):
                    continue
                params = {"duration": entry.duration}
                steps.append(Step(**base, op="start", targets=(target,), params=params))
                steps.append(Step(**{**base, "at": entry.at + entry.duration}, op="heal", targets=(target,),
                                  params=params))
        else:  # broker and coordinator actions
            if action in (Action.COORDINATOR_KILL, Action.COORDINATOR_RESTART):
                broker = coordinator
            else:
                broker = node_index(entry.broker, scenario.cluster.brokers)
            if action in (Action.BROKER_KILL, Action.COORDINATOR_KILL):
                if broker in brokers_down:
                    fail(entry, "broker", f"broker {broker} is already down at {entry.at} s")
                    continue
                brokers_down.add(broker)
            else:
                brokers_down.discard(broker)
            steps.append(Step(**base, op="start", targets=(f"broker-{broker}",)))

    if problems:
        raise ScenarioError(scenario.source or "<scenario>", problems)
    steps.sort(key=lambda step: (step.at, step.op != "heal", step.fault_id))
    return Schedule(seed=scenario.seed, initial_members=initial, hosts=tuple(group.hosts),
                    coordinator_broker=coordinator, steps=tuple(steps))
