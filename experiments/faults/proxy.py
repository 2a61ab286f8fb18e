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

Each toxic applies to one direction or both (upstream = client to server). A proxy in front of a
broker can also tell a member's two Kafka links apart on the same address (`kafka_classes=True`): it
cuts the byte stream into Kafka frames and files each request, and the response with its correlation
id, under `coord` (the group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch) or `data` (everything else), with a toxic per class. Kafka clients keep the
coordinator on a connection of its own, so a `coord` black hole silences heartbeats while fetches flow.

A proxy notes when a
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
from rebalance.kafka_frames import SIZE_BYTES, FrameSplitter, peek_header, peek_response_correlation

CHUNK = 64 * 1024
QUEUE_CHUNKS = 16        # chunks a direction may hold before it stops reading (back-pressure)
_EOF = b""
ALL = "all"              # the traffic class of a proxy that does not look inside the stream
# Kafka API keys that talk to the group coordinator: OffsetCommit, OffsetFetch, FindCoordinator,
# JoinGroup, Heartbeat, LeaveGroup, SyncGroup (classic), ConsumerGroupHeartbeat, ConsumerGroupDescribe
# (KIP-848). A cut `coord` link must stop a kip848 member's heartbeats as it stops a classic member's.
KAFKA_COORD_APIS = frozenset({8, 9, 10, 11, 12, 13, 14, 68, 69})


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
                 seed: int = 0, kafka_classes: bool = False) -> None:
        self.name = name
        self._upstream = upstream if callable(upstream) else (lambda: upstream)
        self._host = host
        self._server: asyncio.base_events.Server | None = None
        self.kafka_classes = kafka_classes
        self._toxics: dict[str, Toxic] = {}    # traffic class -> toxic in force
        self._changed = asyncio.Event()     # set and replaced whenever a toxic changes
        self._connections: set[_Connection] = set()
        self._rng = random.Random(seed)
        self.port = 0
        self._observed: dict[str, int] = {}    # class -> when its current toxic first had an effect
        self.bytes_up = 0
        self.bytes_down = 0
        self.accepted = 0

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def toxic(self) -> Toxic | None:
        """The toxic on the whole stream (or, for a Kafka proxy, on any class)."""
        return self._toxics.get(ALL) or next(iter(self._toxics.values()), None)

    def toxic_for(self, traffic: str) -> Toxic | None:
        return self._toxics.get(traffic) or self._toxics.get(ALL)

    @property
    def observed_ns(self) -> int | None:
        return min(self._observed.values()) if self._observed else None

    def observed_for(self, traffic: str) -> int | None:
        return self._observed.get(traffic)

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

    def set_toxic(self, toxic: Toxic | None, traffic: str = ALL) -> None:
        """Put a toxic on one traffic class (None heals it). Takes effect at once on open connections.
        A reset or down on a class hits the connections that have carried that class."""
        if traffic != ALL and not self.kafka_classes:
            raise ValueError(f"proxy {self.name} does not look inside the stream; it has no {traffic!r} traffic")
        if toxic is None:
            self._toxics.pop(traffic, None)
        else:
            self._toxics[traffic] = toxic
        self._observed.pop(traffic, None)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if toxic is not None and toxic.kind in (LinkFault.RESET, LinkFault.DOWN):
            for connection in list(self._connections):
                if traffic == ALL or traffic in connection.classes:
                    connection.abort(reset=toxic.kind is LinkFault.RESET)
                    self._observe(traffic)

    def _observe(self, traffic: str) -> None:
        self._observed.setdefault(traffic, time.monotonic_ns())

    def _blocked(self, direction: Direction, traffic: str) -> Toxic | None:
        toxic = self.toxic_for(traffic)
        if toxic is not None and toxic.kind is LinkFault.PARTITION and toxic.applies(direction):
            return toxic
        return None

    async def _wait_unblocked(self, direction: Direction, traffic: str) -> None:
        while self._blocked(direction, traffic):
            self._observe(traffic if traffic in self._toxics else ALL)
            await self._changed.wait()

    # ---- connections

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        connection = _Connection(self, client_writer)
        self._connections.add(connection)
        try:
            toxic = self._toxics.get(ALL)
            if toxic is not None and toxic.kind in (LinkFault.RESET, LinkFault.DOWN):
                self._observe(ALL)
                connection.abort(reset=toxic.kind is LinkFault.RESET)
                return
            await self._wait_unblocked(Direction.UPSTREAM, ALL)   # a black hole: the SYN never arrives
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
        queue: asyncio.Queue[tuple[int, str, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            frames = _KafkaFrames(direction, connection) if self.kafka_classes else None
            try:
                while True:
                    data = await reader.read(CHUNK)
                    now = time.monotonic_ns()
                    if not data:
                        await queue.put((now, ALL, _EOF))
                        return
                    if frames is None:
                        await queue.put((now, ALL, data))
                        continue
                    for traffic, frame in frames.feed(data):
                        await queue.put((now, traffic, frame))
            except (ConnectionError, OSError):
                await queue.put((time.monotonic_ns(), ALL, _EOF))

        async def deliver() -> None:
            while True:
                read_ns, traffic, data = await queue.get()
                await self._wait_unblocked(direction, traffic)
                await self._delay(read_ns, direction, traffic)
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
                    await self._write(writer, data, direction, traffic)
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

    async def _delay(self, read_ns: int, direction: Direction, traffic: str) -> None:
        toxic = self.toxic_for(traffic)
        if toxic is None or toxic.kind is not LinkFault.LATENCY or not toxic.applies(direction):
            return
        jitter = self._rng.uniform(-toxic.jitter_ms, toxic.jitter_ms) if toxic.jitter_ms else 0.0
        due_ns = read_ns + int(max(0.0, toxic.latency_ms + jitter) * 1e6)
        wait = (due_ns - time.monotonic_ns()) / 1e9
        self._observe(traffic if traffic in self._toxics else ALL)
        if wait > 0:
            await asyncio.sleep(wait)

    async def _write(self, writer: asyncio.StreamWriter, data: bytes, direction: Direction, traffic: str) -> None:
        toxic = self.toxic_for(traffic)
        if toxic is None or toxic.kind is not LinkFault.BANDWIDTH or not toxic.applies(direction):
            writer.write(data)
            await writer.drain()
            return
        self._observe(traffic if traffic in self._toxics else ALL)
        rate = max(1.0, (toxic.rate_kbps or 1.0) * 1024)          # bytes per second
        piece = max(1, int(rate / 20))                            # about 20 writes a second
        for start in range(0, len(data), piece):
            chunk = data[start:start + piece]
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(len(chunk) / rate)


class _KafkaFrames:
    """Cuts one direction of a Kafka connection into frames and files each under `coord` or `data`:
    requests by API key, responses by the class of their request's correlation id."""

    def __init__(self, direction: Direction, connection: _Connection) -> None:
        self.direction = direction
        self.connection = connection
        self.splitter = FrameSplitter(least=8)

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        frames, garbage = self.splitter.feed(data)
        classified = [(self.classify(frame), frame) for frame in frames]
        if garbage:    # not Kafka framing: pass the rest through unclassified
            classified.append((ALL, garbage))
        return classified

    def classify(self, frame: bytes) -> str:
        pending = self.connection.pending
        body = frame[SIZE_BYTES:]
        if self.direction is Direction.UPSTREAM:
            api_key, _, correlation = peek_header(body)
            traffic = "coord" if api_key in KAFKA_COORD_APIS else "data"
            pending[correlation] = traffic
        else:
            traffic = pending.pop(peek_response_correlation(body), "data")
        self.connection.classes.add(traffic)
        return traffic


class _Connection:
    """One client connection and its upstream, closed together."""

    def __init__(self, proxy: Proxy, client_writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_writer = client_writer
        self.server_writer: asyncio.StreamWriter | None = None
        self.closed = False
        self.half_closed = 0
        self.pending: dict[int, str] = {}     # Kafka correlation id -> class of the request
        self.classes: set[str] = set()        # Kafka traffic classes this connection has carried

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
    """Every proxy of a run, by member and link; the runner's control surface for link faults.

    A link is a list of (proxy, traffic class): a member's ZooKeeper proxies carry its whole `coord`
    link; a Kafka proxy in front of a broker carries both of a classic or kip848 member's links, one class each."""

    def __init__(self, *, seed: int = 0) -> None:
        self._seed = seed
        self.links: dict[tuple[str, str], list[tuple[Proxy, str]]] = {}
        self._proxies: list[Proxy] = []

    async def add(self, member: str, links: str | tuple[str, ...], name: str, upstream: Upstream | tuple[str, int],
                  ) -> Proxy:
        """A proxy for one member's link(s) to one server. Given two links ("coord", "data"), it is a
        Kafka proxy that tells them apart frame by frame."""
        links = (links,) if isinstance(links, str) else tuple(links)
        label = f"{member}/{'+'.join(links)}/{name}"
        proxy = Proxy(label, upstream, seed=zlib.crc32(f"{self._seed}/{label}".encode()),
                      kafka_classes=len(links) > 1)
        await proxy.start()
        self._proxies.append(proxy)
        for link in links:
            self.links.setdefault((member, link), []).append((proxy, link if len(links) > 1 else ALL))
        return proxy

    def _entries(self, member: str, link: str) -> list[tuple[Proxy, str]]:
        names = ("coord", "data") if link == "both" else (link,)
        return [entry for name in names for entry in self.links.get((member, name), [])]

    def proxies(self, member: str, link: str) -> list[Proxy]:
        return list(dict.fromkeys(proxy for proxy, _ in self._entries(member, link)))

    def set_toxic(self, member: str, link: str, toxic: Toxic | None) -> None:
        entries = self._entries(member, link)
        if not entries:
            raise KeyError(f"{member} has no proxied {link} link")
        for proxy, traffic in entries:
            proxy.set_toxic(toxic, traffic)

    def observed_ns(self, member: str, link: str) -> int | None:
        """When a toxic on this link first had an effect (the earliest over its proxies)."""
        times = [proxy.observed_for(traffic) for proxy, traffic in self._entries(member, link)]
        times = [value for value in times if value is not None]
        return min(times) if times else None

    def heal_all(self) -> None:
        for proxy in self._proxies:
            for traffic in list(proxy._toxics):
                proxy.set_toxic(None, traffic)

    async def stop(self) -> None:
        for proxy in self._proxies:
            await proxy.stop()
        self._proxies.clear()
        self.links.clear()
