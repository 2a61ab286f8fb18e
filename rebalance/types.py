"""Value types shared by every backend: partitions, subscriptions, assignments, generations.

Frozen dataclasses, so an assignment is replaced and never edited in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's own spelling: "topic-3"
        return f"{self.topic}-{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        """Parse "topic-3" (the topic itself may contain dashes)."""
        topic, sep, number = text.rpartition("-")
        if not sep or not topic or not number.lstrip("-").isdigit():
            raise ValueError(f"not a topic-partition: {text!r} (expected TOPIC-N, e.g. t0-2)")
        return cls(topic, int(number))


@dataclass(frozen=True)
class Generation:
    """A group generation as a member sees it; NO_GENERATION before the first join."""

    generation_id: int
    member_id: str
    protocol: str | None

    @property
    def is_valid(self) -> bool:
        return self.generation_id >= 0


NO_GENERATION = Generation(-1, "", None)


@dataclass(frozen=True)
class Subscription:
    """What a member tells the assignor: its topics and, for sticky assignors, what it owns."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1
    user_data: bytes | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(sorted(self.partitions)))


@dataclass(frozen=True)
class Record:
    """One consumed record, as every backend hands it to the application."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = -1
    headers: tuple = field(default=())

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
