"""Which code answers which Kafka API: the broker's core APIs and plug-ins such as the
group coordinator register here, so the broker needs no knowledge of group semantics.

A handler is `async def handler(ctx: RequestContext, request) -> response`, where
`request` is kafka-python's decoded Request object and the handler returns the Response
object of the same API version; the server adds the response header and frames it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class RequestContext:
    broker: Any                 # the running broker.server.Broker (node id, cluster view, logs)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    extras: dict = field(default_factory=dict)


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


class HandlerRegistry:
    def __init__(self) -> None:
        self._by_key: dict[int, Registration] = {}

    def register(self, api_key: int, handler: Handler, *, min_version: int, max_version: int) -> None:
        if api_key in self._by_key:
            raise ValueError(f"API key {api_key} already has a handler")
        self._by_key[api_key] = Registration(api_key, min_version, max_version, handler)

    def get(self, api_key: int) -> Registration | None:
        return self._by_key.get(api_key)

    def supported(self) -> list[Registration]:
        """For ApiVersions: every registered API with its version range."""
        return sorted(self._by_key.values(), key=lambda reg: reg.api_key)


class BrokerExtension(Protocol):
    """Something that lives inside a broker: registers handlers, may start background tasks
    (e.g. the group coordinator's session timers), and stops with the broker."""

    def install(self, broker: Any, registry: HandlerRegistry) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
