"""KIP-848's session timeout and heartbeat interval as Kafka 4.0's broker takes them: six `group.consumer.*`
settings, their defaults, and the checks its `GroupCoordinatorConfig` constructor makes before the broker
starts (a broker whose settings fail one does not start).

The session and the interval are the broker's, not the client's, and an operator may move them only
within the bounds, which are broker settings too: a session below 45 s needs
`group.consumer.min.session.timeout.ms` lowered with it, a heartbeat below 5 s
`group.consumer.min.heartbeat.interval.ms`. The coordinator runs with these values
(`modern.coordinator.consumer_group.ConsumerGroupConfig`) and the kip848 backend's profile checks a
scenario's `[group.kip848]` with the same class before handing the settings to the brokers, so a scenario
that Kafka's broker would refuse fails before the run, naming its line.

Kafka 4 also has per-group overrides (`consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`, set
with IncrementalAlterConfigs on a GROUP resource and checked by `GroupConfig.validateValues` against these
bounds); the lab's broker serves no config API, so a group always runs with the broker's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

SESSION_TIMEOUT = "group.consumer.session.timeout.ms"
MIN_SESSION_TIMEOUT = "group.consumer.min.session.timeout.ms"
MAX_SESSION_TIMEOUT = "group.consumer.max.session.timeout.ms"
HEARTBEAT_INTERVAL = "group.consumer.heartbeat.interval.ms"
MIN_HEARTBEAT_INTERVAL = "group.consumer.min.heartbeat.interval.ms"
MAX_HEARTBEAT_INTERVAL = "group.consumer.max.heartbeat.interval.ms"

_ENV_PREFIX = "REBALANCE_LAB_"   # the lab's broker reads its settings from the environment (its CoordinatorConfig)


@dataclass(frozen=True, kw_only=True)
class ConsumerGroupTiming:
    """The six settings under Kafka's defaults (GroupCoordinatorConfig, 4.0); a combination Kafka's broker
    would refuse at startup raises ValueError saying which rule it breaks."""

    session_timeout_ms: int = 45_000             # group.consumer.session.timeout.ms
    min_session_timeout_ms: int = 45_000         # group.consumer.min.session.timeout.ms
    max_session_timeout_ms: int = 60_000         # group.consumer.max.session.timeout.ms
    heartbeat_interval_ms: int = 5_000           # group.consumer.heartbeat.interval.ms
    min_heartbeat_interval_ms: int = 5_000       # group.consumer.min.heartbeat.interval.ms
    max_heartbeat_interval_ms: int = 15_000      # group.consumer.max.heartbeat.interval.ms

    def __post_init__(self) -> None:
        problem = refusal(self)
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> ConsumerGroupTiming:
        """From Kafka's names (other keys are left alone); a value that is not a whole number is refused."""
        values = {}
        for name, attribute in SETTINGS.items():
            if name in settings:
                value = settings[name]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name} must be a whole number of milliseconds, not {value!r}")
                values[attribute] = value
        return cls(**values)


# Kafka's name of each setting -> the attribute holding it.
SETTINGS: dict[str, str] = {
    SESSION_TIMEOUT: "session_timeout_ms", MIN_SESSION_TIMEOUT: "min_session_timeout_ms",
    MAX_SESSION_TIMEOUT: "max_session_timeout_ms", HEARTBEAT_INTERVAL: "heartbeat_interval_ms",
    MIN_HEARTBEAT_INTERVAL: "min_heartbeat_interval_ms", MAX_HEARTBEAT_INTERVAL: "max_heartbeat_interval_ms",
}
assert set(SETTINGS.values()) == {field.name for field in fields(ConsumerGroupTiming)}


def refusal(timing: ConsumerGroupTiming) -> str | None:
    """Why Kafka's broker would not start with these settings, or None. The rules in Kafka's order: every
    value at least 1 ms (its ConfigDef), then the heartbeat's bounds and the interval within them, the
    session's bounds and the session within them, and the interval shorter than the session; the first
    broken rule is the one reported, as Kafka's `require` stops at it."""
    value = {name: getattr(timing, attribute) for name, attribute in SETTINGS.items()}
    for name, ms in value.items():
        if ms < 1:
            return f"{name} must be at least 1 ms, not {ms}"
    rules = (
        (MAX_HEARTBEAT_INTERVAL, ">=", MIN_HEARTBEAT_INTERVAL), (HEARTBEAT_INTERVAL, ">=", MIN_HEARTBEAT_INTERVAL),
        (HEARTBEAT_INTERVAL, "<=", MAX_HEARTBEAT_INTERVAL), (MAX_SESSION_TIMEOUT, ">=", MIN_SESSION_TIMEOUT),
        (SESSION_TIMEOUT, ">=", MIN_SESSION_TIMEOUT), (SESSION_TIMEOUT, "<=", MAX_SESSION_TIMEOUT),
        (HEARTBEAT_INTERVAL, "<", SESSION_TIMEOUT),
    )
    holds = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    words = {">=": "may not be below", "<=": "may not be above", "<": "must be shorter than"}
    for left, relation, right in rules:
        if not holds[relation](value[left], value[right]):
            hint = (f" (lower {right} with it: the bound is a broker setting too)"
                    if right in (MIN_SESSION_TIMEOUT, MIN_HEARTBEAT_INTERVAL) else "")
            return (f"{left} = {value[left]} {words[relation]} {right} = {value[right]}{hint}; "
                    f"Kafka's broker does not start with these settings")
    return None


def broker_env_name(setting: str) -> str:
    """The environment variable the lab's broker reads a `group.consumer.*` setting from."""
    return _ENV_PREFIX + setting.upper().replace(".", "_")
