"""The cluster as one broker sees it: which brokers are alive and who leads which partition.

Leadership is a pure function of the configured brokers, the live set and the brokers held
back. Partition p of every topic prefers the (p mod N)-th of the N configured brokers in
ascending id order (its "preferred leader", as in Kafka); while that broker is dead or held
back, the (p mod n)-th of the n live brokers not held back leads it. So a death moves only
the dead broker's partitions. Every broker computes this from its own view, so views that
agree give the same answer without any election; while views differ (just after a death)
two brokers may both claim a partition, which is why a leader must also hold the
partition's lock before it writes (see broker.server).

Fail-back. In Kafka a broker that comes back leads nothing until the controller's
preferred-leader election (every `leader.imbalance.check.interval.seconds`, 300 s). Here a
broker that peers had declared dead is *held back* by them for `fail_back_delay_s` after
they see it again; the broker itself learns that it is held back from its peers' metadata
(they list it as live, yet give its preferred partitions to someone else), and starts out
held back until a peer has answered. With a delay of 0 a returning broker leads again at once.
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
                 spawn: Callable[[Any], Any] | None = None, *, fail_back_delay_s: float = 0.0) -> None:
        self.node_id = node_id
        self.configured = sorted({node_id, *configured})
        self.fail_back_delay_s = fail_back_delay_s
        self._live: dict[int, BrokerAddress] = {node_id: own_address}
        self._declared_dead: set[int] = set()
        self._held_until: dict[int, float] = {}     # returned peers -> when they lead their partitions again
        self._self_held = fail_back_delay_s > 0 and len(self.configured) > 1
        self._callbacks: list[LeadershipCallback] = []
        self._spawn = spawn  # runs a callback's coroutine as a task whose errors are reported

    # -- queries ---------------------------------------------------------------------
    def live_brokers(self) -> list[BrokerAddress]:
        """Live brokers (this one included) with their default advertised addresses, by id."""
        return [self._live[node] for node in sorted(self._live)]

    def address_of(self, node_id: int) -> BrokerAddress | None:
        return self._live.get(node_id)

    def preferred_leader(self, partition: int) -> int:
        return self.configured[partition % len(self.configured)]

    def leader_for(self, topic: str, partition: int) -> int:
        """The node id leading topic-partition according to this broker's view."""
        del topic  # the same rule for every topic
        preferred = self.preferred_leader(partition)
        if preferred in self._live and not self.is_held(preferred):
            return preferred
        nodes = sorted(n for n in self._live if not self.is_held(n)) or sorted(self._live)
        return nodes[partition % len(nodes)]

    def is_held(self, node_id: int) -> bool:
        """Held back: live, but not (yet) leading its preferred partitions again."""
        return self._self_held if node_id == self.node_id else node_id in self._held_until

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

    def mark_live(self, address: BrokerAddress, now_s: float = 0.0) -> bool:
        """Returns True when the live set (or an address) changed. A broker this view had declared
        dead is held back for the fail-back delay from `now_s` on."""
        changed = self._live.get(address.node_id) != address
        self._live[address.node_id] = address
        if address.node_id in self._declared_dead:
            self._declared_dead.discard(address.node_id)
            if self.fail_back_delay_s > 0:
                self._held_until[address.node_id] = now_s + self.fail_back_delay_s
        return changed

    def mark_dead(self, node_id: int) -> bool:
        if node_id == self.node_id or node_id not in self._live:
            return False
        del self._live[node_id]
        self._declared_dead.add(node_id)
        self._held_until.pop(node_id, None)
        return True

    def release_held(self, now_s: float) -> bool:
        """End the hold of every peer whose fail-back delay has passed; True if any ended."""
        due = [node for node, until in self._held_until.items() if until <= now_s]
        for node in due:
            del self._held_until[node]
        return bool(due)

    def hold_self(self, held: bool) -> bool:
        """Set from what peers report (see the module doc); True if it changed."""
        changed = held != self._self_held
        self._self_held = held
        return changed

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
