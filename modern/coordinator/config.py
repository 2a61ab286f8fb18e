"""The coordinator's broker-side settings, from the constructor or from the environment.

When the broker's CLI builds the coordinator it reads environment variables named after Kafka's configs:
REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS, REBALANCE_LAB_GROUP_MIN_SESSION_TIMEOUT_MS,
REBALANCE_LAB_GROUP_MAX_SESSION_TIMEOUT_MS, REBALANCE_LAB_GROUP_MAX_SIZE,
REBALANCE_LAB_COORDINATOR_LOAD_DELAY_MS, REBALANCE_LAB_OFFSET_METADATA_MAX_BYTES; for KIP-848 consumer groups
REBALANCE_LAB_GROUP_CONSUMER_SESSION_TIMEOUT_MS and REBALANCE_LAB_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS with
their bounds (..._GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS, ..._MAX_SESSION_TIMEOUT_MS,
..._MIN_HEARTBEAT_INTERVAL_MS, ..._MAX_HEARTBEAT_INTERVAL_MS: `rebalance.consumer_group_timing` names them)
and REBALANCE_LAB_GROUP_CONSUMER_MAX_SIZE; and REBALANCE_LAB_COORDINATOR_EVENTS (a JSONL
path for `coordinator_event` events) with REBALANCE_LAB_RUN_ID. A value that is not an integer
fails the broker's start with the variable's name, and so do consumer-group timings Kafka's broker
would refuse (a session below its minimum, ...), with the rule they break.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.consumer_group import ConsumerGroupConfig
from rebalance.consumer_group_timing import SETTINGS as TIMING_SETTINGS
from rebalance.consumer_group_timing import broker_env_name

_ENV_PREFIX = "REBALANCE_LAB_"


@dataclass(frozen=True, kw_only=True)
class CoordinatorConfig:
    group: GroupConfig = field(default_factory=GroupConfig)
    consumer_group: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    compact_after_records: int = 10_000   # compact a partition after this many appends
    # ... or this many bytes: the lab's __consumer_offsets may live in memory, where Kafka's log cleaner
    # works on disk; large records (a member subscribed to 10,000 topics) must not pile up for hours
    compact_after_bytes: int = 1 << 20
    load_delay_ms: int = 0                # COORDINATOR_LOAD_IN_PROGRESS this long after taking a partition
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes: longer commit metadata is refused
    events_path: str | None = None        # coordinator_event JSONL
    run_id: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ, *, load_delay_ms: int | None = None) -> CoordinatorConfig:
        """Settings from the environment; an explicit `load_delay_ms` (a broker option) wins over it."""
        names = {
            "GROUP_INITIAL_REBALANCE_DELAY_MS": "initial_rebalance_delay_ms",
            "GROUP_MIN_SESSION_TIMEOUT_MS": "min_session_timeout_ms",
            "GROUP_MAX_SESSION_TIMEOUT_MS": "max_session_timeout_ms",
            "GROUP_MAX_SIZE": "max_size",
        }
        group_settings = {attribute: value for suffix, attribute in names.items()
                          if (value := _int_from_env(env, suffix)) is not None}
        consumer_names = {broker_env_name(setting).removeprefix(_ENV_PREFIX): attribute
                          for setting, attribute in TIMING_SETTINGS.items()}
        consumer_names["GROUP_CONSUMER_MAX_SIZE"] = "max_size"
        consumer_settings = {attribute: value for suffix, attribute in consumer_names.items()
                             if (value := _int_from_env(env, suffix)) is not None}
        if load_delay_ms is None:
            load_delay_ms = _int_from_env(env, "COORDINATOR_LOAD_DELAY_MS") or 0
        return cls(group=GroupConfig(**group_settings), consumer_group=ConsumerGroupConfig(**consumer_settings),
                   events_path=env.get(_ENV_PREFIX + "COORDINATOR_EVENTS"),
                   run_id=env.get(_ENV_PREFIX + "RUN_ID", ""), load_delay_ms=load_delay_ms,
                   **({"offset_metadata_max_bytes": limit}
                      if (limit := _int_from_env(env, "OFFSET_METADATA_MAX_BYTES")) is not None else {}))


def _int_from_env(env: Mapping[str, str], suffix: str) -> int | None:
    raw = env.get(_ENV_PREFIX + suffix)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{_ENV_PREFIX + suffix}={raw!r} is not an integer") from None
