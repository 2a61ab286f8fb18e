"""The broker's own count of the requests it served, per API, and how to read it from outside.

Every request the broker dispatches is counted under its API name (`JoinGroup`, `Heartbeat`, ...).
The counts are read like ZooKeeper's four-letter words: a connection to the broker's Kafka port
that begins with the four bytes `reqs` (no Kafka frame starts so: as a size prefix they would
announce a frame of 1.9 GB) gets one JSON object `{"JoinGroup": 12, ...}` and is closed. Reading
the counts is not itself a request, so it counts nothing.

`group_requests` is the server's side of the herd table: the group APIs a membership change makes
members send, without the background ones (Heartbeat, OffsetCommit) that the members' own count
leaves out too. KIP-848's ConsumerGroupHeartbeat is both the rhythm and the change, so its API count
is background; the coordinator, which knows whether a heartbeat changed anything, counts those that
did once more under `heartbeat_kinds.CHANGING_COUNTER`, and that count is a group request.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Mapping

from kafka.protocol.api_key import ApiKey

from rebalance import heartbeat_kinds

STATS_WORD = b"reqs"
# Group APIs a rebalance causes. Heartbeat and OffsetCommit run all the time, whatever the group does.
# A ConsumerGroupHeartbeat that is not steady (rebalance.heartbeat_kinds), counted by
# modern.coordinator.group_metadata_manager beside the API's own count.
GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "LeaveGroup", "OffsetFetch", "DescribeGroups",
              "ListGroups", heartbeat_kinds.CHANGING_COUNTER)


class RequestCounters:
    """Requests served per API name; one event loop updates it, readers get a copy."""

    def __init__(self) -> None:
        self._by_api: Counter[str] = Counter()

    def count(self, api_key: int) -> None:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"api-{api_key}"
        self._by_api[name] += 1

    def count_named(self, name: str) -> None:
        """A count the API key alone cannot tell (which heartbeats changed something)."""
        self._by_api[name] += 1

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self._by_api.items()))

    def answer(self) -> bytes:
        return json.dumps(self.snapshot(), separators=(",", ":")).encode()


def read_counters(host: str, port: int, timeout_s: float = 2.0) -> dict[str, int]:
    """A broker's request counts per API name."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(STATS_WORD)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return json.loads(b"".join(chunks) or b"{}")


def group_requests(by_api: Mapping[str, int]) -> int:
    return sum(by_api.get(name, 0) for name in GROUP_APIS)
