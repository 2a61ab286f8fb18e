"""Kafka's consumer rebalance metrics under their Kafka names, shared by every backend.

The clock is the caller's: every method that needs the time takes `now_s` (monotonic
seconds), so the numbers are as testable as the rest of the logic. Thread-safe, because
the classic client records from its join worker while the polling thread takes snapshots.
"""

from __future__ import annotations

import threading

NAN = float("nan")


def _avg(values: list[float]) -> float:
    return sum(values) / len(values) if values else NAN


class RebalanceMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rebalance_ms: list[float] = []
        self._join_ms: list[float] = []
        self._sync_ms: list[float] = []
        self._failed = 0
        self._last_rebalance_end_s: float | None = None

    def rebalance_completed(self, duration_ms: float, now_s: float) -> None:
        with self._lock:
            self._rebalance_ms.append(duration_ms)
            self._last_rebalance_end_s = now_s

    def rebalance_failed(self) -> None:
        with self._lock:
            self._failed += 1

    def join_completed(self, duration_ms: float) -> None:
        with self._lock:
            self._join_ms.append(duration_ms)

    def sync_completed(self, duration_ms: float) -> None:
        with self._lock:
            self._sync_ms.append(duration_ms)

    def snapshot(self, now_s: float) -> dict[str, float]:
        with self._lock:
            ago = -1.0 if self._last_rebalance_end_s is None else now_s - self._last_rebalance_end_s
            return {
                "rebalance-latency-avg": _avg(self._rebalance_ms),
                "rebalance-latency-max": max(self._rebalance_ms, default=NAN),
                "rebalance-latency-total": sum(self._rebalance_ms),
                "rebalance-total": len(self._rebalance_ms),
                "failed-rebalance-total": self._failed,
                "join-time-avg": _avg(self._join_ms),
                "join-time-max": max(self._join_ms, default=NAN),
                "sync-time-avg": _avg(self._sync_ms),
                "sync-time-max": max(self._sync_ms, default=NAN),
                "last-rebalance-seconds-ago": ago,
            }
