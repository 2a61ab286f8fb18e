"""A broker running in-process on its own event-loop thread, for tests and notebooks.

    with EmbeddedBroker() as embedded:
        producer = KafkaProducer(bootstrap_servers=embedded.bootstrap)
        embedded.call(lambda broker: broker.log("t", 0).next_offset)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from broker.registry import BrokerExtension
from broker.server import Broker, BrokerConfig

START_TIMEOUT_S = 30.0


class EmbeddedBroker:
    def __init__(self, config: BrokerConfig | None = None, *, extensions: Sequence[BrokerExtension] = ()) -> None:
        self.broker = Broker(config or BrokerConfig(), extensions=extensions)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="embedded-broker", daemon=True)

    @property
    def bootstrap(self) -> str:
        host, port = self.broker.address
        return f"{host}:{port}"

    def start(self) -> EmbeddedBroker:
        self._thread.start()
        try:
            self.run(self.broker.start(), timeout_s=START_TIMEOUT_S)
        except BaseException:
            self.stop()  # e.g. the port is taken: leave no thread or loop behind
            raise
        return self

    def run(self, coroutine: Any, timeout_s: float = 30.0) -> Any:
        """Run a coroutine on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def call(self, function: Callable[[Broker], Any], timeout_s: float = 30.0) -> Any:
        """Call function(broker) on the broker's loop (the broker is not thread-safe)."""
        future: Future = Future()

        def invoke() -> None:
            try:
                future.set_result(function(self.broker))
            except BaseException as error:
                future.set_exception(error)

        self._loop.call_soon_threadsafe(invoke)
        return future.result(timeout_s)

    def stop(self) -> None:
        if self._thread.is_alive():
            try:
                self.run(self.broker.stop())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
