"""The broker: an asyncio server that answers the Kafka protocol through a handler registry.

Every connection is its own task that reads one frame, dispatches it and writes the
answer before reading the next (Kafka, too, handles one request per connection at a
time), so a slow or stalled client only ever holds up itself.

The broker keeps a view of its peers (probed over the Kafka protocol) and leads the
partitions the view assigns it. With a data directory shared by the brokers of one
machine, a partition's segment lives in one place; its leader holds an exclusive lock
on it, so a new leader only writes after the old one died (the kernel drops a dead
process's locks) or let go.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka.errors as Errors
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest

from broker.advertise import AdvertiseMap, parse_host_port
from broker.counters import STATS_WORD, RequestCounters
from broker.handlers import api_versions_response, register_core_handlers
from broker.liveness import LivenessSampler, RequestLedger
from broker.log import PartitionLog
from broker.peers import PeerClient, forward_topic
from broker.registry import BrokerExtension, HandlerRegistry, RequestContext
from broker.topics import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, TopicSpec, TopicStore
from broker.view import BrokerAddress, ClusterView, LeadershipChange
from rebalance.events import EventRecorder
from rebalance.kafka_frames import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameError,
    decode_request,
    encode_response,
    frame_size,
    peek_header,
)

log = logging.getLogger(__name__)

LOCK_RETRY_S = 0.05

LISTEN_BACKLOG = 2048     # pending connections the listening socket holds (the kernel caps it at somaxconn)


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 0                                   # 0: any free port (see Broker.address)
    advertise: str | None = None                    # "host:port" given to clients by default
    advertise_map: Path | None = None               # per-client-id addresses (broker.advertise)
    data_dir: Path | None = None                    # segment files; None keeps logs in memory
    peers: Mapping[int, str] = field(default_factory=dict)  # other brokers: node id -> "host:port"
    zk: str | None = None                           # legacy mode: "host:port[/chroot]"
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    default_partitions: int = 1                     # Kafka's num.partitions
    auto_create_topics: bool = True                 # Kafka's auto.create.topics.enable
    offsets_topic_partitions: int = OFFSETS_TOPIC_PARTITIONS
    idle_timeout_s: float = 600.0                   # Kafka's connections.max.idle.ms
    frame_timeout_s: float = 30.0                   # a frame begun must arrive whole within this
    probe_interval_s: float = 0.2
    probe_timeout_s: float = 2.0                    # one probe's wait for an answer
    # A peer is declared dead once it has not answered a probe for this long (at the first failed
    # probe when 0, the lab's quick default). Kafka (KRaft): broker.session.timeout.ms = 9,000.
    broker_session_timeout_s: float = 0.0
    # A broker declared dead leads its preferred partitions again this long after it returns
    # (0: at once). Kafka: not before the preferred-leader election, every 300 s.
    fail_back_delay_s: float = 0.0
    # The broker's own liveness (broker.liveness): its sampler's period (0: no sampler), and where its
    # broker_liveness events go (None: only the log), with the run id they carry.
    liveness_interval_s: float = 0.25
    events_path: Path | None = None
    run_id: str = ""


class Broker:
    def __init__(self, config: BrokerConfig, *, extensions: Sequence[BrokerExtension] = (),
                 registry: HandlerRegistry | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.registry = registry or HandlerRegistry()
        self.extensions = list(extensions)
        self.topics = TopicStore(config.data_dir)
        self.cluster = ClusterView(config.node_id, BrokerAddress(config.node_id, config.host, config.port),
                                   configured=config.peers, spawn=self._spawn,
                                   fail_back_delay_s=config.fail_back_delay_s)
        self._advertise_map = AdvertiseMap(config.advertise_map)
        self._logs: dict[tuple[str, int], PartitionLog] = {}        # partitions this broker leads, open
        self._memory_logs: dict[tuple[str, int], PartitionLog] = {}  # in-memory mode: kept across moves
        self._locks: dict[tuple[str, int], int] = {}                 # held lock file descriptors
        self._acquiring: dict[tuple[str, int], asyncio.Task] = {}
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._connections: set[asyncio.Task] = set()
        self._append_waiters: dict[tuple[str, int], list[asyncio.Future]] = {}   # delayed fetches by partition
        self._failed: asyncio.Future | None = None  # resolved when a background task fails
        self._stopping = False
        self._zk = None
        self.request_counts = RequestCounters()
        self.requests = RequestLedger()
        self._connection_fds: dict[asyncio.Task, int] = {}   # for the bytes clients sent and the broker has not read
        self.liveness: LivenessSampler | None = None
        self.address: tuple[str, int] | None = None
        self.fatal_error: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        self._failed = asyncio.get_running_loop().create_future()
        if self.config.liveness_interval_s > 0:
            recorder = (EventRecorder(self.config.events_path, run_id=self.config.run_id)
                        if self.config.events_path else None)
            self.liveness = LivenessSampler(self.requests, node_id=self.node_id, recorder=recorder,
                                            interval_s=self.config.liveness_interval_s,
                                            connections=lambda: list(self._connection_fds.values()),
                                            port=lambda: self.address[1] if self.address else None)
            self.liveness.start()
        register_core_handlers(self.registry)
        for extension in self.extensions:
            extension.install(self, self.registry)
        # A deep accept queue: a thousand members connecting at once must not overflow it while the event
        # loop is busy (an overflowed queue drops SYNs, and the clients' retries back off for seconds).
        self._server = await asyncio.start_server(self._serve_connection, self.config.host, self.config.port,
                                                  limit=2**16, backlog=LISTEN_BACKLOG)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = (host, port)
        self.cluster.set_own_address(BrokerAddress(self.node_id, *self._default_advertised()))
        self.topics.add(TopicSpec(name=OFFSETS_TOPIC, partitions=self.config.offsets_topic_partitions,
                                  compacted=True, internal=True))
        self._reconcile()
        for node_id, address in sorted(self.config.peers.items()):
            if node_id != self.node_id:
                self._spawn(self._probe_peer(node_id, *parse_host_port(address)))
        if self.config.zk:
            from broker.zk import ZkRegistration

            self._zk = ZkRegistration(self.config.zk, self.node_id, *self._default_advertised())
            await asyncio.to_thread(self._zk.start)
            for spec in self.topics.all():
                await asyncio.to_thread(self._zk.register_topic, spec.name, self._initial_replicas(spec))
        for extension in self.extensions:
            await extension.start()
        log.info("broker %s listening on %s:%s", self.node_id, host, port)

    async def stop(self) -> None:
        for extension in reversed(self.extensions):
            try:
                await extension.stop()
            except Exception:  # keep stopping the rest; the error is logged, not lost
                log.exception("broker %s: extension %r failed to stop", self.node_id, extension)
        if self._server is not None:
            self._server.close()
        self._stopping = True
        pending = {*self._tasks, *self._connections}
        while pending:  # cancel again if a task swallowed it (asyncio.wait_for can, before 3.12)
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.5)
        if self._server is not None:
            await self._server.wait_closed()
        for key in list(self._logs):
            self._release(key)
        if self._zk is not None:
            await asyncio.to_thread(self._zk.stop)
        if self.liveness is not None:
            self.liveness.stop()
            self.liveness.recorder.close()

    async def serve_until_failure(self) -> None:
        """Wait (after start) until a background task fails, and raise its error."""
        assert self._failed is not None, "start() first"
        await self._failed
        if self.fatal_error is not None:
            raise self.fatal_error

    # -- what handlers and extensions use --------------------------------------------
    def log(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition this broker leads now, else None."""
        return self._logs.get((topic, partition))

    def advertised_address(self, node_id: int, client_id: str | None) -> tuple[str, int]:
        """Where a client with this client id should reach broker node_id."""
        mapped = self._advertise_map.lookup(client_id, node_id)
        if mapped is not None:
            return mapped
        node = self.cluster.address_of(node_id)
        if node is None:
            raise KeyError(f"broker {node_id} is not live")
        return node.host, node.port

    async def create_topic(self, spec: TopicSpec, *, forward: bool = True) -> bool:
        """Create a topic here and (unless the request came from a peer) on every live peer."""
        created = self.topics.add(spec)
        if created:
            self._reconcile()
            if self._zk is not None:
                await asyncio.to_thread(self._zk.register_topic, spec.name, self._initial_replicas(spec))
        if forward:
            peers = [node for node in self.cluster.live_brokers() if node.node_id != self.node_id]
            await asyncio.gather(*(self._forward_topic(node, spec) for node in peers))
        return created

    def next_append(self, partitions: Iterable[tuple[str, int]]) -> asyncio.Future:
        """A future resolved at the next append to one of `partitions`: a long-polling fetch waits on it.
        Keyed by partition, as Kafka's fetch purgatory is, so an append wakes only the fetches that asked
        for its partition (with a thousand members waiting, waking all of them at every append is what
        would load the broker)."""
        waiter = asyncio.get_running_loop().create_future()
        for key in partitions:
            self._append_waiters.setdefault(key, []).append(waiter)
        return waiter

    def notify_appended(self, topic: str, partition: int) -> None:
        for waiter in self._append_waiters.pop((topic, partition), ()):
            if not waiter.done():
                waiter.set_result(None)

    def forget_waiter(self, waiter: asyncio.Future, partitions: Iterable[tuple[str, int]]) -> None:
        """Drop a fetch's waiter that timed out, so that a partition nobody writes holds no dead futures."""
        for key in partitions:
            waiting = self._append_waiters.get(key)
            if waiting and waiter in waiting:
                waiting.remove(waiter)
                if not waiting:
                    del self._append_waiters[key]

    # -- connections -----------------------------------------------------------------
    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if peer else ""
        sock = writer.get_extra_info("socket")
        if sock is not None:
            self._connection_fds[task] = sock.fileno()
        try:
            while True:
                async with asyncio.timeout(self.config.idle_timeout_s):
                    prefix = await reader.readexactly(4)
                if prefix == STATS_WORD:   # a counters reader (broker.counters), not a Kafka client
                    writer.write(self.request_counts.answer())
                    await writer.drain()
                    break
                size = frame_size(prefix, self.config.max_frame_bytes)
                async with asyncio.timeout(self.config.frame_timeout_s):
                    frame = await reader.readexactly(size)
                api_key = int.from_bytes(frame[:2], "big", signed=True)   # short frames fail in _dispatch
                self.requests.arrived(api_key)
                try:
                    answer = await self._dispatch(frame, client_host)
                    if answer is not None:
                        writer.write(answer)
                finally:
                    self.requests.done(api_key)   # answered, needing no answer, or failed: no longer outstanding
                if answer is not None:
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except TimeoutError:
            log.info("closing connection from %s: idle, or a frame left unfinished", peer)
        except asyncio.CancelledError:
            pass  # the broker is stopping: end this connection quietly
        except FrameError as error:
            log.info("closing connection from %s: %s", peer, error)
        except Exception:
            log.exception("closing connection from %s after a handler error", peer)
        finally:
            self._connections.discard(task)
            self._connection_fds.pop(task, None)
            writer.close()

    async def _dispatch(self, frame: bytes, client_host: str) -> bytes | None:
        api_key, api_version, correlation_id = peek_header(frame)
        registration = self.registry.get(api_key)
        if registration is None:
            raise FrameError(f"no handler for API key {api_key}")
        if not registration.min_version <= api_version <= registration.max_version:
            if api_key == ApiKey.ApiVersions:  # the one API that must answer: with v0 and the ranges
                error = Errors.UnsupportedVersionError.errno
                return encode_response(api_versions_response(self.registry, 0, error), correlation_id)
            raise FrameError(f"API {api_key} v{api_version} outside {registration.min_version}-"
                             f"{registration.max_version}")
        request = decode_request(frame)
        self.request_counts.count(api_key)
        context = RequestContext(broker=self, api_key=api_key, api_version=api_version,
                                 correlation_id=correlation_id, client_id=request.client_id,
                                 client_host=client_host)
        response = await registration.handler(context, request.body)
        return None if response is None else encode_response(response, correlation_id)

    # -- membership ------------------------------------------------------------------
    async def _probe_peer(self, node_id: int, host: str, port: int) -> None:
        """Ask a peer for its metadata every probe interval: it answers, so it is live (and its
        topics are learned); it has refused or stayed silent for the broker session timeout, so
        it is dead. Each round also ends the fail-back holds that are due."""
        client = PeerClient(host, port)
        last_answer_s: float | None = None
        try:
            while not self._stopping:
                try:
                    answer = await client.request(MetadataRequest[1](topics=None), self.config.probe_timeout_s)
                except (OSError, EOFError, TimeoutError, FrameError):
                    silent_for = None if last_answer_s is None else time.monotonic() - last_answer_s
                    if (silent_for is None or silent_for >= self.config.broker_session_timeout_s) \
                            and self.cluster.mark_dead(node_id):
                        log.warning("broker %s: peer %s is dead", self.node_id, node_id)
                        self._reconcile()
                else:
                    last_answer_s = time.monotonic()
                    self._learn_from_peer(node_id, answer)
                if self.cluster.release_held(time.monotonic()):
                    log.info("broker %s: a returned peer leads its preferred partitions again", self.node_id)
                    self._reconcile()
                await asyncio.sleep(self.config.probe_interval_s)  # the probe period, not a wait for state
        finally:
            client.close()

    def _learn_from_peer(self, node_id: int, answer: Any) -> None:
        changed = False
        for topic in answer.topics:
            if topic.error_code == Errors.NoError.errno and self.topics.get(topic.name) is None:
                changed |= self.topics.add(TopicSpec(name=topic.name, partitions=len(topic.partitions),
                                                     internal=topic.is_internal))
        changed |= bool(self.topics.reload())
        own = next((b for b in answer.brokers if b.node_id == node_id), None)
        if own is not None and self.cluster.mark_live(BrokerAddress(node_id, own.host, own.port), time.monotonic()):
            log.info("broker %s: peer %s is live at %s:%s", self.node_id, node_id, own.host, own.port)
            changed = True
        if self.config.fail_back_delay_s > 0 and any(b.node_id == self.node_id for b in answer.brokers):
            # The peer sees this broker live: if it gives any of our preferred partitions to
            # someone else, it is holding us back after a return.
            held = any(p.leader_id >= 0 and p.leader_id != self.node_id
                       for topic in answer.topics for p in topic.partitions
                       if self.cluster.preferred_leader(p.partition_index) == self.node_id)
            if self.cluster.hold_self(held):
                log.info("broker %s: %s", self.node_id, "held back after a return" if held else "leads again")
                changed = True
        if changed:
            self._reconcile()

    async def _forward_topic(self, node: BrokerAddress, spec: TopicSpec) -> None:
        address = self.config.peers.get(node.node_id)
        host, port = parse_host_port(address) if address else (node.host, node.port)
        try:
            await forward_topic(host, port, spec, self.config.probe_timeout_s)
        except (OSError, EOFError, TimeoutError, FrameError) as error:
            log.info("could not tell broker %s about topic %s (%s); its probes will learn it", node.node_id,
                     spec.name, error)

    # -- leadership ------------------------------------------------------------------
    def _reconcile(self) -> None:
        """Open the logs of partitions this broker now leads, close the others."""
        wanted = {(spec.name, p) for spec in self.topics.all() for p in range(spec.partitions)
                  if self.cluster.leader_for(spec.name, p) == self.node_id}
        for key in list(self._logs):
            if key not in wanted:
                self._release(key)
                self.cluster.notify(LeadershipChange(key[0], key[1], self.cluster.leader_for(*key), local=False))
        for key in list(self._acquiring):
            if key not in wanted:
                self._acquiring.pop(key).cancel()
        for key in sorted(wanted):
            if key not in self._logs and key not in self._acquiring:
                if self.config.data_dir is None:
                    self._open(key)
                else:
                    self._acquiring[key] = self._spawn(self._acquire(key))

    async def _acquire(self, key: tuple[str, int]) -> None:
        """Take the partition's lock (waiting while a stalled former leader still holds it), then open."""
        directory = self._partition_dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(directory / "leader.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(LOCK_RETRY_S)  # flock offers no async wake-up: poll it
        except BaseException:
            os.close(descriptor)
            raise
        self._locks[key] = descriptor
        self._acquiring.pop(key, None)
        self._open(key)

    def _open(self, key: tuple[str, int]) -> None:
        if self.config.data_dir is None:
            log_ = self._memory_logs.setdefault(key, PartitionLog(*key))
        else:
            log_ = PartitionLog(*key, directory=self._partition_dir(key))
        self._logs[key] = log_
        self.cluster.notify(LeadershipChange(key[0], key[1], self.node_id, local=True))

    def _release(self, key: tuple[str, int]) -> None:
        log_ = self._logs.pop(key)
        if self.config.data_dir is not None:
            log_.close()
        descriptor = self._locks.pop(key, None)
        if descriptor is not None:
            os.close(descriptor)  # closing drops the flock

    def _partition_dir(self, key: tuple[str, int]) -> Path:
        assert self.config.data_dir is not None
        return self.config.data_dir / f"{key[0]}-{key[1]}"

    def _initial_replicas(self, spec: TopicSpec) -> dict[int, list[int]]:
        """The 0.8 replica assignment written to ZooKeeper: each partition's preferred leader."""
        nodes = self.cluster.configured
        return {p: [nodes[p % len(nodes)]] for p in range(spec.partitions)}

    # -- helpers ---------------------------------------------------------------------
    def _default_advertised(self) -> tuple[str, int]:
        if self.config.advertise:
            return parse_host_port(self.config.advertise)
        assert self.address is not None
        return self.address

    def _spawn(self, coroutine: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        log.error("broker %s: background task failed", self.node_id, exc_info=task.exception())
        self.fatal_error = task.exception()
        if not self._failed.done():
            self._failed.set_result(None)
