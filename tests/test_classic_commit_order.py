"""The classic client's commits reach the coordinator in the order they were made.

Kafka 3.7's `ConsumerCoordinator.doCommitOffsetsAsync` -> `sendOffsetCommitRequest` puts an OffsetCommit on
the coordinator's connection when it is issued, and the broker handles one connection's requests in order:
an auto-commit issued before the rebalance's pre-join commit is applied before it. The lab once sent the
pre-join commit past an auto-commit still queued behind a slow one, and the stale auto-commit moved the
stored offset back (4 -> 1 in a 1,000-member run).

Against a scripted coordinator that stores each commit as it takes it off its one connection.
"""

from __future__ import annotations

import threading
import time

import pytest

from modern.common import errors
from tests.test_modern_member import TP, commit_answer, stable_member, wait_for


class SlowCoordinator:
    """One connection to a coordinator that handles its requests one at a time, in arrival order; the
    first commit's answer is held until `release` is set (a slow coordinator)."""

    address = "stub:1"

    def __init__(self) -> None:
        self.stored: list[int] = []          # the stored offset of t-0 after each commit it applied
        self.release = threading.Event()
        self._one_at_a_time = threading.Lock()

    def request(self, request, timeout_s=None):
        with self._one_at_a_time:
            self.stored.append(request.topics[0].partitions[0].committed_offset)
            if len(self.stored) == 1:
                self.release.wait(30)
            return commit_answer(errors.NONE)

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_queued_auto_commit_never_lands_after_the_pre_join_commit_made_later(strategy):
    """Auto-commit A (offset 1) is out and unanswered; auto-commit B copies offset 1 and waits behind it; the
    member consumes up to 4 and a rebalance starts: its pre-join commit P carries 4. B was made before P, so
    the coordinator stores 1, 1, 4, and the stored offset never goes back."""
    coordinator = SlowCoordinator()
    member, hooks = stable_member(coordinator, strategy=strategy)
    position = {TP: 1}
    hooks.positions = lambda: dict(position)
    assert member.maybe_commit_async(dict(position), retry_soon=lambda: None)           # A
    wait_for(lambda: coordinator.stored == [1], "auto-commit A to reach the coordinator")
    assert member.maybe_commit_async(dict(position), retry_soon=lambda: None)           # B, offsets copied now
    position[TP] = 4                                                                     # records 1-3 consumed
    pre_join = threading.Thread(target=member._commit_with_retry, args=(hooks.positions,))   # P (onJoinPrepare)
    pre_join.start()
    time.sleep(0.3)    # room for P to reach the connection before A is answered, as it did in the run
    coordinator.release.set()
    pre_join.join(30)
    wait_for(lambda: len(coordinator.stored) == 3 and not any(
        t.name == "commit-m" for t in threading.enumerate()), "the three commits")
    assert coordinator.stored == [1, 1, 4], "a commit made earlier was applied after a later one"
    assert [call for call in hooks.calls if call[0] == "committed"] == [("committed", errors.name_of(errors.NONE))] * 3
