"""The Kafka consumer settings the classic client honours, under their Kafka names' meaning."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    group: str
    topics: tuple[str, ...]
    bootstrap: tuple[tuple[str, int], ...]
    client_id: str
    strategy: str = "range"                      # partition.assignment.strategy
    group_instance_id: str | None = None         # group.instance.id
    session_timeout_ms: int                      # session.timeout.ms (no default here: MemberConfig's is the one)
    heartbeat_interval_ms: int = 3_000           # heartbeat.interval.ms
    max_poll_interval_ms: int = 300_000          # max.poll.interval.ms (also the rebalance timeout)
    rebalance_timeout_ms: int | None = None      # defaults to max.poll.interval.ms, as Java does
    retry_backoff_ms: int = 100                  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000            # retry.backoff.max.ms (the coordinator lookup's backoff cap)
    request_timeout_ms: int = 30_000             # request.timeout.ms
    fetch_max_wait_ms: int = 500                 # fetch.max.wait.ms (the data path's long poll)

    def __post_init__(self) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat.interval.ms must be lower than session.timeout.ms")
        if not self.topics:
            raise ValueError("a member needs at least one topic")

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.rebalance_timeout_ms or self.max_poll_interval_ms
