"""What the lab's KIP-848 client is told, and how a scenario's classic strategy names map onto it.

With `group.protocol=consumer` the assignor runs in the coordinator and the session timeout and
heartbeat interval are broker settings, so the client's own settings are few. A scenario written for
the classic protocol names a client strategy (range, roundrobin, sticky, cooperative-sticky); it runs
here unchanged: `range` asks the server for `range`, every other classic name for the server's
default, `uniform` (sticky and balanced, which is what those strategies were chosen for).
"""

from __future__ import annotations

from dataclasses import dataclass

from modern.client.connection import parse_address
from rebalance.consumer_group_timing import SETTINGS as BROKER_TIMING_SETTINGS
from rebalance.consumer_group_timing import ConsumerGroupTiming
from rebalance.member import MemberConfig

SERVER_ASSIGNORS = ("uniform", "range", "uniform-4.1")   # the coordinator's (modern.coordinator.assignors.ASSIGNORS)
CLASSIC_TO_SERVER = {"range": "range", "roundrobin": "uniform", "sticky": "uniform", "cooperative-sticky": "uniform"}
STRATEGIES = SERVER_ASSIGNORS + tuple(name for name in CLASSIC_TO_SERVER if name not in SERVER_ASSIGNORS)

# The broker settings a scenario may give in [group.kip848] (Kafka's group.consumer.* session and heartbeat
# with their bounds): the runner hands them to the brokers (modern.kip848.backend); members ignore them.
BROKER_SETTINGS = tuple(BROKER_TIMING_SETTINGS)
CLIENT_ID_SETTING = "client.id"   # a text setting: the member's client id, when a scenario names it

# MemberConfig.extra keys this client understands, under Kafka's consumer names.
EXTRA_SETTINGS = {
    "group.remote.assignor": "assignor",
    "max.poll.interval.ms": "rebalance_timeout_ms",   # Kafka sends it as the rebalance timeout
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "request.timeout.ms": "request_timeout_ms",
    "fetch.max.wait.ms": "fetch_max_wait_ms",
}


def server_assignor(strategy: str) -> str:
    """The server assignor a strategy name asks for; a clear error for names no one knows."""
    if strategy in SERVER_ASSIGNORS:
        return strategy
    if strategy in CLASSIC_TO_SERVER:
        return CLASSIC_TO_SERVER[strategy]
    raise ValueError(f"unknown strategy {strategy!r} for the kip848 backend; the server assignors are "
                     f"{', '.join(SERVER_ASSIGNORS)}, and the classic names {', '.join(CLASSIC_TO_SERVER)} "
                     f"map onto them")


@dataclass(frozen=True, kw_only=True)
class Kip848Settings:
    group: str
    topics: tuple[str, ...]
    bootstrap: tuple[tuple[str, int], ...]
    client_id: str
    assignor: str = "uniform"                   # ServerAssignor
    instance_id: str | None = None              # group.instance.id
    rebalance_timeout_ms: int = 300_000         # max.poll.interval.ms, Kafka's default
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    request_timeout_ms: int = 30_000
    fetch_max_wait_ms: int = 500                # fetch.max.wait.ms (the data path's long poll)
    auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000

    def __post_init__(self) -> None:
        if not self.topics:
            raise ValueError("a member needs at least one topic")
        if self.assignor not in SERVER_ASSIGNORS:
            raise ValueError(f"unknown server assignor {self.assignor!r}; expected one of {', '.join(SERVER_ASSIGNORS)}")


def settings_from(config: MemberConfig, client_id: str) -> Kip848Settings:
    """The client's settings; `client_id` unless `extra` sets `client.id`, as a Kafka user may."""
    if not config.bootstrap:
        raise ValueError("the kip848 backend needs a bootstrap address (HOST:PORT[,HOST:PORT])")
    known = set(EXTRA_SETTINGS) | set(BROKER_SETTINGS) | {CLIENT_ID_SETTING}
    unknown = sorted(set(config.extra) - known)
    if unknown:
        raise ValueError(f"unknown kip848 setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))} "
                         f"(session and heartbeat timing are broker settings in KIP-848)")
    ConsumerGroupTiming.from_settings(config.extra)   # what Kafka's broker would refuse fails here, before the run
    values: dict[str, object] = {"assignor": server_assignor(config.strategy)}
    for key, value in config.extra.items():
        if key in EXTRA_SETTINGS:
            field = EXTRA_SETTINGS[key]
            values[field] = str(value) if field == "assignor" else int(value)
    return Kip848Settings(
        group=config.group, topics=tuple(config.topics), client_id=str(config.extra.get(CLIENT_ID_SETTING, client_id)),
        bootstrap=tuple(parse_address(a) for a in config.bootstrap.split(",") if a.strip()),
        instance_id=config.group_instance_id, auto_commit=config.auto_commit,
        auto_commit_interval_ms=config.auto_commit_interval_ms, **values,
    )

