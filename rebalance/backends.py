"""Backends by profile: what each rebalancer needs, how its members connect and are named, what it accepts.

The runner, the member command, the member host, the scenario loader and the report ask a
`BackendProfile` instead of testing a backend's name: its settings section, its colour and marker, its
place among the columns are its profile's answer. A new backend is a profile module of its own plus one
entry in `_PROFILES`. Entries are imported when first asked for, so that rebalance/ never imports kazoo
or sockets itself.

The three generations: `legacy` (Kafka 0.8, members coordinating in ZooKeeper), `classic` (the classic
group protocol, JoinGroup and SyncGroup to a coordinator in the brokers) and `kip848` (KIP-848's
consumer group protocol). `modern`, the classic backend's earlier name, is accepted as its alias
wherever a name is read: scenario and campaign files, the command line, old runs' records and events.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from rebalance.member import Member, MemberConfig

# A scenario's `strategy = "default"`: each backend's own default (`BackendProfile.default_strategy`).
DEFAULT_STRATEGY = "default"

# Backend name -> "module:attribute" of its profile.
_PROFILES: dict[str, str] = {
    "legacy": "legacy_zk.backend:PROFILE",
    "classic": "modern.classic.backend:PROFILE",
    "kip848": "modern.kip848.backend:PROFILE",
}

# Earlier name -> the backend's name: old scenario files, campaign files and runs still read.
_ALIASES: dict[str, str] = {"modern": "classic"}


class GroupProtocol(Enum):
    """Kafka's `group.protocol`: how a member of a coordinator-based generation talks to its coordinator."""

    CLASSIC = "classic"     # JoinGroup, SyncGroup, Heartbeat: the group-wide barrier
    CONSUMER = "consumer"   # KIP-848's ConsumerGroupHeartbeat: each member converges on its own


class Server(Enum):
    """The servers a member is pointed at: the address it is given, and the one its own proxies replace."""

    ZOOKEEPER = "zookeeper"   # a connect string "host:port[,host:port]/chroot"; brokers are found in ZooKeeper
    BROKERS = "brokers"       # a bootstrap list "host:port[,host:port]"

    @property
    def config_field(self) -> str:
        """The `MemberConfig` field that carries the address."""
        return "zk_connect" if self is Server.ZOOKEEPER else "bootstrap"

    @property
    def option(self) -> str:
        """The member command's option for the address."""
        return "--zk" if self is Server.ZOOKEEPER else "--bootstrap"

    @property
    def form(self) -> str:
        return "HOST:PORT[/chroot]" if self is Server.ZOOKEEPER else "HOST:PORT"


@dataclass(frozen=True, kw_only=True)
class BackendProfile:
    name: str
    summary: str                        # one line, for help texts
    needs_zookeeper: bool               # the run starts an ensemble and the brokers register in it (0.8 layout)
    coordinator_in_brokers: bool        # the brokers host a group coordinator; else members coordinate in ZooKeeper
    connects_to: Server                 # what a member's address names
    strategies: tuple[str, ...]         # partition.assignment.strategy values it accepts
    default_strategy: str               # what its generation assigns with when nobody chooses
    # Kafka's group.protocol; None before there was one (0.8's members coordinate in ZooKeeper)
    group_protocol: GroupProtocol | None
    commits_carry_generation: bool      # offsets_committed events carry the group generation
    member_id: Callable[[str, str], str]            # (group, member name) -> the id its events carry
    # The native setting that fixes the id a member registers under (0.8's consumer.id, the clients' client.id).
    # Unset, a member's id is its name behind a tag drawn at each start, as a deployment's pods' ids are
    # (`rebalance.member.pod_client_id`); the member command sets it from `--id`, as a user configuring one does.
    id_setting: str
    check: Callable[[MemberConfig], None]           # raises ValueError or TypeError on a bad config
    member_class: str                   # "module:Class", made as Class(config, *, listener=None, recorder=None)
    # The brokers' environment for a run: (session timeout ms, native settings) -> variables. Where the
    # protocol puts group timing in the coordinator (KIP-848), this is how its settings reach it.
    broker_env: Callable[[int, Mapping[str, object]], Mapping[str, str]] = lambda session_ms, settings: {}
    # The session its members run with: (the scenario's session_timeout_ms, native settings) -> ms. The
    # scenario's for the clients that take it; the brokers' where the protocol makes it theirs (KIP-848).
    session_ms: Callable[[int, Mapping[str, object]], int] = lambda session_ms, settings: session_ms
    # The terms of its herd cost model, requests per membership change = sum of coefficient x term
    # (experiments.summary.herd_model): "N2" (N squared), "N" (group size), "P" (partitions), "moved" (members
    # whose assignment changed), "1" (a constant). What the protocol's own steps make the cost grow with.
    herd_cost_terms: tuple[str, ...] = ("N", "1")
    # Whether its generation's application commits after each poll's records when a scenario asks for that
    # (`[workload] commit = "batch"`, Spring Kafka's AckMode.BATCH). False: its application had no poll's batch
    # and committed through the client's auto-commit whatever the scenario asks (0.8's high-level consumer, an
    # iterator handing out one message at a time, auto.commit.enable on by default).
    commits_after_batch: bool = True
    # The assignor a strategy name runs as on this backend (KIP-848 maps the classic names onto its server
    # assignors: cooperative-sticky runs `uniform`); the name itself where the backend takes it as it is.
    runs_as: Callable[[str], str] = lambda strategy: strategy
    # How the report draws and places it: a matplotlib colour and marker, and its column (oldest protocol
    # first, as the lab tells the story).
    colour: str
    marker: str
    column: int

    def make(self, config: MemberConfig, **hooks: object) -> Member:
        """A member of this backend; `hooks` are the member's `listener` and `recorder`."""
        return _load(self.member_class)(config, **hooks)

    def strategy(self, name: str) -> str:
        """The strategy a scenario's `name` means on this backend: its own default for "default"."""
        return self.default_strategy if name == DEFAULT_STRATEGY else name

    def strategy_label(self, name: str) -> str:
        """The strategy as a page names a cell: `cooperative-sticky (runs uniform)` where the backend runs
        another assignor under that name."""
        strategy = self.strategy(name)
        runs = self.runs_as(strategy)
        return strategy if runs == strategy else f"{strategy} (runs {runs})"

    @property
    def aliases(self) -> tuple[str, ...]:
        """Earlier names it still answers to (a scenario's `[group.modern]` is `[group.classic]`)."""
        return tuple(alias for alias, name in sorted(_ALIASES.items()) if name == self.name)

    def address(self, config: MemberConfig) -> str | None:
        return getattr(config, self.connects_to.config_field)


def backend_names() -> tuple[str, ...]:
    return tuple(sorted(_PROFILES))


def canonical_name(name: str) -> str:
    """The backend's name for `name`, which may be an earlier one (`modern` -> `classic`); any other
    name, known or not (an old run's "unknown"), comes back unchanged."""
    return _ALIASES.get(name, name)


def profile(name: str) -> BackendProfile:
    """The profile of a backend by its name or an alias of it."""
    try:
        target = _PROFILES[canonical_name(name)]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(backend_names())} "
                         f"({', '.join(f'{a} = {n}' for a, n in sorted(_ALIASES.items()))})") from None
    return _load(target)


def profiles() -> tuple[BackendProfile, ...]:
    """Every backend's profile, in column order."""
    return tuple(sorted((profile(name) for name in _PROFILES), key=lambda each: each.column))


def column_order(name: str) -> tuple[int, str]:
    """A sort key that puts backends in their profiles' column order; a name no profile answers to
    (an old run's "unknown") goes last, by name."""
    known = canonical_name(name) in _PROFILES
    return (profile(name).column if known else len(_PROFILES) + 1, canonical_name(name))


def _load(target: str):
    """The attribute a "module:attribute" string names, imported when first needed."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)

