"""One of the fetcher's connections to a broker (`modern.client.fetcher`): the socket, the one request in
flight on it and the bytes of its answer so far. It sends blocking and reads without blocking, so that one
poll waits on every broker's answer at once and a silent broker holds up no other.
"""

from __future__ import annotations

import itertools
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from modern.client.connection import ConnectionFailed, shut_down
from rebalance.kafka_frames import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE_BYTES,
    FrameError,
    decode_response,
    encode_request,
    frame_size,
)

CONNECT_TIMEOUT_S = 10.0

_correlation = itertools.count(1)


@dataclass
class FetchChannel:
    """One connection and the one request it has in flight, read as its bytes arrive."""

    node: int
    address: tuple[str, int]
    client_id: str
    sock: socket.socket | None = None
    request: Any = None
    correlation_id: int = 0
    sent_at: float = 0.0
    asked: dict = field(default_factory=dict)    # what a Fetch asked: partition -> fetch offset
    _buffer: bytearray = field(default_factory=bytearray)

    @property
    def busy(self) -> bool:
        return self.request is not None

    def send(self, request: Any, asked: dict | None = None) -> None:
        try:
            if self.sock is None:
                self.sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.correlation_id = next(_correlation)
            self.sock.settimeout(CONNECT_TIMEOUT_S)
            self.sock.sendall(encode_request(request, self.correlation_id, self.client_id))
            self.sock.setblocking(False)
        except OSError as error:
            self.close()
            raise ConnectionFailed(f"{self.address}: {error}") from error
        self.request, self.sent_at, self.asked = request, time.monotonic(), asked or {}
        self._buffer.clear()

    def receive(self) -> Any:
        """Read what has arrived; the response once it is whole, else None."""
        try:
            chunk = self.sock.recv(64 * 1024)
            if not chunk:
                raise EOFError("connection closed by the broker")
            self._buffer += chunk
            if len(self._buffer) < SIZE_BYTES:
                return None
            size = frame_size(bytes(self._buffer[:SIZE_BYTES]), DEFAULT_MAX_FRAME_BYTES, least=1)
            if len(self._buffer) < SIZE_BYTES + size:
                return None
            request = self.request
            response = decode_response(request.API_KEY, request.API_VERSION,
                                       bytes(self._buffer[SIZE_BYTES:SIZE_BYTES + size]), self.correlation_id)
        except BlockingIOError:
            return None
        except (OSError, EOFError, ValueError, FrameError) as error:
            self.close()
            raise ConnectionFailed(f"{self.address}: {error or type(error).__name__}") from error
        self.request = None
        self._buffer.clear()
        return response

    def close(self) -> None:
        self.request = None
        self._buffer.clear()
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def abort(self) -> None:
        """From another thread: a wait on this socket ends at once."""
        shut_down(self.sock)

