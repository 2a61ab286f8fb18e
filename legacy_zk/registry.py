"""Who is in the group: the consumer id, the ids znode and its JSON, and the 0.8 paths.

0.8's layout (ZkUtils at 0.8.2), per group and topic:
  /consumers/<group>/ids/<consumerIdString>        ephemeral, subscription JSON
  /consumers/<group>/owners/<topic>/<partition>    ephemeral, owning thread id
  /consumers/<group>/offsets/<topic>/<partition>   persistent, next offset as a decimal string
  /brokers/ids/<id>, /brokers/topics/<topic>       written by the brokers
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError

from legacy_zk.zk import TracedZooKeeper

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"


@dataclass(frozen=True)
class GroupPaths:
    group: str

    @property
    def ids(self) -> str:
        return f"/consumers/{self.group}/ids"

    def member(self, consumer_id: str) -> str:
        return f"{self.ids}/{consumer_id}"

    def owners(self, topic: str) -> str:
        return f"/consumers/{self.group}/owners/{topic}"

    def owner(self, topic: str, partition: int) -> str:
        return f"{self.owners(topic)}/{partition}"

    def offsets(self, topic: str) -> str:
        return f"/consumers/{self.group}/offsets/{topic}"

    def offset(self, topic: str, partition: int) -> str:
        return f"{self.offsets(topic)}/{partition}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def consumer_id_string(
    group: str,
    consumer_id: str | None = None,
    *,
    hostname: str | None = None,
    now_ms: int | None = None,
    random_hex: str | None = None,
) -> str:
    """`<group>_<host>-<epoch ms>-<8 hex digits of a random UUID>`, or `<group>_<consumer.id>`."""
    if consumer_id:
        return f"{group}_{consumer_id}"
    hostname = hostname or socket.gethostname()
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    random_hex = random_hex or uuid.uuid4().hex[:8]
    return f"{group}_{hostname}-{now_ms}-{random_hex}"


def registration_json(subscription: Mapping[str, int], now_ms: int) -> bytes:
    """The ids znode's value, fields in 0.8's order, no spaces (kafka.utils.Json)."""
    return json.dumps(
        {"version": 1, "subscription": dict(subscription), "pattern": "static", "timestamp": str(now_ms)},
        separators=(",", ":"),
    ).encode()


def parse_registration(data: bytes) -> dict[str, int]:
    """A member's subscription {topic: streams} from its ids znode."""
    try:
        value = json.loads(data)
        return {str(topic): int(streams) for topic, streams in value["subscription"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a 0.8 consumer registration: {data[:200]!r}") from error


def register(
    zk: TracedZooKeeper,
    paths: GroupPaths,
    consumer_id: str,
    subscription: Mapping[str, int],
    *,
    backoff_s: float,
    stopping: threading.Event,
) -> None:
    """Create the ids znode. A node left by an earlier session of the same id is waited out
    (ZooKeeper deletes it when that session expires), as 0.8 did."""
    zk.ensure_path(paths.ids)
    path = paths.member(consumer_id)
    while True:
        try:
            zk.create(path, registration_json(subscription, time.time_ns() // 1_000_000), ephemeral=True)
            return
        except NodeExistsError:
            _, stat = zk.get(path)
            if stat.ephemeralOwner == zk.session_id:
                return
            if stopping.wait(backoff_s):
                return
