"""The member host's application commits each poll's batch as Spring Kafka's listener container does
(`KafkaMessageListenerContainer`, AckMode BATCH): a commit refused because the group is rebalancing
(`RebalanceInProgressException`) is kept (`commitsDuringRebalance`) and committed again, for the partitions
still assigned, after every poll (`checkRebalanceCommits`, 2.6+) and when partitions are revoked, before they
go (2.9.4 / 3.0.1+). Before, the refusal was only logged, the position was dropped at revocation and the new
owner handled those records again.

Against a stand-in member that refuses commits while it rebalances, as the classic client does.
"""

from __future__ import annotations

import threading

from experiments.run.handling import Handler
from experiments.scenario.model import WorkloadSpec
from modern.client.fetched import CommitFailedError
from modern.common import errors
from rebalance.member import RebalanceListener
from rebalance.types import Record, TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Rebalancing:
    """A member owning t-0 and t-1 that refuses every commit while `rebalancing` (REBALANCE_IN_PROGRESS, as the
    classic client fails a commit locally while it joins) and tells its listener of a revocation."""

    member_id = "m"

    def __init__(self) -> None:
        self.listener = RebalanceListener()
        self.owned = {T0, T1}
        self.rebalancing = False
        self.commits: list[tuple[str, object]] = []

    def commit(self, offsets=None) -> None:
        asked = "positions" if offsets is None else dict(offsets)
        if self.rebalancing:
            self.commits.append(("refused", asked))
            raise CommitFailedError(errors.REBALANCE_IN_PROGRESS, "OffsetCommit")
        self.commits.append(("committed", asked))

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def revoke(self, partitions: set[TopicPartition]) -> None:
        self.owned -= partitions
        self.listener.on_partitions_revoked(set(partitions))


class Slot:
    """The member host's view of one member, as the Handler reads it."""

    def __init__(self, member: Rebalancing) -> None:
        self.name = member.member_id
        self.member = member
        self.state = "running"
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.gate = None


def records(tp: TopicPartition, first: int, last: int) -> list[Record]:
    return [Record(topic=tp.topic, partition=tp.partition, offset=offset, key=None, value=b"{}", timestamp_ms=0)
            for offset in range(first, last + 1)]


def batch_handler(logged: list[str]) -> Handler:
    return Handler(WorkloadSpec(commit="batch"), seed=1, stop=threading.Event(), log=logged.append)


def test_a_batch_commit_refused_while_rebalancing_is_committed_again_when_partitions_are_revoked():
    member, logged = Rebalancing(), []
    slot, handler = Slot(member), batch_handler(logged)
    member.rebalancing = True                              # the member rejoins; its poll still gave a batch
    assert handler.handle(slot, member, records(T0, 0, 2) + records(T1, 5, 6))
    assert member.commits == [("refused", "positions")]
    member.rebalancing = False                             # the join is done: t-1 goes to another member
    member.revoke({T1})
    assert member.commits[-1] == ("committed", {T0: 3, T1: 7}), member.commits   # before t-1 went
    assert not logged, logged                              # a refusal while rebalancing is no failure


def test_a_kept_commit_is_tried_after_every_poll_for_the_partitions_still_assigned():
    member, logged = Rebalancing(), []
    slot, handler = Slot(member), batch_handler(logged)
    member.rebalancing = True
    assert handler.handle(slot, member, records(T0, 0, 2) + records(T1, 5, 6))
    assert handler.handle(slot, member, [])                # the next poll, still rebalancing: kept again
    assert member.commits == [("refused", "positions"), ("refused", {T0: 3, T1: 7})]
    member.rebalancing = False
    member.owned = {T0}                                    # t-1 was lost meanwhile (no revocation)
    assert handler.handle(slot, member, [])
    assert member.commits[-1] == ("committed", {T0: 3})
    assert any("t-1" in line for line in logged), logged   # Spring warns of what it could not commit
    assert handler.handle(slot, member, [])
    assert len(member.commits) == 3                        # nothing kept any more


def test_a_later_batch_commit_supersedes_what_was_kept_for_its_partitions():
    member, logged = Rebalancing(), []
    slot, handler = Slot(member), batch_handler(logged)
    member.rebalancing = True
    assert handler.handle(slot, member, records(T0, 0, 2))
    member.rebalancing = False
    assert handler.handle(slot, member, records(T0, 3, 4))  # the after-poll commit, then this batch's
    assert member.commits[1:] == [("committed", {T0: 3}), ("committed", "positions")]
    member.revoke({T0})
    assert len(member.commits) == 3                         # nothing kept to commit at the revocation
