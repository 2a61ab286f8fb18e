"""Which topics exist and how many partitions each has.

With a data directory every topic is one small JSON file under `<data>/topics/`, so a
restarted broker, and every broker sharing the directory, knows it. Brokers without
one learn topics from their peers (the cluster view's probes carry them).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

# The partition count is declared where the coordinator lookup uses it; re-exported for the broker.
from rebalance.javahash import OFFSETS_TOPIC_PARTITIONS as OFFSETS_TOPIC_PARTITIONS

OFFSETS_TOPIC = "__consumer_offsets"

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000  # a lab bound (Kafka has none), so one request cannot make a broker loop for minutes


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int
    compacted: bool = False   # cleanup.policy=compact
    internal: bool = False


def topic_name_problem(name: str | None) -> str | None:
    """Kafka's rule for topic names, or None when the name is fine."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL_NAME.fullmatch(name):
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


class TopicStore:
    def __init__(self, data_dir: Path | None = None) -> None:
        self._dir = data_dir / "topics" if data_dir is not None else None
        self._topics: dict[str, TopicSpec] = {}
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
            self.reload()

    def get(self, name: str) -> TopicSpec | None:
        return self._topics.get(name)

    def all(self) -> list[TopicSpec]:
        return sorted(self._topics.values(), key=lambda spec: spec.name)

    def add(self, spec: TopicSpec) -> bool:
        """Add a topic; False when it already exists (the first definition wins)."""
        if spec.name in self._topics:
            return False
        self._topics[spec.name] = spec
        if self._dir is not None:
            path = self._dir / f"{spec.name}.json"
            if not path.exists():
                temporary = path.with_suffix(f".{os.getpid()}.tmp")
                temporary.write_text(json.dumps(asdict(spec)))
                os.replace(temporary, path)
        return True

    def reload(self) -> list[TopicSpec]:
        """Pick up topics other brokers wrote into a shared directory; returns the new ones."""
        added = []
        if self._dir is None:
            return added
        for path in sorted(self._dir.glob("*.json")):
            if path.stem in self._topics:
                continue
            try:
                spec = TopicSpec(**json.loads(path.read_text()))
            except (ValueError, TypeError, OSError):
                continue  # half-written by another process: read it next time
            if spec.name not in self._topics:
                self._topics[spec.name] = spec
                added.append(spec)
        return added
