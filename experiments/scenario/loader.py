"""Reading a scenario file: TOML in, a checked `Scenario` out, or a ScenarioError listing every problem.

Every problem names its field and its line (tomllib keeps no positions, so `LineIndex` finds them
in the text). `--set` overrides are applied to the parsed table before any check. The last check is
a dry run of the resolver, which finds what only shows in order (targets out of range, a member
crashed twice, overlapping faults on one target). docs/scenarios.md is the reference for the format.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from experiments.scenario.actions import (
    Action,
    phase_name,
)
from experiments.scenario.line_index import LineIndex
from experiments.scenario.model import (
    BACKENDS,
    COMMITS,
    DEFAULT_MAX_POLL_RECORDS,
    MAX_MEMBERS,
    MAX_PARTITIONS,
    SCENARIO_STRATEGY,
    SERVICES,
    ClusterSpec,
    GroupSpec,
    Problem,
    ProducerSpec,
    Scenario,
    ScenarioError,
    TopicSpec,
    WorkloadSpec,
    all_strategies,
    strategies_for,
)
from experiments.scenario.overrides import apply_override, blame_override, dotted_names, field_label
from experiments.scenario.reference import read_reference
from experiments.scenario.resolver import resolve
from experiments.scenario.timeline_checks import TimelineChecks
from rebalance.backends import DEFAULT_STRATEGY, canonical_name, profile
from rebalance.member import DEFAULT_SESSION_TIMEOUT_MS


def find_file(name: str, builtin_dir: Path) -> Path | None:
    """`name` as a path, else the built-in file of that name in `builtin_dir` (with or without .toml)."""
    path = Path(name)
    if path.is_file():
        return path
    builtin = builtin_dir / (name if name.endswith(".toml") else f"{name}.toml")
    return builtin if builtin.is_file() else None


def load(path: str | Path, *, overrides: Iterable[str] = ()) -> Scenario:
    """Read and validate a scenario file; `overrides` are "dotted.key=value" strings (`--set`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")   # TOML is UTF-8, whatever the locale
    except OSError as error:
        raise ScenarioError(str(path), [Problem("file", None, f"cannot read: {error.strerror}")]) from None
    except UnicodeDecodeError as error:
        raise ScenarioError(str(path), [Problem("file", None, f"not UTF-8 text (byte {error.start})")]) from None
    return loads(text, source=str(path), overrides=overrides)


def loads(text: str, *, source: str = "<scenario>", overrides: Iterable[str] = ()) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        raise ScenarioError(source, [Problem("toml", int(line.group(1)) if line else None, str(error))]) from None
    problems: list[Problem] = []
    overridden: dict[str, str] = {}   # a set field's label (as problems name it) -> the override that set it
    for override in overrides:
        path = apply_override(data, override, problems)
        if path is not None:
            overridden[field_label(path)] = override
    checker = _Checker(source, LineIndex(text), problems)
    scenario = checker.scenario(data)
    # A dry run of the timeline finds what only shows in order: targets out of range, a member
    # crashed twice, overlapping faults on one target. Entries with problems of their own are
    # left out of it, so each problem is reported once.
    try:
        schedule = resolve(scenario)
    except ScenarioError as error:
        problems.extend(error.problems)
    else:
        checker.reference_phases(scenario, schedule)
    if problems:
        problems = [blame_override(problem, overridden) for problem in problems]
        problems.sort(key=lambda problem: (problem.origin is None, problem.line or 0))
        raise ScenarioError(source, problems)
    return scenario


class _Checker(TimelineChecks):
    """Turns the parsed TOML into a Scenario, collecting every problem instead of stopping at one."""

    def __init__(self, source: str, lines: LineIndex, problems: list[Problem]) -> None:
        self.source = source
        self.lines = lines
        self.problems = problems

    def fail(self, path: tuple, message: str) -> None:
        self.problems.append(Problem(field_label(path) or "scenario", self.lines.line_of(path), message))

    def unknown_keys(self, table: Mapping, allowed: Iterable[str], path: tuple) -> None:
        allowed = set(allowed)
        for key in table:
            if key not in allowed:
                self.fail((*path, key), f"unknown field (expected one of: {', '.join(sorted(allowed))})")

    def number(self, table: Mapping, key: str, path: tuple, *, default=None, minimum=None, maximum=None,
               positive=False, integer=False):
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
        if maximum is not None and value > maximum:
            self.fail((*path, key), f"must be at most {maximum:,}, got {value!r}")
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
        flat = dict(dotted_names(value))
        for name, setting in flat.items():
            if not isinstance(setting, (str, int, float, bool)):
                self.fail((*path, key, name), f"a setting must be a string, number or boolean, got {setting!r}")
        return flat

    # ---- sections

    def scenario(self, data: dict) -> Scenario:
        self.unknown_keys(data, {"name", "description", "seed", "duration", "settle", "backends", "cluster",
                                 "topics", "producer", "group", "timeline", "workload", "reference"}, ())
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
        topics = self.scaled_topics(topics, group)
        workload = self.workload(self.table(data, "workload"))
        timeline = self.timeline(data, duration or 0.0, cluster)
        reference = read_reference(data.get("reference"), self.fail, all_strategies())
        return Scenario(
            name=name, description=description, seed=seed, duration=float(duration or 0.0), settle=float(settle),
            backends=backends, cluster=cluster, topics=topics, producer=producer, group=group, timeline=timeline,
            workload=workload, reference=reference, source=self.source, lines=self.lines,
        )

    def reference_phases(self, scenario: Scenario, schedule) -> None:
        """Each phase `[reference]` names is one the timeline plays."""
        if scenario.reference is None:
            return
        played = {phase_name(step.action, step.targets, step.params) for step in schedule.steps
                  if step.op == "start" and step.action in (Action.PHASE.value, Action.SCALE.value, Action.JOIN.value)}
        for name, lab in scenario.reference.phases:
            if lab not in played:
                self.fail(("reference", "phases", name), f"the timeline plays no phase {lab!r} (its phases: "
                                                         f"{', '.join(sorted(played)) or 'none'})")

    def backends(self, data: dict) -> tuple[str, ...]:
        value = data.get("backends", list(BACKENDS))
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            self.fail(("backends",), f"must be a non-empty list drawn from {list(BACKENDS)}")
            return BACKENDS
        named = [canonical_name(item) for item in value]   # an earlier name (`modern`) is its backend's alias
        for item, name in zip(value, named, strict=True):
            if name not in BACKENDS:
                self.fail(("backends",), f"unknown backend {item!r} (expected {' or '.join(BACKENDS)})")
        return tuple(dict.fromkeys(name for name in named if name in BACKENDS)) or BACKENDS

    def cluster(self, table: dict, backends: tuple[str, ...]) -> ClusterSpec:
        path = ("cluster",)
        timing_keys = ("broker_session_timeout_ms", "fail_back_delay_ms", "coordinator_load_delay_ms")
        self.unknown_keys(table, {"zookeeper_nodes", "brokers", *timing_keys}, path)
        zk_nodes = self.number(table, "zookeeper_nodes", path, default=1, minimum=0, integer=True)
        if zk_nodes not in (0, 1, 3):
            self.fail((*path, "zookeeper_nodes"), f"must be 0, 1 or 3, got {zk_nodes!r}")
            zk_nodes = 1
        if zk_nodes == 0 and any(profile(backend).needs_zookeeper for backend in backends):
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
            self.unknown_keys(table, {"name", "partitions", "partitions_per_member"}, path)
            name = self.string(table, "name", path)
            if not name or not re.fullmatch(r"[A-Za-z0-9._\-]+", name):
                self.fail((*path, "name"), f"a topic name of letters, digits, '.', '_' or '-' is required, got {name!r}")
                name = f"t{index}"
            per_member = self.number(table, "partitions_per_member", path, default=None, positive=True,
                                     maximum=MAX_PARTITIONS, integer=True)
            partitions = self.number(table, "partitions", path, default=None, positive=True, maximum=MAX_PARTITIONS,
                                     integer=True)
            if "partitions" in table and "partitions_per_member" in table:
                self.fail((*path, "partitions"), "give partitions or partitions_per_member, not both")
            elif partitions is None and per_member is None:
                if "partitions" not in table and "partitions_per_member" not in table:
                    self.fail((*path, "partitions"), "missing: the number of partitions (or partitions_per_member)")
                partitions = 1
            if name in {topic.name for topic in topics}:
                self.fail((*path, "name"), f"topic {name!r} declared twice")
            topics.append(TopicSpec(name=name, partitions=partitions or 0, per_member=per_member))
        return tuple(topics)

    def scaled_topics(self, topics: tuple[TopicSpec, ...], group: GroupSpec) -> tuple[TopicSpec, ...]:
        """A topic sized per member gets its partition count from the group's size, so that a sweep over
        N keeps every member, and the one that joins, with work."""
        scaled = []
        for index, topic in enumerate(topics):
            if topic.per_member and topic.per_member * group.members > MAX_PARTITIONS:
                self.fail(("topics", index, "partitions_per_member"),
                          f"{topic.per_member} x {group.members} members is {topic.per_member * group.members:,} "
                          f"partitions; at most {MAX_PARTITIONS:,}")
                topic = replace(topic, per_member=1)
            scaled.append(replace(topic, partitions=topic.per_member * group.members) if topic.per_member else topic)
        return tuple(scaled)

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

    def workload(self, table: dict) -> WorkloadSpec:
        """`[workload]`: a key the chosen service does not use is an error, so a file never says what it
        does not do."""
        path = ("workload",)
        self.unknown_keys(table, {"service", "service_ms", "service_p99_ms", "hang_fraction", "hang_ms", "commit",
                                  "max_poll_records"}, path)
        service = self.string(table, "service", path, default="none", choices=SERVICES) or "none"
        uses = {"none": (), "fixed": ("service_ms",), "lognormal": ("service_ms", "service_p99_ms")}[service]
        unused = {"none": ("service_ms", "service_p99_ms", "hang_fraction", "hang_ms"),
                  "fixed": ("service_p99_ms",), "lognormal": ()}[service]
        for key in unused:
            if key in table:
                why = "zero service time" if service == "none" else "a lognormal's only"
                self.fail((*path, key), f"not used with service = {service!r} ({why})")
        for key in uses:
            if key not in table:
                self.fail((*path, key), f"missing: service = {service!r} needs {key}")
        median = p99 = None
        if "service_ms" in uses:
            median = self.number(table, "service_ms", path, default=None, positive=True)
        if "service_p99_ms" in uses:
            p99 = self.number(table, "service_p99_ms", path, default=None, positive=True)
        if median and p99 and p99 <= median:
            self.fail((*path, "service_p99_ms"), f"the 99th percentile ({p99:g} ms) must exceed the median "
                                                 f"service_ms ({median:g} ms)")
            p99 = None
        hang_fraction = 0.0
        hang_ms = WorkloadSpec().hang_ms
        if service != "none":
            hang_fraction = self.number(table, "hang_fraction", path, default=0.0, minimum=0) or 0.0
            if hang_fraction >= 1:
                self.fail((*path, "hang_fraction"), f"a share of the records, below 1, got {hang_fraction!r}")
                hang_fraction = 0.0
            hang_ms = self.hang_range(table, path) or hang_ms
        commit = self.string(table, "commit", path, default="auto", choices=COMMITS) or "auto"
        max_poll = self.number(table, "max_poll_records", path, default=DEFAULT_MAX_POLL_RECORDS, positive=True,
                               integer=True)
        return WorkloadSpec(service=service, service_ms=float(median or 0.0),
                            service_p99_ms=float(p99) if p99 else None, hang_fraction=float(hang_fraction),
                            hang_ms=hang_ms, commit=commit, max_poll_records=max_poll or DEFAULT_MAX_POLL_RECORDS)

    def hang_range(self, table: dict, path: tuple) -> tuple[float, float] | None:
        value = table.get("hang_ms")
        if value is None:
            return None
        if (not isinstance(value, list) or len(value) != 2
                or not all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in value)
                or not 0 <= value[0] <= value[1] or not math.isfinite(value[1])):
            self.fail((*path, "hang_ms"), f"must be [shortest, longest] in ms, 0 <= shortest <= longest, got {value!r}")
            return None
        return float(value[0]), float(value[1])

    def group(self, table: dict, backends: tuple[str, ...], topics: tuple[str, ...]) -> GroupSpec:
        path = ("group",)
        sections = {name: (name, *profile(name).aliases) for name in BACKENDS}   # [group.<backend>] or an alias
        self.unknown_keys(table, {"name", "members", "strategy", "session_timeout_ms", "per_process", "static",
                                  "topics", "warmup_timeout", "prestart", "extra",
                                  *itertools.chain(*sections.values())}, path)
        name = self.string(table, "name", path, default="lab-group")
        if not re.fullmatch(r"[A-Za-z0-9._\-]+", name or ""):
            self.fail((*path, "name"), f"a group name of letters, digits, '.', '_' or '-' is required, got {name!r}")
            name = "lab-group"
        members = self.number(table, "members", path, default=3, minimum=1, maximum=MAX_MEMBERS, integer=True)
        strategy = table.get("strategy", SCENARIO_STRATEGY)
        refusing = [backend for backend in backends
                    if strategy != DEFAULT_STRATEGY and strategy not in strategies_for(backend)]
        if refusing:
            choices = [name for name in strategies_for(backends[0]) if all(name in strategies_for(backend)
                                                                          for backend in backends)]
            why = "".join(f" (the {backend} backend knows only {' and '.join(strategies_for(backend))})"
                          for backend in refusing if any(strategy in strategies_for(other) for other in BACKENDS))
            self.fail((*path, "strategy"), f"unknown strategy {strategy!r} for backends {list(backends)}; "
                                          f"expected one of: {', '.join(choices)}, or \"{DEFAULT_STRATEGY}\" "
                                          f"(each backend's own){why}")
            strategy = SCENARIO_STRATEGY
        session = self.number(table, "session_timeout_ms", path, default=DEFAULT_SESSION_TIMEOUT_MS, positive=True, integer=True)
        per_process = self.number(table, "per_process", path, default=1, minimum=1, integer=True)
        static = table.get("static", False)
        if not isinstance(static, bool):
            self.fail((*path, "static"), f"must be true or false, got {static!r}")
            static = False
        prestart = table.get("prestart", True)
        if not isinstance(prestart, bool):
            self.fail((*path, "prestart"), f"must be true or false, got {prestart!r}")
            prestart = True
        subscribed = table.get("topics", [])
        if not isinstance(subscribed, list) or any(topic not in topics for topic in subscribed):
            self.fail((*path, "topics"), f"must list declared topics ({', '.join(topics)}), got {subscribed!r}")
            subscribed = []
        warmup = self.number(table, "warmup_timeout", path, default=120.0, positive=True)
        return GroupSpec(
            name=name, members=members, strategy=strategy, session_timeout_ms=session, per_process=per_process,
            static=static, topics=tuple(subscribed), warmup_timeout=float(warmup), prestart=prestart,
            extra=self.settings(table, "extra", path),
            settings={name: self.backend_settings(table, keys, path) for name, keys in sections.items()},
        )

    def backend_settings(self, table: dict, keys: tuple[str, ...], path: tuple) -> dict:
        """One backend's own section, under its name or one alias of it (`[group.modern]`), not both."""
        given = [key for key in keys if key in table]
        if len(given) > 1:
            self.fail((*path, given[1]), f"[group.{given[1]}] is [group.{given[0]}] under another name: give one")
        return self.settings(table, given[0], path) if given else {}
