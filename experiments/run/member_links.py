"""How each member of a run reaches its servers: directly, or through fault proxies of its own.

Members that some link fault targets get one proxy per server per link, the rest connect directly.
Which servers a member's links lead to is the backend profile's answer:
- coordination in ZooKeeper (legacy): `coord` = one proxy per ZooKeeper node, listed in the member's
  own connect string; `data` = one proxy per broker, which the brokers advertise to that member
  (the advertise map, keyed by its client id: the member name);
- a coordinator inside the brokers (classic, kip848): one Kafka proxy per broker carries both links, told apart
  frame by frame (the group APIs are `coord`, the rest `data`); the brokers advertise these proxies
  to the member (Metadata and FindCoordinator alike) and its bootstrap list names them.
Upstreams are looked up per connection, so a restarted server on a new address is still reached.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from experiments.faults.proxy import ProxyHub
from rebalance.backends import BackendProfile, Server

Upstream = Callable[[int], tuple[str, int]]   # server index -> its current (host, port)


class MemberLinks:
    def __init__(self, profile: BackendProfile, proxies: ProxyHub, advertise_map: Path) -> None:
        self.profile = profile
        self.proxies = proxies
        self.advertise_map = advertise_map
        self.proxied: dict[str, dict[str, list[str]]] = {}   # member -> link -> its proxies' addresses

    async def add_proxies(self, members: Iterable[str], *, zk_nodes: int, brokers: int, zk_upstream: Upstream,
                          broker_upstream: Upstream) -> None:
        for member in members:
            links: dict[str, list[str]] = {"coord": [], "data": []}
            if not self.profile.coordinator_in_brokers:
                for index in range(zk_nodes):
                    proxy = await self.proxies.add(member, "coord", f"zk-{index}",
                                                   functools.partial(zk_upstream, index))
                    links["coord"].append(proxy.address)
            carried = ("coord", "data") if self.profile.coordinator_in_brokers else "data"
            for index in range(brokers):
                proxy = await self.proxies.add(member, carried, f"broker-{index}",
                                               functools.partial(broker_upstream, index))
                for link in (carried if isinstance(carried, tuple) else (carried,)):
                    links[link].append(proxy.address)
            self.proxied[member] = links

    def write_advertise_map(self) -> None:
        """Broker index -> address each proxied member is told; written atomically, as brokers re-read it."""
        mapping = {member: {str(index): address for index, address in enumerate(links["data"])}
                   for member, links in self.proxied.items()}
        temporary = self.advertise_map.with_suffix(".tmp")
        temporary.write_text(json.dumps(mapping, indent=1))
        temporary.replace(self.advertise_map)

    def address(self, member: str, *, zk_connect: str | None, bootstrap: str | None) -> str | None:
        """The member's ZooKeeper connect string or bootstrap list (as its profile connects): its proxies', if any."""
        proxied = self.proxied.get(member)
        if self.profile.connects_to is Server.ZOOKEEPER:
            if proxied:
                chroot = zk_connect[zk_connect.index("/"):] if "/" in zk_connect else ""
                return ",".join(proxied["coord"]) + chroot
            return zk_connect
        return ",".join(proxied["data"]) if proxied else bootstrap
