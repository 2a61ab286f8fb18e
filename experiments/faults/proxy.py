"""An asyncio TCP proxy that a fault can be put on at run time, with toxiproxy's semantics.

One `Proxy` listens on 127.0.0.1 (port 0: the kernel picks) and forwards every connection to its
upstream. A `Toxic` changes what passes:

- partition: a black hole. Connections stay open, nothing passes; bytes (and a close) are held and
  delivered after the heal, as TCP retransmission would. New connections are accepted by the kernel,
  but the upstream is not contacted until the heal.
- reset: every open connection is reset (RST), and new ones are reset at once, while it lasts.
- latency: every chunk is delivered latency_ms +- jitter_ms after it was read, in order.
- bandwidth: throughput capped at rate_kbps (kilobytes per second).
- down: the proxy is disabled: open connections are closed, new ones closed at once.

Each toxic applies to one direction or both (upstream = client to server). A proxy notes when a
toxic first had an effect (held a byte, reset a connection, delayed a chunk): the runner puts that
time into the fault's events, so a fault is confirmed by what was observed, not only requested.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from experiments.scenario import Direction, LinkFault

CHUNK = 64 * 1024
QUEUE_CHUNKS = 16        # bytes a direction may hold before it stops reading (back-pressure)
_EOF = b""


@dataclass(frozen=True, kw_only=True)
class Toxic:
    kind: LinkFault
    direction: Direction = Direction.BOTH
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rate_kbps: float | None = None

    def applies(self, direction: Direction) -> bool:
        return self.direction is Direction.BOTH or self.direction is direction


Upstream = Callable[[], tuple[str, int]]


class Proxy:
    """One listening address in front of one upstream address, steered through `set_toxic`."""

    def __init__(self, name: str, upstream: Upstream | tuple[str, int], *, host: str = "127.0.0.1",
                 seed: int = 0) -> None:
        self.name = name
        self._upstream = upstream if callable(upstream) else (lambda: upstream)
        self._host = host
        self._server: asyncio.base_events.Server | None = None
        self._toxic: Toxic | None = None
        self._changed = asyncio.Event()     # set and replaced whenever the toxic changes
        self._connections: set[_Connection] = set()
        self._rng = random.Random(seed)
        self.port = 0
        self.observed_ns: int | None = None     # when the current toxic first had an effect
        self.bytes_up = 0
        self.bytes_down = 0
        self.accepted = 0

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def toxic(self) -> Toxic | None:
        return self._toxic

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, self._host, 0, limit=CHUNK)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in list(self._connections):
            connection.abort(reset=False)
        await asyncio.sleep(0)

    def set_toxic(self, toxic: Toxic | None) -> None:
        """Put a toxic on (None heals). Takes effect at once on open connections too."""
        self._toxic = toxic
        self.observed_ns = None
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if toxic is not None and toxic.kind in (LinkFault.RESET, LinkFault.DOWN):
            for connection in list(self._connections):
                connection.abort(reset=toxic.kind is LinkFault.RESET)
                self._observe()

    def _observe(self) -> None:
        if self.observed_ns is None:
            self.observed_ns = time.monotonic_ns()

    def _blocked(self, direction: Direction) -> bool:
        toxic = self._toxic
        return toxic is not None and toxic.kind is LinkFault.PARTITION and toxic.applies(direction)

    async def _wait_unblocked(self, direction: Direction) -> None:
        while self._blocked(direction):
            self._observe()
            await self._changed.wait()

    # ---- connections

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        connection = _Connection(self, client_writer)
        self._connections.add(connection)
        try:
            toxic = self._toxic
            if toxic is not None and toxic.kind in (LinkFault.RESET, LinkFault.DOWN):
                self._observe()
                connection.abort(reset=toxic.kind is LinkFault.RESET)
                return
            await self._wait_unblocked(Direction.UPSTREAM)   # a black hole: the SYN never arrives
            if connection.closed:
                return
            host, port = self._upstream()
            try:
                server_reader, server_writer = await asyncio.open_connection(host, port, limit=CHUNK)
            except OSError:
                connection.abort(reset=True)                 # what a client sees from a dead server
                return
            connection.server_writer = server_writer
            if connection.closed:
                connection.abort(reset=False)
                return
            await asyncio.gather(
                self._pump(client_reader, server_writer, Direction.UPSTREAM, connection),
                self._pump(server_reader, client_writer, Direction.DOWNSTREAM, connection),
            )
        finally:
            connection.abort(reset=False)
            self._connections.discard(connection)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction,
                    connection: _Connection) -> None:
        """Read and deliver in two tasks joined by a bounded queue: latency is pipelined, order kept."""
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            try:
                while True:
                    data = await reader.read(CHUNK)
                    await queue.put((time.monotonic_ns(), data))
                    if not data:
                        return
            except (ConnectionError, OSError):
                await queue.put((time.monotonic_ns(), _EOF))

        async def deliver() -> None:
            while True:
                read_ns, data = await queue.get()
                await self._wait_unblocked(direction)
                await self._delay(read_ns, direction)
                if connection.closed:
                    return
                if not data:
                    with contextlib.suppress(OSError, RuntimeError):
                        if writer.can_write_eof():
                            writer.write_eof()
                    connection.half_closed += 1
                    if connection.half_closed >= 2:
                        connection.abort(reset=False)
                    return
                try:
                    await self._write(writer, data, direction)
                except (ConnectionError, OSError):
                    connection.abort(reset=False)
                    return
                if direction is Direction.UPSTREAM:
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)

        reader_task = asyncio.ensure_future(read())
        try:
            await deliver()
        finally:
            reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader_task

    async def _delay(self, read_ns: int, direction: Direction) -> None:
        toxic = self._toxic
        if toxic is None or toxic.kind is not LinkFault.LATENCY or not toxic.applies(direction):
            return
        jitter = self._rng.uniform(-toxic.jitter_ms, toxic.jitter_ms) if toxic.jitter_ms else 0.0
        due_ns = read_ns + int(max(0.0, toxic.latency_ms + jitter) * 1e6)
        wait = (due_ns - time.monotonic_ns()) / 1e9
        self._observe()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _write(self, writer: asyncio.StreamWriter, data: bytes, direction: Direction) -> None:
        toxic = self._toxic
        if toxic is None or toxic.kind is not LinkFault.BANDWIDTH or not toxic.applies(direction):
            writer.write(data)
            await writer.drain()
            return
        self._observe()
        rate = max(1.0, (toxic.rate_kbps or 1.0) * 1024)          # bytes per second
        piece = max(1, int(rate / 20))                            # about 20 writes a second
        for start in range(0, len(data), piece):
            chunk = data[start:start + piece]
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(len(chunk) / rate)


class _Connection:
    """One client connection and its upstream, closed together."""

    def __init__(self, proxy: Proxy, client_writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_writer = client_writer
        self.server_writer: asyncio.StreamWriter | None = None
        self.closed = False
        self.half_closed = 0

    def abort(self, *, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in (self.client_writer, self.server_writer):
            if writer is None:
                continue
            if reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            else:
                writer.close()


class ProxyHub:
    """Every proxy of a run, by member and link; the runner's control surface for link faults."""

    def __init__(self, *, seed: int = 0) -> None:
        self._seed = seed
        self.links: dict[tuple[str, str], list[Proxy]] = {}

    async def add(self, member: str, link: str, name: str, upstream: Upstream | tuple[str, int]) -> Proxy:
        label = f"{member}/{link}/{name}"
        proxy = Proxy(label, upstream, seed=zlib.crc32(f"{self._seed}/{label}".encode()))
        await proxy.start()
        self.links.setdefault((member, link), []).append(proxy)
        return proxy

    def proxies(self, member: str, link: str) -> list[Proxy]:
        links = ("coord", "data") if link == "both" else (link,)
        return [proxy for name in links for proxy in self.links.get((member, name), [])]

    def set_toxic(self, member: str, link: str, toxic: Toxic | None) -> None:
        proxies = self.proxies(member, link)
        if not proxies:
            raise KeyError(f"{member} has no proxied {link} link")
        for proxy in proxies:
            proxy.set_toxic(toxic)

    def observed_ns(self, member: str, link: str) -> int | None:
        """When a toxic on this link first had an effect (the earliest over its proxies)."""
        times = [proxy.observed_ns for proxy in self.proxies(member, link) if proxy.observed_ns is not None]
        return min(times) if times else None

    def heal_all(self) -> None:
        for proxies in self.links.values():
            for proxy in proxies:
                if proxy.toxic is not None:
                    proxy.set_toxic(None)

    async def stop(self) -> None:
        for proxies in self.links.values():
            for proxy in proxies:
                await proxy.stop()
        self.links.clear()
