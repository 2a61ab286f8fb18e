"""Deadlines by key, with the earliest one at hand: a dict whose values are deadlines (or tuples that start
with one), and a heap beside it whose stale entries are dropped when they reach the top. A group of ten
thousand members moves a session deadline on every heartbeat; finding the next one must not read them all."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class Deadlines(dict, Generic[V]):
    """A dict of key -> deadline (an int, or a tuple whose first item is the deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[int, str, object]] = []

    def __setitem__(self, key: str, value: V) -> None:
        super().__setitem__(key, value)
        heapq.heappush(self._heap, (_deadline(value), key, value))

    def earliest(self) -> int | None:
        """The earliest deadline held, or None."""
        heap = self._heap
        while heap:
            deadline, key, value = heap[0]
            if key in self and self[key] == value:
                return deadline
            heapq.heappop(heap)   # moved or removed since it was pushed
        return None

    def due(self, now_ms: int) -> Iterator[tuple[str, V]]:
        """The entries due at `now_ms`, by key (a snapshot: the caller may change the map)."""
        return iter(sorted((key, value) for key, value in self.items() if _deadline(value) <= now_ms))


def _deadline(value: object) -> int:
    return value[0] if isinstance(value, tuple) else value  # type: ignore[index,return-value]
