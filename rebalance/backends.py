"""Backends by profile: what each rebalancer needs, how its members connect and are named, what it accepts.

The runner, the member command and the member host ask a `BackendProfile` instead of testing a
backend's name. A new backend is a profile module of its own plus one entry in `_PROFILES`.
Entries are imported when first asked for, so that rebalance/ never imports kazoo or sockets itself.
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
    "modern": "modern.classic.backend:PROFILE",
    "kip848": "modern.kip848.backend:PROFILE",
}


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
    settings_section: str               # [group.<section>] of a scenario: native settings by Kafka name
    commits_carry_generation: bool      # offsets_committed events carry the group generation
    member_id: Callable[[str, str], str]            # (group, member name) -> the id its events carry
    check: Callable[[MemberConfig], None]           # raises ValueError or TypeError on a bad config
    member_class: str                   # "module:Class", made as Class(config, *, listener=None, recorder=None)
    # The brokers' environment for a run: (session timeout ms, native settings) -> variables. Where the
    # protocol puts group timing in the coordinator (KIP-848), this is how a run's session reaches it.
    broker_env: Callable[[int, Mapping[str, object]], Mapping[str, str]] = lambda session_ms, settings: {}
    # The terms of its herd cost model, requests per membership change = sum of coefficient x term
    # (experiments.summary.herd_model): "N2" (N squared), "N" (group size), "P" (partitions), "moved" (members
    # whose assignment changed), "1" (a constant). What the protocol's own steps make the cost grow with.
    herd_cost_terms: tuple[str, ...] = ("N", "1")
    # "module:attribute" of the assignors its coordinator runs (name -> function), where the protocol puts
    # the assignment in the coordinator (KIP-848); `assign --strategy uniform` finds them here.
    server_assignors: str | None = None

    def make(self, config: MemberConfig, **hooks: object) -> Member:
        """A member of this backend; `hooks` are the member's `listener` and `recorder`."""
        return _load(self.member_class)(config, **hooks)

    def strategy(self, name: str) -> str:
        """The strategy a scenario's `name` means on this backend: its own default for "default"."""
        return self.default_strategy if name == DEFAULT_STRATEGY else name

    def coordinator_assignors(self) -> Mapping[str, Callable]:
        return _load(self.server_assignors) if self.server_assignors else {}

    def address(self, config: MemberConfig) -> str | None:
        return getattr(config, self.connects_to.config_field)


def backend_names() -> tuple[str, ...]:
    return tuple(sorted(_PROFILES))


def profile(name: str) -> BackendProfile:
    try:
        target = _PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(backend_names())}") from None
    return _load(target)


def _load(target: str):
    """The attribute a "module:attribute" string names, imported when first needed."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)

