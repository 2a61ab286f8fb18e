"""TCP forwarders between ZooKeeper peers, so the ensemble itself can be partitioned.

Each directed peer link (node a reaching node b's quorum or election port) goes through its
own `Link`, a listening socket on 127.0.0.1 that forwards to b. Cutting a link is a black
hole, as in toxiproxy's `timeout=0`: connections stay open and nothing passes, so the
servers notice only through their own timeouts, the way they would notice a real network
partition. Healing a link resets every connection that lived through the cut (their byte
streams are no longer trustworthy) and lets new ones pass; ZooKeeper reconnects by itself.

A link accepts a connection before it knows whether its target listens, which a direct dial
would not: there the caller gets "connection refused" at once. ZooKeeper's learner retries a
refused connection to a new leader, but takes one that opens and then closes as a failed sync and
starts another election round, which the leader then waits out for initLimit ticks (10 s here).
So a link whose target is not listening yet keeps retrying it for up to `DIAL_PATIENCE_S` (a
leader binds its learner port milliseconds after it is elected) before it closes the caller's
connection.

ZooKeeper's election channel needs one rewrite to stay inside the links: a server that dials
a peer with a higher id announces its own election address in its first message, and that
peer dials back to the announced address instead of its configured one. An election link
therefore replaces the announced address with the port of the link in the opposite direction
(`advertise`), so the dial-back goes through a link too and a cut holds both ways.

All links of one ensemble share one asyncio loop in one daemon thread. Errors other than
ordinary connection failures are kept and raised by `LinkProxies.close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from dataclasses import dataclass, field

_CHUNK = 65536
DIAL_PATIENCE_S = 2.0
_DIAL_RETRY_S = 0.02
# First message of a ZooKeeper election connection: protocol version, sender id, address length.
_ELECTION_HEADER = struct.Struct(">qqi")
_ELECTION_VERSIONS = (-65536, -65535)


@dataclass(eq=False)
class Link:
    """One directed link: listen on `port`, forward to `target_port` (both on 127.0.0.1)."""

    name: str
    target_port: int
    port: int = 0
    advertise: str | None = None  # election links: the "host:port" to announce instead
    cut: bool = False
    _server: asyncio.Server | None = None
    _connections: set[tuple[asyncio.StreamWriter, ...]] = field(default_factory=set)
    _healed: asyncio.Event = field(default_factory=asyncio.Event)


class LinkProxies:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="zk-link-proxies", daemon=True)
        self._thread.start()
        self._links: dict[str, Link] = {}
        self._errors: list[BaseException] = []
        self._tasks: set[asyncio.Task] = set()

    # -- called from any thread ------------------------------------------------------------

    def add(self, name: str, target_port: int) -> int:
        """Start forwarding a new link; returns the port peers should dial instead of the target."""
        link = self._call(self._open(name, target_port))
        self._links[name] = link
        return link.port

    def advertise(self, name: str, address: str) -> None:
        """Make election link `name` announce `address` in place of the dialling server's own."""
        self._links[name].advertise = address

    def cut(self, name: str) -> None:
        self._call(self._cut(self._links[name]))

    def heal(self, name: str) -> None:
        self._call(self._heal(self._links[name]))

    def is_cut(self, name: str) -> bool:
        return self._links[name].cut

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        if self._errors:
            raise RuntimeError(f"link proxy failed: {self._errors[0]!r}") from self._errors[0]

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    # -- on the loop -----------------------------------------------------------------------

    async def _open(self, name: str, target_port: int) -> Link:
        link = Link(name=name, target_port=target_port)
        link._healed.set()
        link._server = await asyncio.start_server(
            lambda r, w: self._serve(link, r, w), host="127.0.0.1", port=0
        )
        link.port = link._server.sockets[0].getsockname()[1]
        return link

    async def _cut(self, link: Link) -> None:
        link.cut = True
        link._healed.clear()

    async def _heal(self, link: Link) -> None:
        for writers in list(link._connections):
            for writer in writers:
                writer.transport.abort()
        link._connections.clear()
        link.cut = False
        link._healed.set()

    async def _close_all(self) -> None:
        for link in self._links.values():
            link._server.close()
            await self._heal(link)
        # Every connection was just reset, so each task ends by itself; wait for them to.
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)

    async def _serve(self, link: Link, client_reader, client_writer) -> None:
        entry: tuple[asyncio.StreamWriter, ...] = (client_writer,)
        link._connections.add(entry)
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            # A connection opened during a cut is held open and never forwarded; the heal resets it.
            await link._healed.wait()
            if entry not in link._connections:
                return
            upstream_reader, upstream_writer = await _dial(link.target_port)
            if entry not in link._connections:  # reset by a heal or close while dialling
                upstream_writer.transport.abort()
                return
            link._connections.discard(entry)
            entry = (client_writer, upstream_writer)
            link._connections.add(entry)
            if link.advertise is not None:
                upstream_writer.write(await _rewritten_election_header(client_reader, link.advertise))
            await asyncio.gather(
                self._pump(link, entry, client_reader, upstream_writer),
                self._pump(link, entry, upstream_reader, client_writer),
            )
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except Exception as error:  # kept, and raised on close: nothing vanishes in the loop thread
            self._errors.append(error)
        finally:
            self._tasks.discard(task)
            link._connections.discard(entry)
            for writer in entry:
                writer.transport.abort()

    async def _pump(self, link: Link, entry, reader, writer) -> None:
        while data := await reader.read(_CHUNK):
            if link.cut:
                await link._healed.wait()
            if entry not in link._connections:  # reset by a heal: drop what was held back
                return
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()


async def _dial(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to 127.0.0.1:`port`, retrying a refusal for up to DIAL_PATIENCE_S."""
    deadline = asyncio.get_running_loop().time() + DIAL_PATIENCE_S
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(_DIAL_RETRY_S)


async def _rewritten_election_header(reader: asyncio.StreamReader, advertise: str) -> bytes:
    """Read the dialling server's first message and return it announcing `advertise` instead."""
    header = await reader.readexactly(_ELECTION_HEADER.size)
    version, sid, length = _ELECTION_HEADER.unpack(header)
    if version not in _ELECTION_VERSIONS:  # an old-style header (just the id): nothing announced
        return header
    await reader.readexactly(length)  # the announced address(es), "host:port|host:port"
    address = advertise.encode("ascii")
    return _ELECTION_HEADER.pack(version, sid, len(address)) + address
