"""ZooKeeper's four-letter words (`srvr`, `mntr`, `ruok`) over a plain TCP socket.

They are answered by the server itself, independent of any client library, which makes them
the server-side witness for experiments: `srvr` tells a node's mode (leader, follower,
standalone) and `mntr` its counters (`zk_packets_received`, `zk_watch_count`, ...).
The servers must run with `4lw.commands.whitelist=*`, which every provider here sets.
"""

from __future__ import annotations

import socket
from enum import Enum


class Mode(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    STANDALONE = "standalone"
    OBSERVER = "observer"
    NOT_SERVING = "not serving"  # the process answers, but has no quorum
    DOWN = "down"                # nothing accepts connections (killed, stopped)
    UNRESPONSIVE = "unresponsive"  # accepts connections but says nothing (paused)

    @property
    def serving(self) -> bool:
        return self in (Mode.LEADER, Mode.FOLLOWER, Mode.STANDALONE, Mode.OBSERVER)


def ask(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send one four-letter word and return the whole answer (the server closes the socket)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def mode(host: str, port: int, timeout_s: float = 2.0) -> Mode:
    try:
        answer = ask(host, port, "srvr", timeout_s)
    except (ConnectionRefusedError, ConnectionResetError):
        return Mode.DOWN
    except OSError:  # timeouts included: a paused process keeps its listening socket
        return Mode.UNRESPONSIVE
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return Mode(line.split(":", 1)[1].strip())
    # "This ZooKeeper instance is not currently serving requests", or an empty answer
    # while the server is shutting its client connections.
    return Mode.NOT_SERVING


def mntr(host: str, port: int, timeout_s: float = 2.0) -> dict[str, int | float | str]:
    """The server's counters, numbers parsed where they are numbers; empty when not serving."""
    counters: dict[str, int | float | str] = {}
    for line in ask(host, port, "mntr", timeout_s).splitlines():
        key, sep, value = line.partition("\t")
        if not sep:
            continue
        counters[key] = _number(value.strip())
    return counters


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
