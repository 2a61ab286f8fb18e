"""The 0.8 consumer's settings, under their 0.8 names, with their 0.8 defaults.

`LegacyConfig` is frozen: it is built once per member and never edited. It is made from
the lab's shared `MemberConfig` (whose common fields map onto 0.8 names, so that both
backends run under the same settings) plus `MemberConfig.extra`, where any 0.8 setting
may be given by its Kafka name. An unknown name or a value of the wrong kind fails at
once, with the name in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from rebalance.member import MemberConfig, pod_client_id

STRATEGIES = ("range", "roundrobin")
OFFSET_RESETS = ("smallest", "largest")

# MemberConfig speaks the new consumer's words for offset reset; 0.8 had its own.
_RESET_FROM_MODERN = {"earliest": "smallest", "latest": "largest", "smallest": "smallest", "largest": "largest"}


@dataclass(frozen=True, kw_only=True)
class LegacyConfig:
    group_id: str
    topics: tuple[str, ...]
    zookeeper_connect: str
    consumer_id: str | None = None                 # consumer.id: replaces host-time-uuid in the id
    member_name: str | None = None                 # the lab's name for it: the id its events carry
    streams_per_topic: int = 1                     # createMessageStreams(topic -> streams)
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int | None = None   # None: same as the session timeout
    zookeeper_sync_time_ms: int = 2000
    rebalance_max_retries: int = 4
    rebalance_backoff_ms: int | None = None        # None: zookeeper.sync.time.ms
    auto_commit_enable: bool = True
    auto_commit_interval_ms: int = 60000
    auto_offset_reset: str = "largest"
    partition_assignment_strategy: str = "range"
    bootstrap: str | None = None                   # data path override; normally found under /brokers/ids

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group.id must not be empty")
        if not self.topics:
            raise ValueError("subscribe to at least one topic")
        if self.partition_assignment_strategy not in STRATEGIES:
            raise ValueError(
                f"partition.assignment.strategy={self.partition_assignment_strategy!r}: "
                f"the 0.8 consumer knows {' and '.join(STRATEGIES)}"
            )
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise ValueError(f"auto.offset.reset={self.auto_offset_reset!r}: use smallest or largest")
        for name in ("zookeeper_session_timeout_ms", "zookeeper_sync_time_ms", "auto_commit_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{_kafka_name(name)} must be positive")
        if self.rebalance_max_retries < 1:
            raise ValueError("rebalance.max.retries must be at least 1")
        if self.streams_per_topic < 1:
            raise ValueError("streams per topic must be at least 1")

    @property
    def connection_timeout_ms(self) -> int:
        return self.zookeeper_connection_timeout_ms or self.zookeeper_session_timeout_ms

    @property
    def backoff_ms(self) -> int:
        return self.rebalance_backoff_ms if self.rebalance_backoff_ms is not None else self.zookeeper_sync_time_ms

    @classmethod
    def from_member_config(cls, config: MemberConfig) -> LegacyConfig:
        """Shared fields first, then `extra` under 0.8 names (which win)."""
        if not config.zk_connect:
            raise ValueError("the legacy backend needs a ZooKeeper connect string (zookeeper.connect)")
        strategy = config.strategy.removeprefix("legacy-")
        base = cls(
            group_id=config.group,
            topics=tuple(config.topics),
            zookeeper_connect=config.zk_connect,
            consumer_id=pod_client_id(config.member_name) if config.member_name else None,
            member_name=config.member_name,
            zookeeper_session_timeout_ms=config.session_timeout_ms,
            auto_commit_enable=config.auto_commit,
            auto_commit_interval_ms=config.auto_commit_interval_ms,
            auto_offset_reset=reset_name(config.auto_offset_reset),
            partition_assignment_strategy=strategy,
            bootstrap=config.bootstrap,
        )
        return base.with_overrides(config.extra)

    def with_overrides(self, settings: Mapping[str, object]) -> LegacyConfig:
        """Apply settings given by their Kafka names, e.g. {"rebalance.max.retries": "2"}."""
        changes: dict[str, object] = {}
        for kafka_name, raw in settings.items():
            attr = _ATTR_BY_KAFKA_NAME.get(kafka_name)
            if attr is None:
                known = ", ".join(sorted(_ATTR_BY_KAFKA_NAME))
                raise ValueError(f"unknown 0.8 consumer setting {kafka_name!r}; known: {known}")
            changes[attr] = _coerce(kafka_name, attr, raw)
        return replace(self, **changes)


def _kafka_name(attr: str) -> str:
    return attr.replace("_", ".")


# Every field is reachable by its dotted 0.8 name, e.g. rebalance.max.retries.
_ATTR_BY_KAFKA_NAME = {
    _kafka_name(f.name): f.name for f in fields(LegacyConfig) if f.name not in ("topics", "streams_per_topic", "member_name")
}
_TYPES = {f.name: f.type for f in fields(LegacyConfig)}


def _coerce(kafka_name: str, attr: str, raw: object) -> object:
    kind = _TYPES[attr]
    if raw is None and "None" in kind:
        return None
    text = str(raw).strip()
    try:
        if kind.startswith("int"):
            if isinstance(raw, bool):
                raise ValueError
            return int(text)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
    except ValueError:
        raise ValueError(f"{kafka_name}={raw!r}: expected {kind.split(' ')[0]}") from None
    if attr == "auto_offset_reset":
        return reset_name(text)
    return text


def reset_name(value: str) -> str:
    """0.8's word for an offset reset given in either generation's words."""
    try:
        return _RESET_FROM_MODERN[value]
    except KeyError:
        raise ValueError(f"auto.offset.reset={value!r}: use smallest/largest (or earliest/latest)") from None
