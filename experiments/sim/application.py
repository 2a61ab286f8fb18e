"""A member host's application in virtual time: poll, handle each record for its service time, commit after each
poll's records, poll again, as `experiments/run/member_host.py` and `experiments/run/handling.py` do it.

Shared with the real hosts: the service times (`experiments.run.handling.ServiceTimes`, seeded with the
scenario's seed and the member's name, so a simulated member draws the real one's times), the chunks of
`records_processed` (at most `CHUNK_S` of handling each) and Spring Kafka's batch acknowledgement: one commit
after each poll's records; a commit refused because the group is rebalancing kept and committed again after
the next poll and before the partitions are revoked. With `commit = "auto"`, the client's own auto-commit instead:
the positions every auto.commit.interval.ms at a poll, without waiting, and synchronously before partitions are
given up (a retriable failure tries again retry.backoff.ms later, the real clients' list of retriable errors).

Modelled: the client's poll. A poll first runs the group's steps that wait for the application's thread (the
member's `poll_group`: a JoinGroup's answer read, a finished join applied, a rejoin prepared), then hands out up
to max.poll.records of what its owned partitions hold past their positions, or waits for data, for news from
the group or for `POLL_WAIT_MS`, whichever comes first. Fetching is one loopback round trip behind the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from experiments.run.handling import CHUNK_S, ServiceTimes
from experiments.scenario.model import WorkloadSpec
from experiments.sim.kernel import Simulation, Timer
from experiments.sim.network import MemberClock
from experiments.sim.records import ACK_MS, Logs, wall_ms
from modern.classic.consumer_coordinator import RETRIABLE_COMMIT_ERRORS as CLIENT_RETRIABLE_COMMIT_ERRORS
from modern.common import errors
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition

POLL_WAIT_MS = 500.0   # experiments.run.member_host.POLL_WAIT_S
# A failed auto-commit tried again after retry.backoff.ms: the real client's list
RETRIABLE_COMMIT_ERRORS = frozenset(errors.name_of(error) for error in CLIENT_RETRIABLE_COMMIT_ERRORS)
CHUNK_MS = CHUNK_S * 1000


class GroupClient(Protocol):
    """What the application needs of its member's client."""

    name: str
    recorder: EventRecorder
    owned: frozenset[TopicPartition]
    positions: dict[TopicPartition, int]   # next offset to fetch, per owned partition whose offset is known
    generation: int | None                 # None: a generation without one (0.8)
    may_commit: bool                       # a commit goes out (else it is refused at once)
    may_auto_commit: bool                  # an auto-commit goes out now (else it waits for a later poll)
    auto_commits_at_once: int | None       # auto-commits in flight at once (None: any, in the commit line's order)
    clock: MemberClock                     # the member's process: the application's timers pause with it

    def poll_group(self, then: Callable[[], None]) -> None: ...      # the group's steps due on this thread
    def idle_wait_ms(self) -> float | None: ...   # a poll with nothing to fetch waits at most this (None: POLL_WAIT_MS)
    def commit(self, offsets: Mapping[TopicPartition, int], then: Callable[[str | None], None]) -> None: ...


class Application:
    """One member's polling thread."""

    def __init__(self, sim: Simulation, client: GroupClient, logs: Logs, workload: WorkloadSpec, *, seed: int,
                 max_poll_records: int, auto_commit_interval_ms: int = 5_000, retry_backoff_ms: int = 100) -> None:
        self.sim, self.client, self.logs, self.workload = sim, client, logs, workload
        self.times = ServiceTimes(workload, seed, client.name)
        self.max_poll_records = max_poll_records
        self.auto_commit = workload.commit == "auto"
        self.auto_commit_interval_ms, self.retry_backoff_ms = auto_commit_interval_ms, retry_backoff_ms
        self.next_auto_commit_ms = 0.0
        self.auto_commits_out = 0
        self.kept: dict[TopicPartition, int] = {}     # Spring's commitsDuringRebalance
        self.running = False
        self.handling = False
        self._waiting: Timer | None = None
        self._cursor = 0                              # the partition the next poll's hand-out starts at
        self.on_batch_done: Callable[[], None] | None = None   # a leave waits for the batch under way
        # Whether the member's fetcher can fetch a partition now (None: always; a dead leader makes it wait,
        # experiments.sim.brokers.DataPath)
        self.readable: Callable[[TopicPartition], bool] | None = None

    def start(self) -> None:
        self.running = True
        self.next_auto_commit_ms = self.sim.now_ms + self.auto_commit_interval_ms
        self.client.clock.after(0, self.poll)

    def rebalanced(self) -> None:
        """A join completed: the auto-commit interval starts again from now (Kafka's onJoinComplete)."""
        self.next_auto_commit_ms = self.sim.now_ms + self.auto_commit_interval_ms

    def stop(self) -> None:
        """A crash: the thread is gone, whatever it was doing."""
        self.running = False
        self._cancel_wait()

    def wake(self) -> None:
        """The group has news for this thread: a poll waiting for data returns now (Kafka's wakeup of the fetch)."""
        if self._waiting is not None:
            self._cancel_wait()
            self.client.clock.after(0, self.poll)

    # -- the loop -------------------------------------------------------------------------------------

    def poll(self) -> None:
        if not self.running:
            return
        self.client.poll_group(self._fetch)

    def _fetch(self) -> None:
        if not self.running:
            return
        if self.kept and self.client.may_commit:   # Spring's checkRebalanceCommits, right after each poll
            offsets = {tp: offset for tp, offset in self.kept.items() if tp in self.client.owned}
            self.kept = {}     # those of partitions no longer assigned are dropped, as Spring drops them
            if offsets:
                self._commit(offsets, then=self._fetch)
                return
        if self.auto_commit:
            self._maybe_auto_commit()
        records = self._hand_out()
        if not records:
            self._wait_for_data()
            return
        self._handle(records)

    def _hand_out(self) -> list[tuple[TopicPartition, int]]:
        """Up to max.poll.records (tp, offset) pairs past the positions, a partition's in a row, the partitions
        taken in turn from where the last hand-out stopped; positions advance; one records_consumed a partition."""
        available_before = self.sim.now_ms - ACK_MS
        owned = sorted(self.client.positions)
        if not owned:
            return []
        start = self._cursor % len(owned)
        taken: list[tuple[TopicPartition, int]] = []
        for tp in owned[start:] + owned[:start]:
            room = self.max_poll_records - len(taken)
            if room <= 0:
                break
            if self.readable is not None and not self.readable(tp):
                continue
            log, position = self.logs.partitions[tp], self.client.positions[tp]
            end = position
            while end < log.end and end - position < room and log.produced_ms[end] <= available_before:
                end += 1
            if end == position:
                continue
            generation = {} if self.client.generation is None else {"generation": self.client.generation}   # 0.8: none
            self.client.recorder.emit(ev.RECORDS_CONSUMED, self.client.name, topic=tp.topic, partition=tp.partition,
                                      first_offset=position, last_offset=end - 1, count=end - position,
                                      produce_ts_ms=[wall_ms(t) for t in log.produced_ms[position:end]], **generation)
            taken += [(tp, offset) for offset in range(position, end)]
            self.client.positions[tp] = end
            self._cursor = owned.index(tp) + 1
        return taken

    def _wait_for_data(self) -> None:
        owned = frozenset(self.client.positions)
        wait_ms = POLL_WAIT_MS
        if not owned and (limit := self.client.idle_wait_ms()):
            wait_ms = min(wait_ms, limit)
        self._waiting = self.client.clock.after(wait_ms, self._wait_over)
        self.logs.wait_for_data(self, owned, lambda: self.client.clock.after(ACK_MS, self.wake))

    def _wait_over(self) -> None:
        self._waiting = None
        self.logs.stop_waiting(self)
        self._after_batch()

    def _cancel_wait(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self.logs.stop_waiting(self)

    # -- handling -------------------------------------------------------------------------------------

    def _handle(self, records: list[tuple[TopicPartition, int]]) -> None:
        self.handling = True
        ends: list[tuple[TopicPartition, int, float]] = []
        at = self.sim.now_ms
        for tp, offset in records:
            service_ms = self.times.next_s() * 1000
            if service_ms:
                at += service_ms
                ends.append((tp, offset, at))
        chunks = _chunks(ends)
        last = chunks.pop() if chunks else None   # it ends when the batch does: one timer for both
        for chunk in chunks:
            self.client.clock.at(chunk[-1][2], lambda chunk=chunk: self._report(chunk))
        self.client.clock.at(at, lambda: self._handled(records, last))

    def _report(self, chunk: list[tuple[TopicPartition, int, float]]) -> None:
        if not self.running:
            return
        tp = chunk[0][0]
        log = self.logs.partitions[tp]
        self.client.recorder.emit(ev.RECORDS_PROCESSED, self.client.name, topic=tp.topic, partition=tp.partition,
                                  first_offset=chunk[0][1], last_offset=chunk[-1][1], count=len(chunk),
                                  produce_ts_ms=[wall_ms(log.produced_ms[offset]) for _, offset, _ in chunk],
                                  processed_ts_ms=[wall_ms(end) for _, _, end in chunk])

    def _handled(self, records: list[tuple[TopicPartition, int]],
                 last_chunk: list[tuple[TopicPartition, int, float]] | None) -> None:
        if last_chunk is not None:
            self._report(last_chunk)
        if not self.running:
            return
        self.handling = False
        if self.workload.commit != "batch":
            self._after_batch()
            return
        batch: dict[TopicPartition, int] = {}
        for tp, offset in records:
            batch[tp] = offset + 1
        self._commit(batch, then=self._after_batch)

    def _after_batch(self) -> None:
        if self.on_batch_done is not None:
            done, self.on_batch_done = self.on_batch_done, None
            done()
            return
        self.poll()

    def _commit(self, offsets: dict[TopicPartition, int], *, then: Callable[[], None]) -> None:
        """A commitSync: refused while the group rebalances (kept, as Spring keeps it), else sent and waited for."""
        def answered(error: str | None) -> None:
            if error == "REBALANCE_IN_PROGRESS" and not self.auto_commit:
                self.kept.update(offsets)
            then()
        self.client.commit(offsets, answered)

    # -- the client's auto-commit (workload.commit = "auto") ----------------------------------------

    def positions(self) -> dict[TopicPartition, int]:
        """What poll() has handed out of the owned partitions: the offsets an auto-commit commits."""
        return {tp: offset for tp, offset in self.client.positions.items() if tp in self.client.owned}

    def _maybe_auto_commit(self) -> None:
        """Kafka's maybeAutoCommitOffsetsAsync at each poll: when the interval is up, the positions go out without
        the poll waiting; a member that may not send one now (coordinator unknown, not stable, a rejoin pending;
        KIP-848: one still in flight) tries again at its next poll; after a retriable failure it tries again
        retry.backoff.ms later."""
        if self.sim.now_ms < self.next_auto_commit_ms:
            return
        offsets = self.positions()
        at_once = self.client.auto_commits_at_once
        if not offsets or not self.client.may_auto_commit or (at_once is not None and self.auto_commits_out >= at_once):
            return
        self.next_auto_commit_ms = self.sim.now_ms + self.auto_commit_interval_ms
        self.auto_commits_out += 1

        def answered(error: str | None) -> None:
            self.auto_commits_out -= 1
            if error in RETRIABLE_COMMIT_ERRORS:
                self.next_auto_commit_ms = self.sim.now_ms + self.retry_backoff_ms
        self.client.commit(offsets, answered)

    def commit_before_giving_up(self, revoking: set[TopicPartition], then: Callable[[], None]) -> None:
        """Before a classic rejoin (Kafka's onJoinPrepare) or a KIP-848 reconciliation: the auto-commit of every
        position, synchronously (maybeAutoCommitOffsetsSync, maybeAutoCommitSyncBeforeRevocation); with Spring's
        batch acknowledgement, what it kept for the partitions about to be revoked."""
        if self.auto_commit:
            offsets = self.positions()
            if offsets:
                self._commit(offsets, then=then)
            else:
                then()
        elif revoking:
            self.commit_kept_before_revoking(revoking, then)
        else:
            then()

    def commit_before_closing(self, then: Callable[[], None]) -> None:
        """A clean close: the auto-commit, synchronously, or what Spring kept for the partitions still owned."""
        self.commit_before_giving_up(set(self.client.owned), then)

    def commit_kept_before_revoking(self, revoked: set[TopicPartition], then: Callable[[], None]) -> None:
        """Spring's onPartitionsRevoked: what was kept, for the partitions still assigned (the revoked included),
        committed before they go; what was kept for partitions already gone is dropped."""
        still = {tp: offset for tp, offset in self.kept.items() if tp in self.client.owned or tp in revoked}
        self.kept = {}
        if not still:
            then()
            return
        self._commit(still, then=then)


def record_commit(client: GroupClient, offsets: Mapping[TopicPartition, int], generation: int,
                  error: str | None) -> None:
    """A commit's outcome as the real members write it: offsets_committed, or commit_failed with the error."""
    rendered = {str(tp): offset for tp, offset in sorted(offsets.items())}
    if error is None:
        client.recorder.emit(ev.OFFSETS_COMMITTED, client.name, offsets=rendered, generation=generation)
    else:
        client.recorder.emit(ev.COMMIT_FAILED, client.name, offsets=rendered, error=error, generation=generation)


def _chunks(ends: list[tuple[TopicPartition, int, float]]) -> list[list[tuple[TopicPartition, int, float]]]:
    """Handled records as `records_processed` reports them: consecutive offsets of one partition whose handling
    ends within CHUNK_MS of the first's."""
    chunks: list[list[tuple[TopicPartition, int, float]]] = []
    for item in ends:
        last = chunks[-1][-1] if chunks else None
        if last is not None and last[0] == item[0] and last[1] + 1 == item[1] and item[2] - chunks[-1][0][2] <= CHUNK_MS:
            chunks[-1].append(item)
        else:
            chunks.append([item])
    return chunks
