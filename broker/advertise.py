"""Which address to give a client for each broker.

By default every broker is advertised at one address (`--advertise`, else where it
listens). An advertise map overrides that per member, so that a fault proxy placed
between one member and one broker really carries that member's traffic:

    {"<member name>": {"<broker_id>": "host:port", ...}, ...}

A member's client id is its name behind a random tag (`rebalance.member.pod_client_id`); the map
is keyed by the name.

The file is re-read whenever its modification time or size changes; a file that does not
parse (e.g. caught mid-write) keeps the previous map in force. Write it atomically.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from rebalance.member import member_name_of

log = logging.getLogger(__name__)


def parse_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a HOST:PORT address: {text!r}")
    return host, int(port)


class AdvertiseMap:
    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path is not None else None
        self._stamp: tuple[int, int] | None = None
        self._map: dict[str, dict[int, tuple[str, int]]] = {}

    def lookup(self, client_id: str | None, node_id: int) -> tuple[str, int] | None:
        """The address this client should use for that broker, or None for the default."""
        if self.path is None or client_id is None:
            return None
        self._refresh()
        return self._map.get(member_name_of(client_id), {}).get(node_id)

    def _refresh(self) -> None:
        try:
            status = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._map = None, {}
            return
        stamp = (status.st_mtime_ns, status.st_size)
        if stamp == self._stamp:
            return
        try:
            raw = json.loads(self.path.read_text())
            parsed = {
                str(client): {int(node): parse_host_port(address) for node, address in nodes.items()}
                for client, nodes in raw.items()
            }
        except (ValueError, AttributeError, TypeError, OSError) as error:
            log.warning("advertise map %s unreadable (%s); keeping the previous one", self.path, error)
            return
        self._stamp, self._map = stamp, parsed
