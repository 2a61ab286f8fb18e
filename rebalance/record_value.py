"""The value of a record produced by the lab's workload: JSON {"seq": N, "ts_ms": produce wall ms}.

The producer writes it and every backend reads the produce time back, so that the checker can
measure produce-to-process latency the same way for each.
"""

from __future__ import annotations

import json


def encode_value(seq: int, ts_ms: int) -> bytes:
    return json.dumps({"seq": seq, "ts_ms": ts_ms}, separators=(",", ":")).encode()


def produce_ts_ms(value: bytes | None) -> int | None:
    """The produce time carried by a workload record; None for any other value."""
    if not value:
        return None
    try:
        return int(json.loads(value)["ts_ms"])
    except (ValueError, KeyError, TypeError):
        return None
