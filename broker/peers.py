"""A minimal Kafka client the broker uses to talk to its peers (probes, topic creation).

One connection, one request at a time, built on the same kafka-python codec as the server.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest

from broker.topics import TopicSpec
from rebalance.kafka_frames import DEFAULT_MAX_FRAME_BYTES, FrameError, response_class

# Requests from peers carry this client id; the broker does not forward them again.
PEER_CLIENT_ID = "rebalance-lab-peer"


class PeerClient:
    def __init__(self, host: str, port: int, client_id: str = PEER_CLIENT_ID) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)
        self._lock = asyncio.Lock()

    async def request(self, request: Any, timeout_s: float) -> Any:
        """Send a versioned Request object and return the decoded Response. Raises OSError,
        TimeoutError or FrameError; the connection is dropped on any failure."""
        async with self._lock:
            try:
                return await asyncio.wait_for(self._exchange(request), timeout_s)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, request: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        correlation_id = next(self._correlation)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        self._writer.write(bytes(request.encode(header=True, framed=True)))
        await self._writer.drain()
        size = int.from_bytes(await self._reader.readexactly(4), "big", signed=True)
        if not 0 < size <= DEFAULT_MAX_FRAME_BYTES:
            raise FrameError(f"peer sent a frame of {size} bytes")
        frame = await self._reader.readexactly(size)
        response = response_class(request.API_KEY, request.API_VERSION).decode(frame, header=True)
        if response.header.correlation_id != correlation_id:
            raise FrameError("peer answered out of order")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def forward_topic(host: str, port: int, spec: TopicSpec, timeout_s: float) -> None:
    """Have the peer at host:port create `spec` too (CreateTopics, from a peer: it forwards it no further);
    raises as `PeerClient.request` does."""
    request = CreateTopicsRequest[2](
        topics=[CreateTopicsRequest.CreatableTopic(
            name=spec.name, num_partitions=spec.partitions, replication_factor=1, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name="cleanup.policy", value="compact")]
            if spec.compacted else [])],
        timeout_ms=5000, validate_only=False)
    client = PeerClient(host, port)
    try:
        await client.request(request, timeout_s)
    finally:
        client.close()
