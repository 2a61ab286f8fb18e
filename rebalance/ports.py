"""Free TCP ports for servers the lab starts (never fixed numbers: several test runs share the machine).

A port the kernel hands out for `bind(("", 0))` comes from the ephemeral range, the same range every
outgoing connection takes its local port from; between choosing such a port and the server binding it,
any client on the machine may take it. So the ports are drawn at random below that range, where only
another server's explicit choice can collide, and each is checked free while all are held.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000            # below this sit the well-known and registered services a machine may run
DRAWS_PER_PORT = 50


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports, free on `host` when asked, outside the ephemeral range where possible."""
    low, _ = ephemeral_range()
    held: list[socket.socket] = []
    try:
        if low - LOWEST >= 1_000:
            for _ in range(count * DRAWS_PER_PORT):
                if len(held) == count:
                    break
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind((host, random.randrange(LOWEST, low)))
                except OSError:
                    sock.close()
                    continue
                held.append(sock)
        while len(held) < count:   # a machine whose ephemeral range leaves no room below it
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
