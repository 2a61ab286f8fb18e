"""A small blocking connection to one broker: send a kafka-python Request, get its Response.

One request in flight at a time (a lock), like Kafka's own one-request-per-connection
ordering for group APIs. Any failure closes the socket; the next request reconnects, and so does the next
request after an `abort`, even when the exchange that abort meant to break had already finished.
"""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from rebalance.kafka_frames import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE_BYTES,
    FrameError,
    decode_response,
    encode_request,
    frame_size,
)


class ConnectionFailed(OSError):
    """The broker could not be reached or the exchange broke off."""


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a HOST:PORT address: {text!r}")
    return host, int(port)


def shut_down(sock: socket.socket | None) -> None:
    """End both directions of a socket another thread may be waiting on; its wait fails at once."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._aborted: socket.socket | None = None   # shut down by abort while another thread held the lock
        self._lock = threading.Lock()
        self._correlation = itertools.count(1)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send a versioned Request (e.g. `HeartbeatRequest[4](...)`) and return the decoded Response."""
        with self._lock:
            try:
                return self._exchange(request, self.timeout_s if timeout_s is None else timeout_s)
            except (OSError, EOFError, ValueError, FrameError) as error:
                self._close_locked()
                raise ConnectionFailed(f"{self.address}: {error or type(error).__name__}") from error

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def abort(self) -> None:
        """Close from another thread without waiting: a blocked exchange fails at once. If the exchange
        under way finishes first, the socket it leaves is shut down all the same, and the next request
        opens a new one (a LeaveGroup sent at close would otherwise meet a broken pipe, and the group would
        wait out the member's session)."""
        sock = self._sock
        self._aborted = sock
        shut_down(sock)
        if self._lock.acquire(blocking=False):
            try:
                self._close_locked()
            finally:
                self._lock.release()

    def _exchange(self, request: Any, timeout_s: float) -> Any:
        if self._sock is not None and self._sock is self._aborted:
            self._close_locked()
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout_s)
        correlation_id = next(self._correlation)
        self._sock.sendall(encode_request(request, correlation_id, self.client_id))
        size = frame_size(self._read(SIZE_BYTES), DEFAULT_MAX_FRAME_BYTES, least=1)
        return decode_response(request.API_KEY, request.API_VERSION, self._read(size), correlation_id)

    def _read(self, count: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self._sock.recv(count - len(chunks))
            if not chunk:
                raise EOFError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def _close_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
