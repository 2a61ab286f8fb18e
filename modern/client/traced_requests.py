"""Requests to the coordinator, each recorded as a `coordination_request` event (op, latency, error)."""

from __future__ import annotations

import time
from typing import Any

from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.common import errors
from rebalance import events as ev
from rebalance.events import EventRecorder


class TracedRequests:
    def __init__(self, recorder: EventRecorder, *, member_name: str, group: str) -> None:
        self.recorder = recorder
        self.member_name = member_name
        self.group = group
        self.sent: dict[str, int] = {}   # requests per API name

    def send(self, connection: BrokerConnection, op: str, request: Any, *, timeout_s: float | None = None,
             **fields: object) -> Any:
        started = time.monotonic()
        self.sent[op] = self.sent.get(op, 0) + 1
        try:
            response = connection.request(request, timeout_s)
        except ConnectionFailed as failure:
            self._emit(op, started, error="NETWORK_EXCEPTION", detail=str(failure), **fields)
            raise
        self._emit(op, started, error=_response_error(response), broker=connection.address, **fields)
        return response

    def _emit(self, op: str, started: float, **fields: object) -> None:
        self.recorder.emit(ev.COORDINATION_REQUEST, self.member_name, op=op, group=self.group,
                           latency_ms=round((time.monotonic() - started) * 1000, 3), **fields)


def _response_error(response: Any) -> str | None:
    code = getattr(response, "error_code", None)
    if code is None and hasattr(response, "topics") and response.topics:
        codes = [getattr(p, "error_code", 0) for t in response.topics for p in getattr(t, "partitions", [])]
        code = next((c for c in codes if c), 0)
    return errors.name_of(code) if code else None
