"""The one interface every backend's member implements, and the config every member is made from.

The runner only ever talks to a `Member`; whether it coordinates through ZooKeeper
(legacy_zk) or through a group coordinator (classic, kip848) is the backend's business
(`rebalance.backends` says which backends there are and how each is made).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from rebalance.types import Record, TopicPartition


class RebalanceListener:
    """Callbacks around a rebalance, named as in Kafka's ConsumerRebalanceListener.

    revoked: given up cleanly (offsets may be committed first);
    lost: taken away without a chance to commit (session expired, fenced).
    """

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.on_partitions_revoked(partitions)


def pod_client_id(member_name: str) -> str:
    """The client id a lab member sends: a tag drawn anew at each start, a dot, then its name.

    Kafka's classic member id is `client.id`, a dash and a UUID, and the pods of one deployment share one
    `client.id` (Spring's `consumer-<group>-1` in each), so their member ids, and 0.8's `<group>_<host>-...`
    consumer ids, order at random and anew at every restart. The range and round-robin assignors hand out
    partitions in that order, so it decides which members a scale-down takes partitions from. The tag gives
    the lab's ids that order; the name after the dot is what the brokers' advertise map routes by.
    """
    return f"{uuid.uuid4().hex[:8]}.{member_name}"


def member_name_of(client_id: str) -> str:
    """The member name inside a `pod_client_id` (any other client id is its own name)."""
    return client_id.rpartition(".")[2]


DEFAULT_SESSION_TIMEOUT_MS = 6000   # the lab's one default: 0.8's zookeeper.session.timeout.ms, the broker's minimum


@dataclass(frozen=True, kw_only=True)
class MemberConfig:
    """Everything a backend needs to make a member. Unknown keys fail loudly (frozen, keyword-only).

    Timeouts use the coordinator clients' names; each backend maps them onto its own settings
    (legacy: session_timeout_ms -> zookeeper.session.timeout.ms). Backend-specific
    settings go in `extra` under their native Kafka names, e.g.
    {"rebalance.max.retries": 4} for legacy or {"heartbeat.interval.ms": 3000} for classic.
    """

    group: str
    topics: tuple[str, ...]
    strategy: str = "range"
    member_name: str | None = None          # legacy: consumer.id; classic, kip848: client.id
    group_instance_id: str | None = None    # static membership (classic, kip848)
    zk_connect: str | None = None           # legacy: "host:port[,host:port]/chroot"
    bootstrap: str | None = None            # broker address(es) "host:port[,host:port]"
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    auto_offset_reset: str = "earliest"     # "earliest" | "latest" (0.8: smallest | largest)
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**asdict(self), "topics": list(self.topics), "extra": dict(self.extra)}

    @classmethod
    def from_json(cls, document: Mapping[str, object]) -> MemberConfig:
        """The inverse of `to_json`; fields it lacks take their defaults here, unknown ones fail."""
        if not isinstance(document, Mapping):
            raise ValueError(f"a member config must be a JSON object, got {type(document).__name__}")
        unknown = sorted(set(document) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown member config field(s): {', '.join(unknown)}")
        values = dict(document)
        if "topics" in values:
            values["topics"] = tuple(values["topics"])
        return cls(**values)


@runtime_checkable
class Member(Protocol):
    """A consumer-group member as the experiments see it."""

    member_id: str

    def start(self) -> None:
        """Register (legacy) or join (classic, kip848); returns once the attempt is under way."""

    def poll(self, timeout_s: float) -> list[Record]:
        """Records of the partitions this member believes it owns."""

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit next-offsets to consume; None means the current positions."""

    def assignment(self) -> set[TopicPartition]:
        """What this member believes it owns now (may be stale: that is the point of the lab)."""

    def close(self) -> None:
        """Leave the group cleanly."""

    def abandon(self) -> None:
        """Drop out as SIGKILL would: no commit, no revocation, no leave; the group finds out when the
        session expires. How one member among several in a process is crashed."""
