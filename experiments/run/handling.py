"""What a member host's application does with the records a poll returned: it handles them one at a time in
the polling thread, each for its service time, then (with commit = "batch") commits, and only then polls
again, as a Kafka application's loop does (Spring Kafka's default acknowledgement commits once a poll's
records are handled).

A service time is waited, not computed: the thread sleeps until the record's deadline, and deadlines add
up from the batch's start, so a late wake-up does not push the records after it back. A thread that wakes
more than `LATE_S` behind its deadline (the process was stopped, or the member paused) starts the next
record afresh: a call under way goes on outside the member (its deadline kept running), the calls after
it have not started yet. The sleep ends at once when the member is crashed. A paused member (emulated) stops
handling where it is until resumed, as a stopped process would; the pause is acknowledged without waiting
for the batch, since nothing is held while a service time is waited out.

Handled records are reported as `records_processed` events, one per run of consecutive offsets of one
partition whose handling is planned to end within `CHUNK_S` of the first's (as scheduled: a first record that
ends late on a busy host makes no room for more), each record with its own end time.

With commit = "batch" the commits are Spring Kafka's listener container's (`BatchCommits`): one after each
poll's records, and a commit the group refused while rebalancing kept and committed again after the next polls
and before partitions are revoked.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

from experiments.scenario.model import WorkloadSpec
from modern.common import errors
from rebalance import events as ev
from rebalance.member import RebalanceListener
from rebalance.record_value import produce_ts_ms
from rebalance.types import Record, TopicPartition

CHUNK_S = 0.1     # a records_processed event covers at most this much handling
LATE_S = 0.1      # a wake-up later than this behind its deadline starts the next record afresh
HANDLING = ("running", "leaving")   # a leaving member finishes its batch first, as an application's shutdown does


class ServiceTimes:
    """One member's service times, drawn from a generator seeded with the scenario's seed and the member's
    name: the same run draws the same times."""

    def __init__(self, spec: WorkloadSpec, seed: int, member: str) -> None:
        self.spec = spec
        self.rng = random.Random(f"{seed}/{member}")
        self.mu = math.log(spec.service_ms) if spec.service == "lognormal" else 0.0

    def next_s(self) -> float:
        spec = self.spec
        if spec.service == "none":
            return 0.0
        if spec.hang_fraction and self.rng.random() < spec.hang_fraction:
            return self.rng.uniform(*spec.hang_ms) / 1000
        if spec.service == "fixed":
            return spec.service_ms / 1000
        return self.rng.lognormvariate(self.mu, spec.sigma) / 1000


class _Chunk:
    """Handled records of one partition not reported yet."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.ends_ms: list[int] = []
        self.first_planned_end = 0.0

    def fits(self, record: Record) -> bool:
        if not self.records:
            return True
        last = self.records[-1]
        return (last.topic, last.partition, last.offset + 1) == (record.topic, record.partition, record.offset)

    def add(self, record: Record, planned_end: float) -> None:
        """`planned_end`: when the schedule meant the record's handling to end (the chunk's length is planned
        handling: a first record that ends late on a busy host does not make room for more)."""
        if not self.records:
            self.first_planned_end = planned_end
        self.records.append(record)
        self.ends_ms.append(time.time_ns() // 1_000_000)

    def fields(self) -> dict:
        first, last = self.records[0], self.records[-1]
        return dict(topic=first.topic, partition=first.partition, first_offset=first.offset, last_offset=last.offset,
                    count=len(self.records), produce_ts_ms=[produce_ts_ms(r.value) for r in self.records],
                    processed_ts_ms=list(self.ends_ms))


class Handler:
    """Handles each poll's records for the members of one host. `slot` is the host's view of a member: its
    `name`, `member` (the current instance), `state`, `lock` (held while the member acts: a poll, a commit,
    an event), `wake` (set on every change of state) and `gate` (its event recorder)."""

    def __init__(self, spec: WorkloadSpec, seed: int, stop: threading.Event,
                 log: Callable[[str], None] = print) -> None:
        self.spec = spec
        self.seed = seed
        self.stop = stop
        self.log = log
        self._times: dict[str, ServiceTimes] = {}
        self._commits: dict[str, BatchCommits] = {}

    def handle(self, slot: Any, group_member: Any, records: Sequence[Record]) -> bool:
        """Handle one poll's records; False when the member was crashed or replaced meanwhile."""
        times = self._times.setdefault(slot.name, ServiceTimes(self.spec, self.seed, slot.name))
        commits = self._batch_commits(slot, group_member)
        if commits is not None and commits.kept and not self._act(slot, group_member, commits.commit_kept):
            return False   # Spring tries what it kept right after each poll (checkRebalanceCommits)
        chunk = _Chunk()
        deadline = time.monotonic()
        for record in records:
            service = times.next_s()
            if not service:
                continue
            now = time.monotonic()
            deadline = (now if now - deadline > LATE_S else deadline) + service
            if chunk.records and (not chunk.fits(record) or deadline - chunk.first_planned_end > CHUNK_S):
                if not self._report(slot, group_member, chunk):
                    return False
                chunk = _Chunk()
            if not self._wait(slot, group_member, deadline):
                return False
            chunk.add(record, deadline)
        if chunk.records and not self._report(slot, group_member, chunk):
            return False
        if commits is not None and records:
            return self._act(slot, group_member, lambda: commits.commit_batch(records))
        return True

    def _batch_commits(self, slot: Any, group_member: Any) -> BatchCommits | None:
        if self.spec.commit != "batch":
            return None
        commits = self._commits.get(slot.name)
        if commits is None or commits.member is not group_member:   # a member started again is a new consumer
            commits = self._commits[slot.name] = BatchCommits(group_member, self.log)
        return commits

    def _gone(self, slot: Any, group_member: Any) -> bool:
        return slot.member is not group_member or slot.state not in (*HANDLING, "paused")

    def _wait(self, slot: Any, group_member: Any, deadline: float) -> bool:
        """Sleep until `deadline` (monotonic), through any pause; False as soon as the member is gone."""
        while True:
            slot.wake.clear()    # before the checks: a change after them still ends the sleep below
            if self._gone(slot, group_member):
                return False
            if slot.state == "paused" and not self.stop.is_set():
                slot.wake.wait(1.0)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            slot.wake.wait(remaining)

    def _act(self, slot: Any, group_member: Any, action: Callable[[], None]) -> bool:
        """Run `action` as the member (under its lock, never while it is paused); False when it is gone."""
        while self._wait(slot, group_member, 0.0):
            with slot.lock:
                if slot.member is group_member and slot.state in HANDLING:
                    action()
                    return True
            if self.stop.is_set():
                return False    # paused while its host stops: it writes nothing more
        return False

    def _report(self, slot: Any, group_member: Any, chunk: _Chunk) -> bool:
        return self._act(slot, group_member,
                         lambda: slot.gate.emit(ev.RECORDS_PROCESSED, group_member.member_id, **chunk.fields()))


class BatchCommits:
    """One member's commits as Spring Kafka's listener container makes them with AckMode BATCH
    (`KafkaMessageListenerContainer`): once a poll's records are handled, a commit (here of the member's
    positions). A commit refused because the group is rebalancing (`RebalanceInProgressException`: the classic
    client fails it while it rejoins) is not lost: its offsets, the batch's, are kept (`commitsDuringRebalance`)
    and committed again for the partitions still assigned, after every poll (`checkRebalanceCommits`, Spring 2.6+)
    and before partitions are revoked or lost (its rebalance listener's `onPartitionsRevoked`, 2.9.4 / 3.0.1+);
    those of partitions no longer assigned are dropped with a warning. A later commit of a partition supersedes
    what was kept for it."""

    def __init__(self, member: Any, log: Callable[[str], None]) -> None:
        self.member = member
        self.log = log
        self.kept: dict[TopicPartition, int] = {}
        listener = getattr(member, "listener", None)
        if listener is not None:   # the container's own rebalance listener, around the application's
            member.listener = _CommitKeptBeforeRevoking(listener, self)

    def commit_batch(self, records: Sequence[Record]) -> None:
        batch = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
        if self._commit(None, batch):
            for tp in batch:
                self.kept.pop(tp, None)

    def commit_kept(self, revoked: Set[TopicPartition] = frozenset()) -> None:
        """checkRebalanceCommits: what was kept, for the partitions still assigned (`revoked` ones included:
        Spring commits them before it lets them go)."""
        if not self.kept:
            return
        assigned = self.member.assignment() | set(revoked)
        gone = sorted(str(tp) for tp in self.kept if tp not in assigned)
        if gone:
            self.log(f"{self.member.member_id}: these offsets could not be committed; partition(s) lost during "
                     f"rebalance: {', '.join(gone)}")
        commits = {tp: offset for tp, offset in self.kept.items() if tp in assigned}
        self.kept.clear()
        if commits:
            self._commit(commits, commits)   # refused again: kept again

    def _commit(self, offsets: Mapping[TopicPartition, int] | None, keep: Mapping[TopicPartition, int]) -> bool:
        """A commitSync (None: the member's positions); True when it went through. Refused while the group
        rebalances: `keep` is kept (the client already logged commit_failed); any other failure is only logged,
        and the application goes on polling."""
        try:
            self.member.commit(offsets)
        except Exception as error:
            if getattr(error, "error", None) is errors.REBALANCE_IN_PROGRESS:
                self.kept.update(keep)
            else:
                self.log(f"{self.member.member_id}: commit failed: {type(error).__name__}: {error}")
            return False
        return True


class _CommitKeptBeforeRevoking(RebalanceListener):
    """The container's rebalance listener: the application's first, then what was kept is committed while the
    partitions are still ours (Spring's onPartitionsRevoked; its onPartitionsLost ends in it too). A failure
    there is logged, never raised into the member's poll."""

    def __init__(self, application: RebalanceListener, commits: BatchCommits) -> None:
        self.application = application
        self.commits = commits

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.application.on_partitions_assigned(partitions)

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.application.on_partitions_revoked(partitions)
        self._commit_kept(partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.application.on_partitions_lost(partitions)
        self._commit_kept(partitions)

    def _commit_kept(self, partitions: set[TopicPartition]) -> None:
        try:
            self.commits.commit_kept(partitions)
        except Exception as error:
            self.commits.log(f"{self.commits.member.member_id}: commit failed after revocation: "
                             f"{type(error).__name__}: {error}")
