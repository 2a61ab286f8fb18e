"""The synced rebalance of the 0.8 consumer, step by step in 0.8's order.

Every member runs this same algorithm on its own view of ZooKeeper; nobody coordinates.
One run is up to `rebalance.max.retries` attempts. One attempt:

  1. read the broker list and this member's own subscription;
     no brokers at all: watch /brokers/ids and stop here (counts as success);
  2. stop fetching and commit the consumed positions (if auto-commit is on);
  3. delete every owner znode this member holds: an eager, stop-the-world release;
  4. read the whole group (every ids child and its subscription) and the topics'
     partition counts, and compute the assignment; keep only this member's threads;
  5. read the committed offsets of those partitions;
  6. create an owner znode per partition; any NodeExists with someone else's thread id
     fails the attempt, after deleting the owner znodes it just created;
  7. on success start fetching from those offsets.

Between failed attempts: stop fetching, commit, sleep `rebalance.backoff.ms`. After the
last failed attempt the member owns nothing until the next ZooKeeper event, and says so
(`rebalance_failed`), as 0.8 did with "can't rebalance after N retries".
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from kazoo.exceptions import ConnectionClosedError, NoNodeError

from legacy_zk import owners
from legacy_zk.config import LegacyConfig
from legacy_zk.fetcher import Fetcher
from legacy_zk.offsets import OffsetCommitter, read_offset
from legacy_zk.registry import BROKER_IDS, GroupPaths, parse_registration, topic_path
from legacy_zk.zk import TracedZooKeeper, WatchHandler, error_name
from rebalance import events as ev
from rebalance.assignors.legacy import legacy_assign, thread_ids
from rebalance.member import RebalanceListener
from rebalance.metrics import RebalanceMetrics
from rebalance.types import TopicPartition


class Outcome(Enum):
    SUCCESS = "success"
    OWNER_CONFLICT = "owner_conflict"
    ERROR = "error"


@dataclass(frozen=True)
class AttemptResult:
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True)
class Watches:
    """The member's watch handlers; each only fires the rebalance trigger."""

    ids: WatchHandler
    topic: WatchHandler
    brokers: WatchHandler


@dataclass(frozen=True)
class Broker:
    broker_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class SyncedRebalance:
    def __init__(
        self,
        *,
        zk: TracedZooKeeper,
        paths: GroupPaths,
        config: LegacyConfig,
        consumer_id: str,
        fetcher: Fetcher,
        committer: OffsetCommitter,
        listener: RebalanceListener,
        watches: Watches,
        emit: Callable[..., object],
        stopping: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._zk = zk
        self._paths = paths
        self._config = config
        self._consumer_id = consumer_id
        self._my_threads = thread_ids(consumer_id, config.streams_per_topic)
        self._fetcher = fetcher
        self._committer = committer
        self._listener = listener
        self._watches = watches
        self._emit = emit
        self._stopping = stopping
        self._clock = clock
        self._lock = threading.Lock()
        self._owned: dict[TopicPartition, str] = {}   # partition -> my thread id (0.8's topicRegistry)
        self.stats = RebalanceMetrics()
        self.in_progress = False
        self.status = ""  # empty, or why this member owns nothing (shown by the member command)
        # Set once an attempt found no broker and subscribed to /brokers/ids: zkclient kept that
        # listener for good, so it is watched again after every reconnect and new session.
        self.watching_brokers = False

    # -- what this member believes it owns ----------------------------------------------------------

    def owned(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._owned)

    def forget_ownership(self) -> set[TopicPartition]:
        """After a session expiry the owner znodes are already gone: forget them without deleting."""
        with self._lock:
            lost, self._owned = set(self._owned), {}
        return lost

    # -- one synced rebalance -------------------------------------------------------------------------

    def run(self, trigger: str) -> bool:
        """Up to rebalance.max.retries attempts. True on success; False if exhausted or closing."""
        self.in_progress = True
        try:
            return self._run(trigger)
        finally:
            self.in_progress = False

    def _run(self, trigger: str) -> bool:
        began = self._clock()
        self._emit(ev.REBALANCE_STARTED, trigger=trigger)
        retries = self._config.rebalance_max_retries
        for attempt in range(1, retries + 1):
            if self._stopping.is_set():
                return False
            attempt_began = self._clock()
            result = self._attempt_safely()
            self._emit(
                ev.REBALANCE_ATTEMPT,
                attempt=attempt,
                outcome=result.outcome.value,
                duration_ms=_ms(self._clock() - attempt_began),
                detail=result.detail,
            )
            if result.outcome is Outcome.SUCCESS:
                self.status = ""
                now = self._clock()
                self.stats.rebalance_completed(_ms(now - began), now)
                self._emit(
                    ev.REBALANCE_COMPLETED,
                    generation=-1,
                    assigned=sorted(map(str, self.owned())),
                    duration_ms=_ms(now - began),
                    attempts=attempt,
                    protocol=self._config.partition_assignment_strategy,
                )
                self._emit(ev.METRICS, **self.stats.snapshot(now))
                return True
            if self._stopping.is_set():
                return False
            self._stop_fetching_and_commit()
            self._stopping.wait(self._config.backoff_ms / 1000.0)
        self.stats.rebalance_failed()
        held = self.owned()
        self.status = (
            f"can't rebalance after {retries} retries; owns nothing until the next change"
            if not held
            else f"can't rebalance after {retries} retries; holds {len(held)} owner znodes but fetches nothing"
        )
        self._emit(ev.REBALANCE_FAILED, error=f"{self._consumer_id} {self.status}", attempts=retries)
        self._emit(ev.METRICS, **self.stats.snapshot(self._clock()))
        return False

    def _attempt_safely(self) -> AttemptResult:
        try:
            return self._attempt()
        except ConnectionClosedError:
            return AttemptResult(Outcome.ERROR, "closing")
        except Exception as error:
            # ZooKeeper changes under a reader (a member leaves between the ids listing and
            # the read of its data): 0.8 let it go and retried, and so does this.
            return AttemptResult(Outcome.ERROR, f"{error_name(error)}: {error}")

    def _attempt(self) -> AttemptResult:
        # 1. the cluster (0.8 reads it twice per attempt: getCluster, then getAllBrokersInCluster)
        self._read_brokers()
        my_subscription = self._read_subscription(self._consumer_id)
        brokers = self._read_brokers()
        if not brokers:
            self._watch_broker_ids()
            return AttemptResult(Outcome.SUCCESS, "no brokers registered: waiting for /brokers/ids")

        # 2. stop fetching, commit   3. release everything
        self._stop_fetching_and_commit()
        self._release_all()

        # 4. read the whole group and assign
        decisions = self._assign(my_subscription)

        # 5. committed offsets
        start_offsets = {tp: read_offset(self._zk, self._paths, tp) for tp in sorted(decisions)}
        if self._stopping.is_set():
            return AttemptResult(Outcome.ERROR, "closing")

        # 6. claim
        claim = owners.claim(self._zk, self._paths, decisions)
        if not claim.ok:
            owners.release(self._zk, self._paths, claim.claimed)
            conflicts = ", ".join(f"{tp} held by {holder}" for tp, holder in sorted(claim.conflicts.items()))
            return AttemptResult(Outcome.OWNER_CONFLICT, conflicts)

        # 7. start fetching
        with self._lock:
            self._owned = dict(decisions)
        self._committer.remember(start_offsets)
        assigned = set(decisions)
        self._emit(ev.PARTITIONS_ASSIGNED, partitions=sorted(map(str, assigned)))
        self._listener.on_partitions_assigned(assigned)
        self._fetcher.start(start_offsets, self._config.bootstrap or ",".join(b.address for b in brokers))
        return AttemptResult(Outcome.SUCCESS, f"{len(assigned)} partitions")

    # -- the steps ------------------------------------------------------------------------------------

    def _read_brokers(self) -> list[Broker]:
        brokers = []
        try:
            ids = self._zk.get_children(BROKER_IDS)
        except NoNodeError:
            return []
        for broker_id in ids:
            try:
                data, _ = self._zk.get(f"{BROKER_IDS}/{broker_id}")
            except NoNodeError:
                continue
            value = json.loads(data)
            brokers.append(Broker(int(broker_id), str(value["host"]), int(value["port"])))
        return brokers

    def _watch_broker_ids(self) -> None:
        """zkclient's subscribeChildChanges: a child watch, or an exists-watch while the path is missing."""
        self.watching_brokers = True
        if self._zk.exists(BROKER_IDS, watch=self._watches.brokers) is None:
            return
        try:
            self._zk.get_children(BROKER_IDS, watch=self._watches.brokers)
        except NoNodeError:
            pass  # gone again: the exists-watch covers its return

    def _read_subscription(self, consumer_id: str) -> dict[str, int]:
        data, _ = self._zk.get(self._paths.member(consumer_id))
        return parse_registration(data)

    def _stop_fetching_and_commit(self) -> None:
        positions = self._fetcher.stop()
        if self._config.auto_commit_enable and positions:
            self._committer.commit(positions)

    def _release_all(self) -> None:
        with self._lock:
            held = set(self._owned)
        if held:
            self._emit(ev.PARTITIONS_REVOKED, partitions=sorted(map(str, held)))
            self._listener.on_partitions_revoked(held)
        owners.release(self._zk, self._paths, held)
        with self._lock:
            self._owned = {}

    def _assign(self, my_subscription: Mapping[str, int]) -> dict[TopicPartition, str]:
        member_ids = self._zk.get_children(self._paths.ids, watch=self._watches.ids)
        subscriptions = {cid: self._read_subscription(cid) for cid in member_ids}
        strategy = self._config.partition_assignment_strategy
        if strategy == "range":
            # 0.8's range assigns only this member's topics; others' topics are not read.
            topics = sorted(my_subscription)
            subscriptions = {
                cid: {t: n for t, n in sub.items() if t in my_subscription} for cid, sub in subscriptions.items()
            }
            subscriptions = {cid: sub for cid, sub in subscriptions.items() if sub}
        else:
            topics = sorted({topic for sub in subscriptions.values() for topic in sub})
        partitions_per_topic = {topic: self._read_partition_count(topic, topic in my_subscription) for topic in topics}
        by_thread = legacy_assign(strategy, partitions_per_topic, subscriptions)
        return {tp: thread for thread in self._my_threads for tp in by_thread.get(thread, ())}

    def _read_partition_count(self, topic: str, watch: bool) -> int:
        try:
            data, _ = self._zk.get(topic_path(topic), watch=self._watches.topic if watch else None)
        except NoNodeError:
            return 0
        return len(json.loads(data).get("partitions", {}))


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)
