"""The classic client's settings that time its group requests, and its states towards the group, as the simulated
member (`experiments.sim.classic`) and its failover variant (`experiments.sim.failover`) read them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from modern.classic.settings import ClientSettings


@dataclass(frozen=True, kw_only=True)
class ClientTiming:
    """The classic client's settings that time its group requests (Kafka 3.7's defaults)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 300_000       # max.poll.interval.ms
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    auto_commit_interval_ms: int = 5_000

    @classmethod
    def of(cls, settings: ClientSettings, auto_commit_interval_ms: int) -> ClientTiming:
        """From the real client's settings (`modern.classic.member.settings_from`: the scenario's [group.classic]
        read as the real member reads it)."""
        return cls(session_timeout_ms=settings.session_timeout_ms, heartbeat_interval_ms=settings.heartbeat_interval_ms,
                   rebalance_timeout_ms=settings.effective_rebalance_timeout_ms,
                   retry_backoff_ms=settings.retry_backoff_ms, request_timeout_ms=settings.request_timeout_ms,
                   auto_commit_interval_ms=auto_commit_interval_ms)


class State(Enum):
    STOPPED = "stopped"
    UNJOINED = "unjoined"     # out of the group (fenced) until the application's next poll rejoins
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
