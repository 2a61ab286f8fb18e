"""`LegacyMember`: one Kafka 0.8 high-level consumer (ZookeeperConsumerConnector), as a lab Member.

Threads, as in 0.8: kazoo's own (the connection and the callbacks, which only record a
reason), one watcher executor (registration after a new session, the synced rebalance), the
auto-commit scheduler (its own thread, as 0.8's "kafka-consumer-autocommit", so a long rebalance
never delays a due commit), and the application's thread calling `poll`.

Sessions, reacting only to kazoo's application-level states:
  SUSPENDED  the connection dropped: what I own may be stale, but fetching goes on (a
             member cut off from ZooKeeper that still reaches the brokers is the zombie);
  LOST       the session expired: my ephemeral znodes (ids, owners) are gone;
  CONNECTED  after LOST (a new session): forget ownership, re-register, rebalance, then
             treat every subscribed path as changed and rebalance again (zkclient ran the
             new-session handler, then fired every listener: 0.8 rebalanced twice);
             after SUSPENDED (same session): watch every subscribed path again and act on
             those that changed after the last zxid seen before the disconnect, as the
             Java client's re-sent watches did (a change undone meanwhile still counts).
"""

from __future__ import annotations

import logging
import threading
import time
from enum import Enum

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from legacy_zk.config import LegacyConfig
from legacy_zk.fetcher import Fetcher
from legacy_zk.offsets import AutoCommitter, OffsetCommitter
from legacy_zk.rebalance import SyncedRebalance, Watches
from legacy_zk.registry import BROKER_IDS, GroupPaths, consumer_id_string, register, topic_path
from legacy_zk.subscriptions import Subscription
from legacy_zk.watcher import REBALANCE_REASONS, Reason, RebalanceTrigger, WatcherExecutor
from legacy_zk.zk import TracedZooKeeper
from rebalance import events as ev
from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig, RebalanceListener
from rebalance.types import Record, TopicPartition

log = logging.getLogger(__name__)


class LegacyState(Enum):
    """created -> running -> closed. `running` members may own nothing after failed rebalances."""

    CREATED = "created"
    RUNNING = "running"
    CLOSED = "closed"


class Link(Enum):
    """This member's ZooKeeper session as kazoo reports it.

    UP -> SUSPENDED (disconnected: the session may live on) -> UP (same session: RECONNECTED)
    UP | SUSPENDED -> EXPIRED (the session and its ephemerals are gone) -> UP (new session: NEW_SESSION)
    """

    UP = "up"
    SUSPENDED = "suspended"
    EXPIRED = "expired"


_TRANSITIONS = {
    LegacyState.CREATED: {LegacyState.RUNNING, LegacyState.CLOSED},
    LegacyState.RUNNING: {LegacyState.CLOSED},
    LegacyState.CLOSED: set(),
}


class LegacyMember:
    backend = "legacy"

    def __init__(
        self,
        config: MemberConfig | LegacyConfig,
        *,
        listener: RebalanceListener | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.config = config if isinstance(config, LegacyConfig) else LegacyConfig.from_member_config(config)
        # Registered under ids, and what the assignors sort: `<group>_<consumer.id>`. The lab's consumer.id is
        # its name behind a random tag (`pod_client_id`), so these sort as 0.8's host-time-uuid ids of pods do.
        self.consumer_id = consumer_id_string(self.config.group_id, self.config.consumer_id)
        self.member_id = (consumer_id_string(self.config.group_id, self.config.member_name)
                          if self.config.member_name else self.consumer_id)   # the id its events carry
        self.paths = GroupPaths(self.config.group_id)
        self._recorder = recorder or NullRecorder()
        self._listener = listener or RebalanceListener()
        self._state = LegacyState.CREATED
        self._state_lock = threading.Lock()
        self._link = Link.UP  # changed only by kazoo's state listener
        self._zxid_lock = threading.Lock()
        self._zxid_before_disconnect: int | None = None  # set on a disconnect, taken on the reconnect
        self.errors: list[BaseException] = []

        self.zk = TracedZooKeeper(
            self.config.zookeeper_connect, session_timeout_ms=self.config.zookeeper_session_timeout_ms, emit=self._emit
        )
        self._trigger = RebalanceTrigger()
        self._executor = WatcherExecutor(self.member_id, self._trigger, self._work, self._report_error)
        self.fetcher = Fetcher(
            client_id=self.config.consumer_id or self.consumer_id,
            auto_offset_reset=self.config.auto_offset_reset,
            emit=self._emit,
        )
        self._committer = OffsetCommitter(self.zk, self.paths, self._emit)
        self._auto_commit = AutoCommitter(self._committer, lambda: self.fetcher.positions(),
                                          interval_ms=self.config.auto_commit_interval_ms, name=self.member_id,
                                          on_error=self._report_error) if self.config.auto_commit_enable else None
        self.rebalancer = SyncedRebalance(
            zk=self.zk,
            paths=self.paths,
            config=self.config,
            consumer_id=self.consumer_id,
            fetcher=self.fetcher,
            committer=self._committer,
            listener=self._listener,
            watches=Watches(
                ids=self._on_ids_changed, topic=self._on_topic_changed, brokers=self._on_brokers_changed
            ),
            emit=self._emit,
            stopping=self._executor.stopping,
        )

    # -- the Member interface -----------------------------------------------------------------------

    def prepare(self) -> None:
        """Open the ZooKeeper session without registering, as 0.8's connector does when it is made (its
        constructor connects; createMessageStreams registers): a member host started ahead of its join wave
        (experiments.run.member_host) has its members connected when the wave comes."""
        self.zk.start(self.config.connection_timeout_ms / 1000.0)

    def start(self) -> None:
        """Connect (unless `prepare` did), register under ids, set the watches, and ask for the first rebalance."""
        self._set_state(LegacyState.RUNNING)
        self._emit(
            ev.MEMBER_STARTED,
            group=self.config.group_id,
            strategy=self.config.partition_assignment_strategy,
            topics=list(self.config.topics),
        )
        self.zk.start(self.config.connection_timeout_ms / 1000.0)
        self.zk.add_listener(self._on_session_state)
        self._register()
        self._arm_watches()
        self._trigger.fire(Reason.STARTUP)
        self._executor.start()
        if self._auto_commit is not None:
            self._auto_commit.start()

    def poll(self, timeout_s: float) -> list[Record]:
        return self.fetcher.poll(timeout_s)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._committer.commit(dict(offsets) if offsets is not None else self.fetcher.positions())

    def assignment(self) -> set[TopicPartition]:
        return self.rebalancer.owned()

    def close(self) -> None:
        """0.8's shutdown: stop the executor, stop fetching, commit, close the session (the
        ephemeral ids and owner znodes vanish with it, which is how the others learn)."""
        with self._state_lock:
            if self._state is LegacyState.CLOSED:
                return
            started = self._state is LegacyState.RUNNING
        self._set_state(LegacyState.CLOSED)
        reason = "close"
        try:
            if self._auto_commit is not None:
                self._auto_commit.stop()   # 0.8's shutdown stops the scheduler first
            if started:
                # Connected: let a rebalance in flight finish. Cut off: its next request would wait
                # for a connection that may never come; closing the client below ends that wait.
                self._executor.stop(timeout_s=self.config.connection_timeout_ms / 1000.0 if self.zk.connected else 0.5)
                positions = self.fetcher.stop()
                owned = self.rebalancer.owned()
                if self.config.auto_commit_enable and positions and self.zk.connected:
                    try:
                        self._committer.commit(positions)
                    except Exception as error:  # reported as commit_failed already
                        reason = f"error: final commit: {error}"
                if owned:
                    self._emit(ev.PARTITIONS_REVOKED, partitions=sorted(map(str, owned)))
                    self._listener.on_partitions_revoked(owned)
                self._emit(ev.METRICS, **self.rebalancer.stats.snapshot(time.monotonic()))
        finally:
            self.zk.stop()
            self._executor.stop()
            self.fetcher.close()
            self._emit(ev.MEMBER_STOPPED, reason=reason)

    def abandon(self) -> None:
        """Drop this member as SIGKILL would: no commit, no revocation, no closeSession (its
        ephemeral znodes stay until the session expires on the server). Used to emulate the crash
        of one member among several in a process; the caller stops writing its events."""
        with self._state_lock:
            if self._state is LegacyState.CLOSED:
                return
            self._state = LegacyState.CLOSED
        if self._auto_commit is not None:
            self._auto_commit.stop(timeout_s=1.0)
        try:
            self.zk.abandon()
        finally:
            self._executor.stop(timeout_s=1.0)
            self.fetcher.close()

    # -- more for experiments and tests -------------------------------------------------------------

    @property
    def state(self) -> LegacyState:
        return self._state

    @property
    def status(self) -> str:
        """Empty, or why this member owns nothing although it runs (its last rebalance failed)."""
        return self.rebalancer.status

    @property
    def idle(self) -> bool:
        """No rebalance running and none asked for: what this member owns will not change by itself."""
        return not self.rebalancer.in_progress and not self._trigger.pending

    @property
    def session_state(self) -> str:
        return self.zk.client.state

    def __enter__(self) -> LegacyMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- kazoo callbacks: record and return ---------------------------------------------------------

    def _on_ids_changed(self, path: str, event: str) -> None:
        self._trigger.fire(Reason.IDS_CHANGED)

    def _on_topic_changed(self, path: str, event: str) -> None:
        self._trigger.fire(Reason.TOPIC_CHANGED)

    def _on_brokers_changed(self, path: str, event: str) -> None:
        self._trigger.fire(Reason.BROKERS_CHANGED)

    def _on_session_state(self, state: str) -> None:
        self._emit(ev.SESSION_STATE, state=state)
        previous = self._link
        if state == KazooState.SUSPENDED:
            self._link = Link.EXPIRED if previous is Link.EXPIRED else Link.SUSPENDED
            with self._zxid_lock:
                if self._zxid_before_disconnect is None:
                    self._zxid_before_disconnect = self.zk.last_zxid
        elif state == KazooState.LOST:
            self._link = Link.EXPIRED
        elif state == KazooState.CONNECTED:
            self._link = Link.UP
            if previous is Link.EXPIRED:
                self._trigger.fire(Reason.NEW_SESSION)
            elif previous is Link.SUSPENDED:
                self._trigger.fire(Reason.RECONNECTED)

    # -- the executor's work ------------------------------------------------------------------------

    def _work(self, reasons: frozenset[Reason]) -> None:
        if Reason.NEW_SESSION in reasons:
            self._after_expiry(reasons)
        else:
            if Reason.RECONNECTED in reasons:
                reasons |= self._rewatch_after_reconnect()
            self._resubscribe(reasons)
            triggers = {reason for reason in reasons if reason in REBALANCE_REASONS}
            if triggers:
                self.rebalancer.run(trigger=",".join(sorted(reason.value for reason in triggers)))

    def _subscriptions(self) -> list[Subscription]:
        """zkclient's listeners: the ids children, each subscribed topic's data, and /brokers/ids
        once a rebalance found no broker."""
        subscriptions = [Subscription(path=self.paths.ids, children=True, reason=Reason.IDS_CHANGED,
                                      handler=self._on_ids_changed)]
        subscriptions += [
            Subscription(path=topic_path(topic), children=False, reason=Reason.TOPIC_CHANGED,
                         handler=self._on_topic_changed)
            for topic in sorted(self.config.topics)
        ]
        if self.rebalancer.watching_brokers:
            subscriptions.append(Subscription(path=BROKER_IDS, children=True, reason=Reason.BROKERS_CHANGED,
                                              handler=self._on_brokers_changed))
        return subscriptions

    def _resubscribe(self, reasons: frozenset[Reason]) -> None:
        """zkclient re-installed a fired watch at once, with an exists and a read of the path, before
        telling the listener; the same two requests here keep the herd's request count faithful."""
        for subscription in self._subscriptions():
            if subscription.reason in reasons:
                subscription.reinstall(self.zk)

    def _after_expiry(self, reasons: frozenset[Reason]) -> None:
        """0.8 on a new session: handleNewSession (forget, re-register, a full synced rebalance),
        then zkclient fired every child and data listener, which woke the watcher executor for a
        second rebalance. Reasons that came with the expiry join that second one."""
        with self._zxid_lock:
            self._zxid_before_disconnect = None  # the old session's watches are gone for good
        self._start_new_session()
        self.rebalancer.run(trigger=Reason.NEW_SESSION.value)
        refired = {subscription.reason for subscription in self._subscriptions()}
        for reason in refired | (reasons & REBALANCE_REASONS):
            self._trigger.fire(reason)

    def _start_new_session(self) -> None:
        """0.8's handleNewSession: forget what I owned (ZooKeeper already deleted it), re-register.
        The watches are set again by the rebalance's reads and by the listeners fired after it."""
        lost = self.rebalancer.forget_ownership()
        self.fetcher.stop()  # positions of lost partitions are not committed: they are not mine
        if lost:
            self._emit(ev.PARTITIONS_LOST, partitions=sorted(map(str, lost)))
            self._listener.on_partitions_lost(lost)
        self._register()

    def _rewatch_after_reconnect(self) -> frozenset[Reason]:
        """kazoo forgets its watches on a disconnect; the Java client re-sent them with the last zxid
        it had seen and the server fired those whose node changed since. Watch every subscribed
        path again and return the reasons the server would have fired."""
        with self._zxid_lock:
            since, self._zxid_before_disconnect = self._zxid_before_disconnect, None
        since = since or 0
        return frozenset(
            subscription.reason for subscription in self._subscriptions()
            if subscription.rewatch_since(self.zk, since)
        )

    # -- helpers --------------------------------------------------------------------------------------

    def _register(self) -> None:
        register(
            self.zk,
            self.paths,
            self.consumer_id,
            {topic: self.config.streams_per_topic for topic in self.config.topics},
            backoff_s=self.config.zookeeper_session_timeout_ms / 1000.0,
            stopping=self._executor.stopping,
        )

    def _arm_watches(self) -> None:
        """At start: a child watch on ids and a data watch per subscribed topic (zkclient's
        subscriptions); a topic not created yet gets an exists-watch, which fires when it appears."""
        self.zk.get_children(self.paths.ids, watch=self._on_ids_changed)
        for topic in sorted(self.config.topics):
            try:
                self.zk.get(topic_path(topic), watch=self._on_topic_changed)
            except NoNodeError:
                self.zk.exists(topic_path(topic), watch=self._on_topic_changed)

    def _emit(self, type: str, **fields: object) -> None:
        self._recorder.emit(type, member=self.member_id, **fields)

    def _report_error(self, error: BaseException) -> None:
        self.errors.append(error)
        log.error("%s: error in the watcher executor: %r", self.member_id, error, exc_info=error)

    def _set_state(self, new: LegacyState) -> None:
        with self._state_lock:
            if new not in _TRANSITIONS[self._state]:
                raise RuntimeError(f"member {self.member_id}: cannot go from {self._state.value} to {new.value}")
            self._state = new
