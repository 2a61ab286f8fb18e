"""The data path of one group member: Fetch requests for exactly the partitions it was given, on connections
of its own, one request in flight per broker (as Kafka's `AbstractFetch`, which skips a node with a fetch
pending), kept in flight across polls.

What goes on the wire is what a consumer in manual-assignment mode sends: Metadata for the leaders,
ListOffsets where a partition has no position yet (the reset policy), then Fetch (v12, no fetch session,
`fetch.max.wait.ms` 500 unless set, `fetch.min.bytes` 1, `fetch.max.bytes` 50 MiB, `max.partition.fetch.bytes` 1 MiB,
Kafka's defaults) to every leader at once, for the partitions with nothing buffered. At most
`max.poll.records` (500) records are handed out per poll, in the order their data arrived (`fetch_buffer`),
the rest kept for the next; a poll that hands records out sends the next fetches before it returns. As in
Kafka's consumer, `poll(timeout)` returns when its time is up even if a request is still out (a stalled link
holds up no poll). A broker that refuses a connection, drops one, or leaves a request unanswered for
`request.timeout.ms` (30 s) is skipped for a reconnect backoff (`reconnect.backoff.ms` 50 ms doubling to
`reconnect.backoff.max.ms` 1 s, jitter 20 %, as Kafka's `ClusterConnectionStates`), the leaders are looked up
again, and every other leader is fetched from meanwhile (`AbstractFetch.prepareFetchRequests` skips a node
that `isUnavailable`).

It replaces kafka-python's `KafkaConsumer` on this path because that client spends several times the CPU per
idle member (an I/O loop that wakes hundreds of times a second), which kept a thousand members off a
two-core machine (`benchmarks/bench_fetch_idle.py` measures both).
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record import MemoryRecords

from modern.client.connection import ConnectionFailed, parse_address
from modern.client.fetch_buffer import FetchBuffer
from modern.client.fetch_channel import FetchChannel
from rebalance.types import Record, TopicPartition

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 50 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
MAX_POLL_RECORDS = 500
REQUEST_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
RECONNECT_BACKOFF_S, RECONNECT_BACKOFF_MAX_S, RECONNECT_JITTER = 0.05, 1.0, 0.2
RESET_TIMESTAMPS = {"earliest": -2, "latest": -1}
FETCH_VERSION, LIST_OFFSETS_VERSION, METADATA_VERSION = 12, 7, 9
BOOTSTRAP = -1   # the node key of a bootstrap connection, used for Metadata only

NONE = 0
OFFSET_OUT_OF_RANGE = kafka_errors.OffsetOutOfRangeError.errno
# After these the leaders are looked up again before the partition is fetched.
LEADER_MOVED = frozenset(error.errno for error in (
    kafka_errors.NotLeaderForPartitionError, kafka_errors.UnknownTopicOrPartitionError,
    kafka_errors.LeaderNotAvailableError, kafka_errors.FencedLeaderEpochError))


class Fetcher:
    """`assign`, `seek`, `position` and `poll` as a manually assigned KafkaConsumer offers them, for one thread
    at a time (the member's lock); `close` may come from any thread."""

    def __init__(self, bootstrap: Iterable[str], *, client_id: str, auto_offset_reset: str = "earliest",
                 max_wait_ms: int = FETCH_MAX_WAIT_MS) -> None:
        if max_wait_ms < 0:
            raise ValueError(f"fetch.max.wait.ms must not be negative, got {max_wait_ms}")
        if auto_offset_reset not in RESET_TIMESTAMPS:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(RESET_TIMESTAMPS)}, "
                             f"not {auto_offset_reset!r}")
        self.bootstrap = [parse_address(address) for address in bootstrap]
        if not self.bootstrap:
            raise ValueError("no bootstrap address")
        self.client_id = client_id
        self.max_wait_ms = max_wait_ms
        self.reset_timestamp = RESET_TIMESTAMPS[auto_offset_reset]
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}          # next offset to fetch
        self._buffer = FetchBuffer()                             # fetched, not yet handed out
        self._leaders: dict[TopicPartition, int] = {}
        self._addresses: dict[int, tuple[str, int]] = {}
        self._channels: dict[int, FetchChannel] = {}
        self._failures: dict[int, tuple[int, float]] = {}        # node -> (failed attempts, skipped until)
        self._next_bootstrap = 0
        self._stale_metadata = True
        self._closed = threading.Event()
        self._woken = threading.Event()        # wakeup(): the poll under way returns now
        self._wake_pair: tuple[socket.socket, socket.socket] | None = None   # what a wait in select sees of it

    # ------------------------------------------------------------------ what the member calls

    def enable_wakeup(self) -> None:
        """Let `wakeup` end a poll's wait; called once, before the first poll."""
        if self._wake_pair is None:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            self._wake_pair = pair

    def wakeup(self) -> None:
        """From another thread: the poll under way returns now with what it has, and the next one does if none
        is under way (Kafka's consumer returns from its network poll on any answer, its group's included)."""
        self._woken.set()
        if self._wake_pair is not None:
            try:
                self._wake_pair[1].send(b"\0")
            except OSError:
                pass   # a byte is waiting already, or the fetcher is closed

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch exactly `partitions` from now on; positions and buffered records of those kept stay, the rest
        are forgotten."""
        self._assigned = frozenset(partitions)
        self._buffer.assign(self._assigned)
        for tp in [tp for tp in self._positions if tp not in self._assigned]:
            del self._positions[tp]
        if any(tp not in self._leaders for tp in self._assigned):
            self._stale_metadata = True

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Consume `tp` from `offset` on; records already buffered from exactly there are kept (a seek to the
        consumed position changes nothing, as in Kafka, where buffered data is used while it is next in line)."""
        if tp not in self._assigned:
            raise ValueError(f"{tp} is not assigned")
        if self.position(tp) == offset:
            return
        self._positions[tp] = offset
        self._buffer.drop(tp)

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record `poll` hands out for `tp` (Kafka's consumed position), None while
        the reset policy has not given one yet."""
        buffered = self._buffer.next_offset(tp)
        return buffered if buffered is not None else self._positions.get(tp)

    def in_flight(self) -> set[TopicPartition]:
        """The partitions a Fetch is out for."""
        return {tp for channel in self._channels.values() if channel.busy
                and channel.request.API_KEY == FetchRequest.API_KEY for tp in channel.asked}

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Record]]:
        """Records of assigned partitions, waiting up to `timeout_ms` for some; requests still out stay out."""
        deadline = time.monotonic() + timeout_ms / 1000
        while not self._closed.is_set() and not self._woken.is_set():
            if self._buffer:
                self._read_arrived()     # data there is handed out at once, with what else has come in
                break
            try:
                self._step(deadline)
            except ConnectionFailed:
                self._stale_metadata = True
                self._closed.wait(min(RETRY_BACKOFF_S, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
        self._take_wakeup()
        if self._closed.is_set():
            for channel in list(self._channels.values()):
                self._drop_channel(channel)
            return self._hand_out()
        handed = self._hand_out()
        if handed:
            self._send_quietly()   # what was drained is fetched while the member works on the records
        return handed

    def close(self) -> None:
        """End every connection; a poll waiting on another thread returns at once (and closes them)."""
        self._closed.set()
        for channel in self._channels.copy().values():   # a copy taken at once: the polling thread may change it
            channel.abort()
        if self._wake_pair is not None:
            self.wakeup()
            for end in self._wake_pair:
                end.close()

    def _take_wakeup(self) -> None:
        self._woken.clear()
        if self._wake_pair is not None:
            try:
                while self._wake_pair[0].recv(64):
                    pass
            except OSError:
                pass   # nothing (more) to read, or closed

    # ------------------------------------------------------------------ one step: send what is due, read answers

    def _step(self, deadline: float) -> None:
        if not self._assigned:
            self._closed.wait(max(0.0, min(0.05, deadline - time.monotonic())))   # nothing to fetch: do not spin
            return
        self._send_due()
        self._await(deadline)

    def _send_due(self) -> None:
        """Metadata when the leaders are in doubt, then ListOffsets and Fetch to every available leader (a
        metadata refresh pending does not hold up fetches from the leaders known)."""
        if self._stale_metadata:
            self._send_metadata()
        self._send_list_offsets()
        self._send_fetches()

    def _send_quietly(self) -> None:
        try:
            if self._assigned:
                self._send_due()
        except ConnectionFailed:
            self._stale_metadata = True

    def _read_arrived(self) -> None:
        try:
            self._await(time.monotonic())
        except ConnectionFailed:
            self._stale_metadata = True

    def _send_metadata(self) -> None:
        if any(channel.busy and channel.request.API_KEY == MetadataRequest.API_KEY
               for channel in self._channels.values()):
            return
        idle = [channel for channel in self._channels.values() if not channel.busy and channel.node != BOOTSTRAP]
        if idle:
            channel = idle[0]
        elif any(channel.busy for channel in self._channels.values()):
            return   # a connection comes free within a fetch's wait
        elif self._failures.get(BOOTSTRAP, (0, 0.0))[1] > time.monotonic():
            return   # the last bootstrap broker asked failed: the next one after the backoff
        else:
            address = self.bootstrap[self._next_bootstrap % len(self.bootstrap)]
            self._next_bootstrap += 1
            channel = self._channels[BOOTSTRAP] = FetchChannel(BOOTSTRAP, address, self.client_id)
        request = MetadataRequest[METADATA_VERSION](
            topics=[MetadataRequest.MetadataRequestTopic(name=name) for name in sorted({tp.topic for tp in
                                                                                         self._assigned})],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        if channel.node == BOOTSTRAP:
            try:
                channel.send(request)
            except ConnectionFailed:
                self._failed(channel)
                raise            # no broker to ask: the poll backs off before the next bootstrap address
            self._failures.pop(BOOTSTRAP, None)
        else:
            self._send(channel, request)

    def _send_list_offsets(self) -> None:
        part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        for channel, wanted in self._idle_leaders([tp for tp in self._assigned if tp not in self._positions]):
            topics: dict[str, list] = {}
            for tp in wanted:
                topics.setdefault(tp.topic, []).append(part(partition_index=tp.partition, current_leader_epoch=-1,
                                                            timestamp=self.reset_timestamp))
            self._send(channel, ListOffsetsRequest[LIST_OFFSETS_VERSION](
                replica_id=-1, isolation_level=0,
                topics=[ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=p) for name, p in topics.items()]))

    def _send_fetches(self) -> None:
        fetchable = [tp for tp in self._buffer.in_fetch_order(self._assigned)
                     if tp in self._positions and tp not in self._buffer]
        for channel, wanted in self._idle_leaders(fetchable):
            topics: dict[str, list] = {}
            for tp in wanted:
                topics.setdefault(tp.topic, []).append(FetchRequest.FetchTopic.FetchPartition(
                    partition=tp.partition, current_leader_epoch=-1, fetch_offset=self._positions[tp],
                    log_start_offset=-1, partition_max_bytes=PARTITION_MAX_BYTES))
            self._send(channel, FetchRequest[FETCH_VERSION](
                replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
                isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=p) for topic, p in topics.items()]),
                asked={tp: self._positions[tp] for tp in wanted})

    def _await(self, deadline: float) -> None:
        """Wait until an answer is whole or the deadline passes, and take the answers that are."""
        busy = [channel for channel in self._channels.values() if channel.busy]
        if not busy:
            self._closed.wait(max(0.0, min(RETRY_BACKOFF_S, self._next_retry() - time.monotonic(),
                                           deadline - time.monotonic())))
            return
        now = time.monotonic()
        for channel in busy:
            if now - channel.sent_at > REQUEST_TIMEOUT_S + self.max_wait_ms / 1000:
                self._failed(channel)    # Kafka disconnects a node that leaves a request unanswered
        busy = [channel for channel in busy if channel.busy]
        if not busy:
            return
        by_fd = {channel.sock.fileno(): channel for channel in busy}
        waiter = select.poll()   # no system call until it waits, unlike an epoll selector
        for fd in by_fd:
            waiter.register(fd, select.POLLIN)
        if self._wake_pair is not None:
            try:
                waiter.register(self._wake_pair[0], select.POLLIN)   # a wakeup ends the wait; poll() then returns
            except (OSError, ValueError):
                pass   # closed meanwhile: the channels' aborts end the wait
        try:
            ready = waiter.poll(max(0.0, deadline - now) * 1000)
        except (OSError, ValueError) as error:   # a socket ended under us (close from another thread)
            raise ConnectionFailed(str(error)) from error
        for fd, _ in ready:
            channel = by_fd.get(fd)
            if channel is None or not channel.busy:
                continue    # the wakeup's socket, or a channel dropped by an answer taken before it in this
                            # round (metadata without its broker)
            try:
                response = channel.receive()
            except ConnectionFailed:
                self._failed(channel)
                continue
            if response is not None:
                self._take_response(channel, response)

    # ------------------------------------------------------------------ answers

    def _take_response(self, channel: FetchChannel, response: Any) -> None:
        if response.API_KEY == MetadataRequest.API_KEY:
            self._take_metadata(response)
            if channel.node == BOOTSTRAP:
                self._drop_channel(channel)
        elif response.API_KEY == ListOffsetsRequest.API_KEY:
            for topic in response.topics:
                for answer in topic.partitions:
                    tp = TopicPartition(topic.name, answer.partition_index)
                    if answer.error_code == NONE and tp in self._assigned:
                        self._positions.setdefault(tp, answer.offset)
                    elif answer.error_code in LEADER_MOVED:
                        self._stale_metadata = True
        else:
            for topic in response.responses:
                for answer in topic.partitions:
                    tp = TopicPartition(topic.topic, answer.partition_index)
                    if channel.asked.get(tp) != self._positions.get(tp):
                        continue      # reassigned or sought since it was asked for
                    if answer.error_code == OFFSET_OUT_OF_RANGE:
                        del self._positions[tp]       # the reset policy decides
                        self._buffer.move_to_end(tp)
                    elif answer.error_code in LEADER_MOVED:
                        self._stale_metadata = True
                        self._buffer.move_to_end(tp)
                    elif answer.error_code == NONE and answer.records:
                        self._take_records(tp, answer.records)

    def _take_metadata(self, response: Any) -> None:
        self._addresses = {broker.node_id: (broker.host, broker.port) for broker in response.brokers}
        self._leaders = {TopicPartition(topic.name, partition.partition_index): partition.leader_id
                         for topic in response.topics if topic.error_code == NONE
                         for partition in topic.partitions
                         if partition.error_code == NONE and partition.leader_id >= 0}
        for channel in list(self._channels.values()):
            if channel.node != BOOTSTRAP and self._addresses.get(channel.node) != channel.address:
                self._drop_channel(channel)
        self._stale_metadata = any(tp not in self._leaders for tp in self._assigned)

    def _take_records(self, tp: TopicPartition, data: bytes) -> None:
        position = self._positions[tp]
        fetched = []
        batches = MemoryRecords(data)
        while (batch := batches.next_batch()) is not None:
            for record in batch:
                if record.offset >= position:   # a batch may begin before the position asked for
                    fetched.append(Record(tp.topic, tp.partition, record.offset, record.key, record.value,
                                          record.timestamp))
        if fetched:
            self._buffer.add(tp, fetched)
            self._positions[tp] = fetched[-1].offset + 1

    def _hand_out(self) -> dict[TopicPartition, list[Record]]:
        return self._buffer.hand_out(MAX_POLL_RECORDS)

    # ------------------------------------------------------------------ connections

    def _idle_leaders(self, partitions: Iterable[TopicPartition]) -> list[tuple[FetchChannel, list[TopicPartition]]]:
        """`partitions` by leader, for the leaders that are available and have no request out (Kafka's
        `prepareFetchRequests`: a node in reconnect backoff or with a fetch pending is skipped)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            if tp in self._leaders:
                by_leader.setdefault(self._leaders[tp], []).append(tp)
            else:
                self._stale_metadata = True
        now = time.monotonic()
        idle = []
        for node, wanted in by_leader.items():
            if self._failures.get(node, (0, 0.0))[1] > now:
                continue
            if node not in self._addresses:
                self._stale_metadata = True
                continue
            channel = self._channels.get(node)
            if channel is None:
                channel = self._channels[node] = FetchChannel(node, self._addresses[node], self.client_id)
            if not channel.busy:
                idle.append((channel, wanted))
        return idle

    def _send(self, channel: FetchChannel, request: Any, asked: dict | None = None) -> None:
        """Send on a broker's connection; a connection that fails puts the broker in reconnect backoff."""
        connecting = channel.sock is None
        try:
            channel.send(request, asked)
        except ConnectionFailed:
            self._failed(channel)
            return
        if connecting:
            self._failures.pop(channel.node, None)   # connected: the backoff starts again from its base

    def _failed(self, channel: FetchChannel) -> None:
        """A broker's connection failed: skip it for the reconnect backoff and look the leaders up again
        (Kafka's NetworkClient asks for metadata on every disconnection)."""
        self._drop_channel(channel)
        self._stale_metadata = True
        attempts = self._failures.get(channel.node, (0, 0.0))[0]
        backoff = min(RECONNECT_BACKOFF_S * 2 ** attempts, RECONNECT_BACKOFF_MAX_S)
        backoff *= random.uniform(1 - RECONNECT_JITTER, 1 + RECONNECT_JITTER)
        self._failures[channel.node] = (attempts + 1, time.monotonic() + backoff)

    def _next_retry(self) -> float:
        """When the next broker in reconnect backoff may be tried (far off if none is)."""
        now = time.monotonic()
        return min((until for _, until in self._failures.values() if until > now), default=now + RETRY_BACKOFF_S)

    def _drop_channel(self, channel: FetchChannel) -> None:
        channel.close()
        if self._channels.get(channel.node) is channel:
            del self._channels[channel.node]
