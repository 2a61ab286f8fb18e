"""One wire fuzz input through the broker, as the server would take it.

Every input gets a fresh broker with the group coordinator, in memory (its listening socket is never
used: frames go straight to the dispatch the server calls for each frame it reads). Each frame of the
input stands for its own connection, sent in order; a frame whose answer the coordinator parks (a
JoinGroup waiting for the rest of the group, a long-polling Fetch) waits while the next frames go in,
as it would on its own connection. At the end the broker stops, cancelling what is still parked.

What is allowed: an answer that decodes as the API's response, no answer (acks=0), or `FrameError`
(the server closes that connection). Anything else is a crash: `WireFailure` or the handler's own
exception, which libFuzzer reports with the input. So is a broker whose background task or group
timers failed, and an input during which the process's peak memory grew by more than GROWTH_LIMIT_MB.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import struct

from broker.server import Broker, BrokerConfig
from experiments.fuzz.frames import split_frames
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.service import CoordinatorExtension
from rebalance.events import NullRecorder
from rebalance.kafka_frames import FrameError, decode_response, frame_size, peek_header

SETTLE_STEPS = 8          # event-loop turns a frame gets before the next one goes in (then it is parked)
GROWTH_LIMIT_MB = 64      # more peak memory than this for one input is a failure
WARM_UP_INPUTS = 200      # the codec compiles each message class on first use: growth is not counted yet
OFFSETS_PARTITIONS = 2      # few: a fresh broker per input loads them all, and one or two cover every path
_SIZE = struct.Struct(">i")


class WireFailure(AssertionError):
    """The broker did something no input may make it do."""


class WireHarness:
    def __init__(self) -> None:
        logging.getLogger().setLevel(logging.CRITICAL)  # the broker logs every closed connection
        self.loop = asyncio.new_event_loop()
        self.inputs = 0

    def run(self, data: bytes) -> None:
        before = _peak_rss_mb()
        self.loop.run_until_complete(self._run(data))
        self.inputs += 1
        grown = _peak_rss_mb() - before
        if self.inputs > WARM_UP_INPUTS and grown > GROWTH_LIMIT_MB:
            raise WireFailure(f"peak memory grew by {grown:.0f} MB during one input")

    async def _run(self, data: bytes) -> None:
        coordinator = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0)),
                                           recorder=NullRecorder())
        broker = Broker(BrokerConfig(host="127.0.0.1", port=0, offsets_topic_partitions=OFFSETS_PARTITIONS),
                        extensions=[coordinator])
        await broker.start()
        tasks: list[asyncio.Task] = []
        try:
            for frame in split_frames(data):
                task = asyncio.ensure_future(_serve_frame(broker, frame))
                tasks.append(task)
                for _ in range(SETTLE_STEPS):
                    if task.done():
                        break
                    await asyncio.sleep(0)
                if task.done():
                    task.result()
            for _ in range(SETTLE_STEPS):
                await asyncio.sleep(0)
            if broker.fatal_error is not None or coordinator.failure is not None:
                raise WireFailure("a broker task failed") from (broker.fatal_error or coordinator.failure)
        finally:
            await broker.stop()
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome


async def _serve_frame(broker: Broker, frame: bytes) -> None:
    """What the server does with one frame it read, plus a check that the answer decodes."""
    try:
        frame_size(_SIZE.pack(len(frame)), broker.config.max_frame_bytes)
        answer = await broker._dispatch(frame, "127.0.0.1")
    except FrameError:
        return  # the server closes the connection: an allowed end
    if answer is None:
        return
    api_key, api_version, correlation_id = peek_header(frame)
    registration = broker.registry.get(api_key)
    if not registration.min_version <= api_version <= registration.max_version:
        api_version = 0  # ApiVersions answers an unsupported version with v0
    try:
        decode_response(api_key, api_version, answer[_SIZE.size:], correlation_id)
    except Exception as error:
        raise WireFailure(f"the answer to API {api_key} v{api_version} does not decode: {error!r}") from error


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
