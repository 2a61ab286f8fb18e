"""Free TCP ports on 127.0.0.1 (never fixed numbers: several test runs share the machine)."""

from __future__ import annotations

import socket

from rebalance.ports import free_ports

from .errors import PortInUse


def check_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise PortInUse(f"port {port} is already in use: pick another with --client-port") from None


def client_ports(count: int, first: int | None) -> list[int]:
    """`count` client ports: first, first+1, ... when a first port is asked for (each checked free), else any free."""
    if first is None:
        return free_ports(count)
    ports = [first + i for i in range(count)]
    for port in ports:
        check_free(port)
    return ports
