"""Legacy mode: the broker registers itself in ZooKeeper the way Kafka 0.8 did.

    /brokers/ids/<id>        ephemeral  {"version":1,"host":..,"port":..,"jmx_port":-1,"timestamp":"<ms>"}
    /brokers/topics/<topic>  persistent {"version":1,"partitions":{"0":[replica ids],...}}

The 0.8 consumer finds brokers and partition counts there. kazoo does not re-create
ephemeral nodes after a session expires, so the state listener only flags it and a
kazoo worker re-registers.
"""

from __future__ import annotations

import json
import logging
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 15.0


def broker_node_json(host: str, port: int, timestamp_ms: int) -> bytes:
    """The 0.8 broker registration, fields in 0.8's order (ZkUtils.registerBrokerInZk)."""
    return json.dumps({"version": 1, "host": host, "port": port, "jmx_port": -1,
                       "timestamp": str(timestamp_ms)}, separators=(",", ":")).encode()


def topic_node_json(replicas: dict[int, list[int]]) -> bytes:
    """The 0.8 topic node: partition number (as a string) -> replica broker ids."""
    partitions = {str(p): ids for p, ids in sorted(replicas.items())}
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":")).encode()


class ZkRegistration:
    def __init__(self, connect: str, node_id: int, host: str, port: int) -> None:
        self.node_id, self.host, self.port = node_id, host, port
        self.client = KazooClient(hosts=connect, timeout=6.0)
        self._expired = False

    @property
    def path(self) -> str:
        return f"/brokers/ids/{self.node_id}"

    def start(self) -> None:
        self.client.add_listener(self._on_state)
        self.client.start(timeout=CONNECT_TIMEOUT_S)
        self.client.ensure_path("/")  # a chroot is not created by connecting
        self._register()

    def register_topic(self, topic: str, replicas: dict[int, list[int]]) -> None:
        try:
            self.client.create(f"/brokers/topics/{topic}", topic_node_json(replicas), makepath=True)
        except NodeExistsError:
            pass  # another broker wrote it first; the assignment is the same

    def stop(self) -> None:
        self.client.stop()
        self.client.close()

    def _register(self) -> None:
        data = broker_node_json(self.host, self.port, int(time.time() * 1000))
        try:
            self.client.create(self.path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            # our previous session's node, not yet expired: replace it with ours
            self.client.delete(self.path)
            self.client.create(self.path, data, ephemeral=True, makepath=True)

    def _on_state(self, state: str) -> None:  # a kazoo listener: never block here
        if state == KazooState.LOST:
            self._expired = True
        elif state == KazooState.CONNECTED and self._expired:
            self._expired = False
            self.client.handler.spawn(self._reregister)

    def _reregister(self) -> None:
        try:
            self._register()
            log.info("broker %s re-registered in ZooKeeper after session expiry", self.node_id)
        except Exception:
            log.exception("broker %s could not re-register in ZooKeeper", self.node_id)
