"""Finding the group coordinator, once per client, with Kafka's backoff.

Kafka's clients look the coordinator up through one shared request: the classic consumer's
`AbstractCoordinator.lookupCoordinator` hands every caller the FindCoordinator future already in
flight, and KIP-848's `CoordinatorRequestManager` sends at most one at a time. Failed lookups back off
exponentially, from `retry.backoff.ms` (100) doubling to `retry.backoff.max.ms` (1,000), each wait
drawn within +-20 % (`ExponentialBackoff` with Kafka's base 2 and jitter 0.2).

`ExponentialBackoff` is arithmetic only (the random draw is passed in); `CoordinatorLookup` is the one
loop a client's threads share: whoever needs the coordinator while another thread is looking it up
waits for that lookup and uses its answer, so no thread sends a FindCoordinator of its own nor
replaces the connections another thread is using.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.metadata import FindCoordinatorRequest

from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.client.traced_requests import TracedRequests
from modern.common import errors
from modern.common.errors import GroupError

FIND_VERSION = 3
BACKOFF_MULTIPLIER = 2     # Kafka's CommonClientConfigs.RETRY_BACKOFF_EXP_BASE
BACKOFF_JITTER = 0.2       # Kafka's CommonClientConfigs.RETRY_BACKOFF_JITTER


@dataclass(frozen=True)
class ExponentialBackoff:
    """The wait before retry number `attempts` (0 for the first retry): initial * 2^attempts, times a
    factor drawn in [1 - jitter, 1 + jitter), never above `max_ms`."""

    initial_ms: int
    max_ms: int
    multiplier: int = BACKOFF_MULTIPLIER
    jitter: float = BACKOFF_JITTER

    def backoff_ms(self, attempts: int, draw: float) -> float:
        """`draw` is a uniform number in [0, 1) (the caller's random source)."""
        initial = min(self.initial_ms, self.max_ms)
        if self.max_ms <= initial:
            return float(initial)
        exponent = min(attempts, math.log(self.max_ms / max(initial, 1)) / math.log(self.multiplier))
        factor = 1.0 if self.jitter <= 0 else 1 - self.jitter + 2 * self.jitter * draw
        return min(factor * initial * self.multiplier ** exponent, float(self.max_ms))


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


class CoordinatorLookup:
    """One FindCoordinator loop for all the threads of a client."""

    def __init__(self, *, group: str, bootstrap: tuple[tuple[str, int], ...], client_id: str, request_timeout_ms: int,
                 backoff: ExponentialBackoff, requests: TracedRequests, stopping: threading.Event,
                 rng: Callable[[], float] | None = None,
                 connect: Callable[[str, int], BrokerConnection] | None = None) -> None:
        self.group = group
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.backoff = backoff
        self.requests = requests
        self.stopping = stopping
        self._draw = rng or random.Random().random
        self._connect = connect or self._connect_to
        self._lock = threading.Lock()
        self._bootstrap_index = 0
        self.lookups = 0          # FindCoordinator requests sent

    def ensure(self, *, known: Callable[[], bool], install: Callable[[Coordinator], None]) -> None:
        """Look the coordinator up unless `known()`; `install` takes the answer before any other thread
        may look (so a thread that waited on this lookup finds it known and sends nothing).
        Raises ConnectionFailed when no broker named one within request.timeout.ms."""
        with self._lock:
            if known():
                return
            install(self._find())

    def _find(self) -> Coordinator:
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        last_error: Exception | None = None
        attempts = 0
        while not self.stopping.is_set() and time.monotonic() < deadline:
            host, port = self.bootstrap[self._bootstrap_index % len(self.bootstrap)]
            self._bootstrap_index += 1
            probe = self._connect(host, port)
            self.lookups += 1
            try:
                answer = self.requests.send(probe, "FindCoordinator", FindCoordinatorRequest[FIND_VERSION](
                    key=self.group, key_type=0))
                error = errors.for_code(answer.error_code)
                if error is errors.NONE:
                    return Coordinator(answer.node_id, answer.host, answer.port)
                last_error = GroupError(error, "FindCoordinator")
            except ConnectionFailed as failure:
                last_error = failure
            finally:
                probe.close()
            self.stopping.wait(self.backoff.backoff_ms(attempts, self._draw()) / 1000)
            attempts += 1
        raise ConnectionFailed(f"no coordinator found for group {self.group!r}: {last_error}")

    def _connect_to(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.client_id, timeout_s=self.request_timeout_ms / 1000)
