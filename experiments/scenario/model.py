"""The scenario as declared and as resolved: frozen dataclasses, nothing that reads files or picks targets.

A `Scenario` is what one TOML file says (experiments.scenario.loader builds and checks it); a
`Schedule` is its timeline turned into concrete `Step`s (experiments.scenario.resolver). The action
vocabulary (`Action`, `Link`, `LinkFault`, `Direction`) and everything about each action live in
experiments/scenario/actions.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist
from typing import Protocol

from experiments.scenario.actions import Action, Direction, Link, LinkFault, Target, spec_of
from experiments.scenario.reference import Reference
from rebalance.backends import backend_names, canonical_name, profile
from rebalance.member import DEFAULT_SESSION_TIMEOUT_MS

BACKENDS = backend_names()


def strategies_for(backend: str) -> tuple[str, ...]:
    """The strategies a backend accepts: its profile's answer (0.8 knew only range and roundrobin)."""
    return profile(backend).strategies


def all_strategies() -> tuple[str, ...]:
    """Every strategy some backend accepts."""
    return tuple(dict.fromkeys(name for backend in BACKENDS for name in strategies_for(backend)))


class LineLookup(Protocol):
    def line_of(self, path: tuple) -> int | None: ...


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
    per_member: int | None = None   # partitions = per_member x group.members, when the file sizes it so


@dataclass(frozen=True, kw_only=True)
class ProducerSpec:
    rate: float = 0.0               # records per second; 0 = no producer
    duration: float | None = None   # seconds from the start of the timeline; None = until its end
    topic: str | None = None        # default: the first topic


# A scenario's group.strategy when it names none: seed 002's first column, and a strategy every backend knows.
SCENARIO_STRATEGY = "range"
# Seed 002's latency limit: a record handled later than this after it was produced counts as late (the article
# calls it lost). Every check, measure, page and run-conditions reading takes it from here.
LATENCY_LIMIT_MS = 3000


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    name: str = "lab-group"
    members: int = 3
    strategy: str = SCENARIO_STRATEGY
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    per_process: int = 1            # members sharing one host process (faults on part of it are emulated)
    static: bool = False            # the coordinator-based generations: group.instance.id = member name
    topics: tuple[str, ...] = ()    # default: every topic
    warmup_timeout: float = 120.0   # seconds to wait for a stable group before the timeline starts
    # Join waves' host processes start armed in the warm-up and their members join when due (experiments.run.
    # runner); false starts the processes at the step, so the wave lasts as long as the machine takes to start them.
    prestart: bool = True
    extra: Mapping[str, object] = field(default_factory=dict)    # native settings for every backend
    # Native settings of one backend only ([group.<backend>]), keyed by its profile's name.
    settings: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def settings_of(self, backend: str) -> Mapping[str, object]:
        """[group.extra] overlaid with the backend's own section."""
        return {**self.extra, **self.settings.get(canonical_name(backend), {})}


SERVICES = ("none", "fixed", "lognormal")
COMMITS = ("auto", "batch")
DEFAULT_MAX_POLL_RECORDS = 500      # Kafka's max.poll.records
# Bounds on what a file may ask for: ten times the largest group the lab simulates (N = 10,000), and a
# million partitions a topic. Past them a file is a typo, and expanding its timeline would take minutes.
MAX_MEMBERS = 100_000
MAX_PARTITIONS = 1_000_000
_Z99 = NormalDist().inv_cdf(0.99)   # the 99th percentile of the standard normal, 2.326


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """How long a member takes to handle one record, and how it commits (`[workload]`).

    A record's service time is drawn per record: `fixed` takes `service_ms`, `lognormal` has median
    `service_ms` and 99th percentile `service_p99_ms`; a `hang_fraction` of the calls hang instead, for a
    time drawn uniformly from `hang_ms` (a call that waits for its timeout)."""

    service: str = "none"
    service_ms: float = 0.0
    service_p99_ms: float | None = None
    hang_fraction: float = 0.0
    hang_ms: tuple[float, float] = (3000.0, 20000.0)
    commit: str = "auto"                # auto: the client's auto-commit; batch: commitSync after each poll's records
    max_poll_records: int = DEFAULT_MAX_POLL_RECORDS

    @property
    def sigma(self) -> float:
        """The lognormal's shape: ln(p99 / median) / z(0.99)."""
        if self.service != "lognormal" or not self.service_p99_ms:
            return 0.0
        return math.log(self.service_p99_ms / self.service_ms) / _Z99

    @property
    def handles(self) -> bool:
        """Whether the member host handles records itself (a service time, or a commit after each batch)."""
        return self.service != "none" or self.commit == "batch"

    @property
    def mean_service_ms(self) -> float:
        """The mean time to handle one record, hanging calls included."""
        if self.service == "none":
            return 0.0
        base = self.service_ms * (math.exp(self.sigma ** 2 / 2) if self.service == "lognormal" else 1.0)
        return (1 - self.hang_fraction) * base + self.hang_fraction * (self.hang_ms[0] + self.hang_ms[1]) / 2

    def to_json(self) -> dict:
        return {**asdict(self), "hang_ms": list(self.hang_ms)}

    @classmethod
    def from_json(cls, document: Mapping[str, object]) -> WorkloadSpec:
        unknown = sorted(set(document) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown workload field(s): {', '.join(unknown)}")
        values = dict(document)
        if "hang_ms" in values:
            values["hang_ms"] = tuple(float(value) for value in values["hang_ms"])
        spec = cls(**values)
        if spec.service not in SERVICES or spec.commit not in COMMITS:
            raise ValueError(f"service must be one of {', '.join(SERVICES)} and commit one of {', '.join(COMMITS)}")
        if spec.service != "none" and spec.service_ms <= 0:
            raise ValueError(f"service {spec.service!r} needs service_ms > 0")
        return spec


@dataclass(frozen=True, kw_only=True)
class Load:
    """Offered load against capacity: members x 1 / mean service time, counting only the members that can
    own a partition."""

    offered_per_s: float
    mean_service_ms: float
    members: int                        # the group's size when the timeline starts
    busy_members: int                   # those of them that can own a partition

    @property
    def capacity_per_s(self) -> float | None:
        return self.busy_members * 1000 / self.mean_service_ms if self.mean_service_ms > 0 else None

    @property
    def utilisation(self) -> float | None:
        capacity = self.capacity_per_s
        return self.offered_per_s / capacity if capacity else None

    def line(self) -> str:
        """`utilisation 0.60: 600 records/s offered, capacity 1000 records/s at 50 members`."""
        if self.utilisation is None:
            return f"no service time: {self.offered_per_s:g} records/s offered, each handled at once"
        at = f"{self.members} members" if self.busy_members == self.members else (
            f"{self.busy_members} members (of {self.members}; one partition each)")
        return (f"utilisation {self.utilisation:.2f}: {self.offered_per_s:g} records/s offered, capacity "
                f"{self.capacity_per_s:.0f} records/s at {at}")

    def to_json(self) -> dict:
        return {"offered_per_s": self.offered_per_s, "mean_service_ms": self.mean_service_ms,
                "members": self.members, "busy_members": self.busy_members,
                "capacity_per_s": self.capacity_per_s, "utilisation": self.utilisation}


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
    spread_s: float = 0.0           # a join wave's members start at times drawn uniformly over this many seconds
    pick: str = "first"
    how: str = "leave"              # a scale down's departures: "leave" (cleanly) or "crash"
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
    after: str | None = None        # "stable": not before the group is stable again (at most `timeout` s late)
    timeout: float | None = None
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
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    reference: Reference | None = None     # published figures to read the runs beside (experiments.scenario.reference)
    source: str = ""
    lines: LineLookup | None = field(default=None, compare=False, repr=False)

    def line_of(self, *path: str | int) -> int | None:
        return self.lines.line_of(tuple(path)) if self.lines else None

    @property
    def subscribed_topics(self) -> tuple[str, ...]:
        return self.group.topics or tuple(topic.name for topic in self.topics)

    @property
    def producer_topic(self) -> str:
        return self.producer.topic or self.topics[0].name

    def load(self) -> Load:
        """The producer's rate against what the group's first members can handle."""
        partitions = sum(topic.partitions for topic in self.topics if topic.name in self.subscribed_topics)
        return Load(offered_per_s=self.producer.rate, mean_service_ms=self.workload.mean_service_ms,
                    members=self.group.members, busy_members=min(self.group.members, partitions))


def on_backend(scenario: Scenario, backend: str) -> Scenario:
    """The scenario as one backend runs it: `strategy = "default"` made that backend's own default."""
    strategy = profile(backend).strategy(scenario.group.strategy)
    return scenario if strategy == scenario.group.strategy else replace(
        scenario, group=replace(scenario.group, strategy=strategy))


def member_name(index: int) -> str:
    """Members are named by their index, so a schedule reads the same for every backend."""
    return f"m{index:03d}"



# --------------------------------------------------------------------------- errors with lines


@dataclass(frozen=True)
class Problem:
    field: str
    line: int | None
    message: str
    origin: str | None = None   # where the value came from when not the file, e.g. "--set group.members=abc"

    def located(self, source: str) -> str:
        """`FILE:LINE: field: message`, or `ORIGIN: field: message` for a value given on the command line."""
        where = self.origin or f"{source}:{self.line if self.line is not None else '?'}"
        return f"{where}: {self.field}: {self.message}"


class ScenarioError(ValueError):
    """Every problem found in a scenario file, each naming its field and line."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [problem.located(self.source) for problem in self.problems]


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

    @property
    def start_offsets_s(self) -> list[float]:
        """A join wave's members' start offsets from the step, one per target (the resolver's draw over `spread_s`;
        all 0 without a spread)."""
        return [float(offset) for offset in self.params.get("start_offsets_s") or [0.0] * len(self.targets)]

    @property
    def touches_links(self) -> bool:
        spec = spec_of(self.action)
        return spec.target is Target.LINK or (self.emulated and spec.holds_links_when_emulated)

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

    def wave_hosts(self) -> tuple[Host, ...]:
        """Host processes whose members first start at a timeline step (a join, a scale that grows the group).
        The runner starts them armed before the timeline, so that their members join at the step itself."""
        started, hosts = set(self.initial_members), {}
        for step in self.steps:
            if step.action in ("join", "scale") and step.targets and not started & set(step.targets):
                hosts.update((host.name, host) for host in (self.host_of(name) for name in step.targets))
            started.update(step.targets)
        return tuple(hosts.values())

    def proxied_members(self) -> tuple[str, ...]:
        """Members whose links some step touches (a link fault, or an emulated crash or pause, which
        black-holes them): only these get fault proxies."""
        names = {target for step in self.steps if step.touches_links for target in step.targets}
        return tuple(sorted(names))

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "initial_members": list(self.initial_members),
            "hosts": [{"name": host.name, "members": list(host.members)} for host in self.hosts],
            "coordinator_broker": self.coordinator_broker,
            "steps": [step.to_json() for step in self.steps],
        }

