"""`ModernMember`: a consumer-group member coordinated by the group coordinator.

The group side is `modern.classic.consumer_coordinator.ConsumerCoordinator` (membership in
`modern.classic.abstract_coordinator`, its states in `modern.classic.membership_states`); the data side is
`modern.client.fetcher` (assign + seek, as a consumer in manual-assignment mode), fetching exactly what the
coordinator gave us. Its client.id is its name behind a random tag (`rebalance.member.pod_client_id`): member
ids order as a deployment's pods' do, and brokers that advertise per-member addresses route its traffic
through that member's fault proxies.

Settings under Kafka names go in `MemberConfig.extra`: heartbeat.interval.ms,
max.poll.interval.ms, rebalance.timeout.ms, retry.backoff.ms, retry.backoff.max.ms, request.timeout.ms,
fetch.max.wait.ms, and client.id.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping

from modern.classic.consumer_coordinator import ConsumerCoordinator
from modern.classic.settings import ClientSettings
from modern.client.connection import ConnectionFailed, parse_address
from modern.client.fetched import FetchingMember
from modern.client.fetcher import Fetcher
from modern.common import errors
from modern.common.errors import ErrorClass
from rebalance import events as ev
from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig, RebalanceListener, pod_client_id
from rebalance.types import Record, TopicPartition

# MemberConfig.extra keys this backend understands (anything else is a typo: fail loudly).
EXTRA_SETTINGS = {
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "rebalance.timeout.ms": "rebalance_timeout_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "request.timeout.ms": "request_timeout_ms",
    "fetch.max.wait.ms": "fetch_max_wait_ms",
}
CLIENT_ID_SETTING = "client.id"   # a text setting, beside the numbers above


def settings_from(config: MemberConfig, client_id: str) -> ClientSettings:
    """The client's settings; `client_id` unless `extra` sets `client.id`, as a Kafka user may."""
    if not config.bootstrap:
        raise ValueError("the modern backend needs a bootstrap address (HOST:PORT[,HOST:PORT])")
    known = {*EXTRA_SETTINGS, CLIENT_ID_SETTING}
    unknown = sorted(set(config.extra) - known)
    if unknown:
        raise ValueError(f"unknown classic setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    extra = {EXTRA_SETTINGS[key]: int(value) for key, value in config.extra.items() if key in EXTRA_SETTINGS}
    return ClientSettings(
        group=config.group,
        topics=tuple(config.topics),
        bootstrap=tuple(parse_address(a) for a in config.bootstrap.split(",") if a.strip()),
        client_id=str(config.extra.get(CLIENT_ID_SETTING, client_id)),
        strategy=config.strategy,
        group_instance_id=config.group_instance_id,
        session_timeout_ms=config.session_timeout_ms,
        **extra,
    )


class ModernMember(FetchingMember):
    def __init__(self, config: MemberConfig, *, listener: RebalanceListener | None = None,
                 recorder: EventRecorder | None = None) -> None:
        self.config = config
        self.member_id = config.member_name or f"member-{uuid.uuid4().hex[:8]}"
        self.listener = listener or RebalanceListener()
        self.recorder = recorder or NullRecorder()
        self.settings = settings_from(config, client_id=pod_client_id(self.member_id))
        self.coordinator = ConsumerCoordinator(self.settings, self, recorder=self.recorder, member_name=self.member_id)
        self._fetcher: Fetcher | None = None
        self._positions: dict[TopicPartition, int] = {}     # next offset to consume, per owned partition
        self._owned: frozenset[TopicPartition] = frozenset()
        self._next_auto_commit = 0.0
        self._lock = threading.RLock()                     # poll/commit/close come from the caller's threads
        self._closed = False

    # ------------------------------------------------------------ Member

    def start(self) -> None:
        self._start_fetching(self.config.strategy)
        self._fetcher.enable_wakeup()
        self.coordinator.wake_poll = self._fetcher.wakeup   # a join's news ends the fetch a poll waits in
        self.coordinator.start()
        with self._lock:
            self.coordinator.poll()  # starts the first join in the background
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000

    def poll(self, timeout_s: float) -> list[Record]:
        """Records, waiting up to `timeout_s`. As Kafka's `KafkaConsumer.poll`, the group's join goes on for as
        long as the poll lasts (a JoinGroup answer read, the leader's assignment, the SyncGroup, a finished
        join applied) and no longer: a poll returns when it has records or its time is up, and what the
        group answers meanwhile waits for the next call."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._closed:
                if self.coordinator.poll():      # rebalances (and calls our hooks) when needed
                    self._maybe_auto_commit()    # never while a rebalance is pending, as Kafka's poll
                # The fetch ends early when the group has news for this thread (coordinator.wake_poll).
                records = self._fetch(max(0.0, deadline - time.monotonic()), self.coordinator.generation.generation_id)
                if records or time.monotonic() >= deadline:
                    self.coordinator.progress_join()   # answers that came during the fetch, as Kafka's network poll
                    return records
            return []

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """As Kafka's `commitSync`, which polls the network while it waits: the join under way moves on too."""
        try:
            super().commit(offsets)
        finally:
            with self._lock:
                if not self._closed:
                    self.coordinator.progress_join()

    def _group_news(self) -> threading.Event:
        return self.coordinator.news

    def _give_up_partitions(self) -> None:
        if self._owned:
            if self.config.auto_commit:
                self._commit_offsets(dict(self._positions))
            owned = set(self._owned)
            self._owned = frozenset()
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.member_id, partitions=sorted(map(str, owned)))
            self._call_listener("on_partitions_revoked", owned)

    def _metrics_snapshot(self) -> dict:
        return self.coordinator.metrics.snapshot(time.monotonic())

    def _leave_group(self) -> None:
        self.coordinator.close(leave=True)

    def abandon(self) -> None:
        """Drop this member as SIGKILL would: no commit, no revocation, no LeaveGroup (the
        coordinator removes it when its session times out). Used to emulate the crash of one member
        among several in a process; the caller stops writing its events."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.coordinator.close(leave=False)
        if self._fetcher is not None:
            self._fetcher.close()

    def metrics(self) -> dict[str, float]:
        return self.coordinator.metrics.snapshot(time.monotonic())

    # ------------------------------------------------------------ PartitionHooks (called inside poll)

    def positions(self) -> dict[TopicPartition, int]:
        """Also read by the join worker (the cooperative pre-join commit): from copies, never the live dict."""
        if not self.config.auto_commit:
            return {}
        positions, owned = dict(self._positions), self._owned
        return {tp: o for tp, o in positions.items() if tp in owned}

    def rebalanced(self) -> None:
        """A join completed: the auto-commit interval starts again from now (Kafka's onJoinComplete)."""
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000

    def committed(self, offsets: Mapping[TopicPartition, int], error: ErrorClass, generation: int) -> None:
        rendered = {str(tp): o for tp, o in sorted(offsets.items())}
        if error is errors.NONE:
            self.recorder.emit(ev.OFFSETS_COMMITTED, self.member_id, offsets=rendered, generation=generation)
        else:
            self.recorder.emit(ev.COMMIT_FAILED, self.member_id, offsets=rendered, error=errors.name_of(error),
                               generation=generation)

    def revoke(self, partitions: set[TopicPartition]) -> None:
        self._drop(partitions)
        self.recorder.emit(ev.PARTITIONS_REVOKED, self.member_id, partitions=sorted(map(str, partitions)))
        self._call_listener("on_partitions_revoked", partitions)

    def lose(self, partitions: set[TopicPartition]) -> None:
        self._drop(partitions)
        self.recorder.emit(ev.PARTITIONS_LOST, self.member_id, partitions=sorted(map(str, partitions)))
        self._call_listener("on_partitions_lost", partitions)

    def assign(self, partitions: set[TopicPartition]) -> None:
        committed = self._committed_offsets(partitions, self.coordinator.fetch_committed)
        self._owned = frozenset(self._owned | partitions)
        self._fetch_from(committed)
        self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.member_id, partitions=sorted(map(str, partitions)),
                           committed={str(tp): o for tp, o in committed.items()})
        self._call_listener("on_partitions_assigned", partitions)

    # ------------------------------------------------------------ helpers

    def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        try:
            return self.coordinator.commit(offsets)
        except ConnectionFailed:
            self.committed(offsets, errors.COORDINATOR_NOT_AVAILABLE, self.coordinator.generation.generation_id)
            return errors.COORDINATOR_NOT_AVAILABLE

    def _maybe_auto_commit(self) -> None:
        """Asynchronous, as Kafka's auto-commit: polling goes on while the commit is in flight. The next one is
        due an interval later, or retry.backoff.ms after a retriable failure (`maybeAutoCommitOffsetsAsync`)."""
        now = time.monotonic()
        if not self.config.auto_commit or now < self._next_auto_commit:
            return
        due, self._next_auto_commit = self._next_auto_commit, now + self.config.auto_commit_interval_ms / 1000
        if not self.coordinator.maybe_commit_async(self.positions(), retry_soon=self._retry_auto_commit_soon):
            self._next_auto_commit = due   # nothing sent: still due at the next poll

    def _retry_auto_commit_soon(self) -> None:
        self._next_auto_commit = time.monotonic() + self.settings.retry_backoff_ms / 1000

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        getattr(self.listener, method)(set(partitions))
