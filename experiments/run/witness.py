"""The servers as witnesses: their own counters, read by the runner and recorded as `server_counters` events.

ZooKeeper (runs whose members coordinate in it): `mntr` on every node, summed over the nodes that
answer: packets received and sent, watches, outstanding requests, znodes. `served` is the packets
received minus the sampler's own: each `mntr` is itself one packet received by the node it asks
(and two sent), measured on ZooKeeper 3.8, so the sampler counts its calls per node and subtracts
them. A node that restarted begins again from zero; the sampler notices the drop and starts its
own count for that node again. Other four-letter words (a fault's `srvr` checks) are not subtracted.

Brokers with a coordinator: each broker's request counts per API (broker.counters), summed;
`served` is the group APIs without Heartbeat and OffsetCommit (and, for KIP-848 groups, only the
heartbeats that were not steady: broker.counters). Reading them is not a request, so there is
nothing to subtract.

A node that does not answer within `timeout_s` (killed, paused, partitioned) is left out of the
sum; `nodes` says how many answered, so readers compare only samples with the same count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.counters import group_requests, read_counters
from zkensemble import fourlw

ZK_COUNTERS = ("zk_packets_received", "zk_packets_sent", "zk_watch_count", "zk_outstanding_requests",
               "zk_znode_count")
MNTR_PACKETS_RECEIVED = 1     # what one `mntr` adds to zk_packets_received
SAMPLE_TIMEOUT_S = 0.5        # a paused node must not hold the timeline up for long

Address = tuple[str, int]


@dataclass(frozen=True, kw_only=True)
class ServerSample:
    server: str                  # "zookeeper" | "brokers"
    served: int                  # requests the servers saw, the sampler's own subtracted (cumulative)
    sampler_packets: int         # what the sampler's own reads added to the raw counter (cumulative)
    nodes: int                   # nodes that answered
    counters: dict[str, int]     # the raw counters, summed over the nodes that answered

    def fields(self) -> dict[str, object]:
        return {"server": self.server, "served": self.served, "sampler_packets": self.sampler_packets,
                "nodes": self.nodes, "counters": self.counters}


class ZooKeeperWitness:
    def __init__(self, addresses: Callable[[], Sequence[Address]], *, timeout_s: float = SAMPLE_TIMEOUT_S) -> None:
        self.addresses = addresses
        self.timeout_s = timeout_s
        self._own: dict[Address, int] = {}       # mntr calls answered since the node's counter began
        self._last: dict[Address, int] = {}      # its last raw packets-received reading
        self._lock = threading.Lock()            # samples are taken from worker threads, maybe two at once

    def sample(self) -> ServerSample:
        with self._lock:
            return self._sample()

    def _sample(self) -> ServerSample:
        totals = dict.fromkeys(ZK_COUNTERS, 0)
        own_total, answered = 0, 0
        for address in self.addresses():
            try:
                counters = fourlw.mntr(*address, timeout_s=self.timeout_s)
            except OSError:
                continue
            received = counters.get("zk_packets_received")
            if not isinstance(received, int):
                continue                          # not serving: an empty answer
            if received < self._last.get(address, 0):
                self._own[address] = 0            # restarted: its counters began again
            self._last[address] = received
            self._own[address] = self._own.get(address, 0) + MNTR_PACKETS_RECEIVED
            own_total += self._own[address]
            answered += 1
            for name in ZK_COUNTERS:
                value = counters.get(name)
                totals[name] += value if isinstance(value, int) else 0
        return ServerSample(server="zookeeper", served=totals["zk_packets_received"] - own_total,
                            sampler_packets=own_total, nodes=answered, counters=totals)


class BrokerWitness:
    def __init__(self, addresses: Callable[[], Sequence[Address]], *, timeout_s: float = SAMPLE_TIMEOUT_S) -> None:
        self.addresses = addresses
        self.timeout_s = timeout_s

    def sample(self) -> ServerSample:
        totals: dict[str, int] = {}
        answered = 0
        for address in self.addresses():
            try:
                by_api = read_counters(*address, timeout_s=self.timeout_s)
            except (OSError, ValueError):
                continue
            answered += 1
            for name, count in by_api.items():
                totals[name] = totals.get(name, 0) + int(count)
        return ServerSample(server="brokers", served=group_requests(totals), sampler_packets=0, nodes=answered,
                            counters=dict(sorted(totals.items())))
