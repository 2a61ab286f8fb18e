"""Helpers shared by the tests that run classic-protocol members against real brokers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from kafka import KafkaProducer

WAIT_S = 60


def produce(bootstrap: str, topic: str, count: int, *, partitions: int, start: int = 0) -> None:
    """`count` workload records (seq, produce time), spread round-robin over the partitions."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for seq in range(start, start + count):
            value = json.dumps({"seq": seq, "ts_ms": int(time.time() * 1000)}).encode()
            producer.send(topic, value, partition=seq % partitions)
        producer.flush(30)
    finally:
        producer.close()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # re-check: the condition is observed state, not a guess of time
