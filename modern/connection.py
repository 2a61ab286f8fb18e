"""A small blocking connection to one broker: send a kafka-python Request, get its Response.

One request in flight at a time (a lock), like Kafka's own one-request-per-connection
ordering for group APIs. Any failure closes the socket; the next request reconnects.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
from typing import Any

from broker.protocol import response_class

_SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = 100 * 1024 * 1024


class ConnectionFailed(OSError):
    """The broker could not be reached or the exchange broke off."""


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a HOST:PORT address: {text!r}")
    return host, int(port)


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
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
            except (OSError, EOFError, ValueError) as error:
                self._close_locked()
                raise ConnectionFailed(f"{self.address}: {error or type(error).__name__}") from error

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def abort(self) -> None:
        """Close from another thread without waiting: a blocked exchange fails at once."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._lock.acquire(blocking=False):
            try:
                self._close_locked()
            finally:
                self._lock.release()

    def _exchange(self, request: Any, timeout_s: float) -> Any:
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout_s)
        correlation_id = next(self._correlation)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        self._sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = _SIZE.unpack(self._read(4))
        if not 0 < size <= MAX_FRAME_BYTES:
            raise ValueError(f"broker sent a frame of {size} bytes")
        response = response_class(request.API_KEY, request.API_VERSION).decode(self._read(size), header=True)
        if response.header.correlation_id != correlation_id:
            raise ValueError("response out of order")
        return response

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
