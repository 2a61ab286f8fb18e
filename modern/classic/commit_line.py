"""The order commits reach the coordinator in: the order they were made.

Kafka's consumer puts an OffsetCommit on the coordinator's connection the moment it is issued
(`ConsumerCoordinator.doCommitOffsetsAsync` -> `sendOffsetCommitRequest`, and `commitOffsetsSync` alike), and
the broker handles one connection's requests in order, so commits are applied in the order they were made.
The lab's client sends a commit from whichever thread made it, over a blocking connection, so it keeps that
order here instead: every commit takes its place in the line when it is made, auto-commit, pre-join commit
or the application's, and goes out once every commit made before it is done. Without the line, a pre-join
commit could overtake an auto-commit queued behind a slow one, and the stale auto-commit, applied last,
moved the stored offset back.
"""

from __future__ import annotations

import threading
import time
from collections import deque


class CommitLine:
    """Places in line, oldest first. A place is taken when the commit is made and left when it is done
    (answered, failed, or given up), whichever thread does either."""

    def __init__(self) -> None:
        self._places: deque[object] = deque()
        self._turn = threading.Condition()

    def take_place(self) -> object:
        place = object()
        with self._turn:
            self._places.append(place)
        return place

    def wait_turn(self, place: object, deadline: float) -> bool:
        """Wait until every commit made before `place` is done; False when `deadline` (monotonic) came
        first (the commit then never goes out: Kafka's unsent requests expire alike)."""
        with self._turn:
            return self._turn.wait_for(lambda: self._places[0] is place,
                                       timeout=max(deadline - time.monotonic(), 0))

    def leave(self, place: object) -> None:
        with self._turn:
            self._places.remove(place)
            self._turn.notify_all()

    def __len__(self) -> int:
        with self._turn:
            return len(self._places)
