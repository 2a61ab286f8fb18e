"""The cluster as one broker sees it: which brokers are alive and who leads which partition.

Leadership is a pure function of the configured brokers and the live set. Partition p of
every topic prefers the (p mod N)-th of the N configured brokers in ascending id order (its
"preferred leader", as in Kafka); while that broker is dead, the (p mod n)-th of the n live
ones leads it. So a death moves only the dead broker's partitions, and a restart brings
them back. Every broker computes this from its own view, so views that agree give the same
answer without any election; while views differ (just after a death) two brokers may both
claim a partition, which is why a leader must also hold the partition's lock before it
writes (see broker.server).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class LeadershipChange:
    """This broker gained (local=True: its log is open and readable) or lost a partition."""

    topic: str
    partition: int
    leader: int | None     # the leader as this broker now sees it
    local: bool


LeadershipCallback = Callable[[LeadershipChange], Any]


class ClusterView:
    def __init__(self, node_id: int, own_address: BrokerAddress, configured: Iterable[int] = (),
                 spawn: Callable[[Any], Any] | None = None) -> None:
        self.node_id = node_id
        self.configured = sorted({node_id, *configured})
        self._live: dict[int, BrokerAddress] = {node_id: own_address}
        self._callbacks: list[LeadershipCallback] = []
        self._spawn = spawn  # runs a callback's coroutine as a task whose errors are reported

    # -- queries ---------------------------------------------------------------------
    def live_brokers(self) -> list[BrokerAddress]:
        """Live brokers (this one included) with their default advertised addresses, by id."""
        return [self._live[node] for node in sorted(self._live)]

    def is_live(self, node_id: int) -> bool:
        return node_id in self._live

    def address_of(self, node_id: int) -> BrokerAddress | None:
        return self._live.get(node_id)

    def leader_for(self, topic: str, partition: int) -> int:
        """The node id leading topic-partition according to this broker's view."""
        del topic  # the same rule for every topic
        preferred = self.configured[partition % len(self.configured)]
        if preferred in self._live:
            return preferred
        nodes = sorted(self._live)
        return nodes[partition % len(nodes)]

    def controller_id(self) -> int:
        return min(self._live)

    # -- subscriptions ---------------------------------------------------------------
    def on_leadership_change(self, callback: LeadershipCallback) -> None:
        """Call back (in the broker's event loop) whenever this broker gains or loses a partition.
        A callback may be a plain function or return a coroutine (then it runs as a task)."""
        self._callbacks.append(callback)

    # -- updates (the broker's membership tasks call these) --------------------------
    def set_own_address(self, address: BrokerAddress) -> None:
        self._live[self.node_id] = address

    def mark_live(self, address: BrokerAddress) -> bool:
        """Returns True when the live set (or an address) changed."""
        changed = self._live.get(address.node_id) != address
        self._live[address.node_id] = address
        return changed

    def mark_dead(self, node_id: int) -> bool:
        if node_id == self.node_id or node_id not in self._live:
            return False
        del self._live[node_id]
        return True

    def notify(self, change: LeadershipChange) -> None:
        for callback in list(self._callbacks):
            try:
                result = callback(change)
            except Exception:
                log.exception("leadership callback failed for %s-%s", change.topic, change.partition)
                continue
            if inspect.isawaitable(result):
                if self._spawn is None:
                    raise TypeError("a coroutine callback needs a ClusterView made with spawn=")
                self._spawn(result)
