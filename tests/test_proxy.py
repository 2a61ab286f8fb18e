"""The fault proxy against a local echo server: what passes, what is held, what is reset."""

from __future__ import annotations

import asyncio
import time

import pytest

from experiments.faults.proxy import Proxy, ProxyHub, Toxic
from experiments.scenario import Direction, LinkFault


async def echo_server() -> asyncio.base_events.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def with_proxy(test) -> None:
    server = await echo_server()
    proxy = await Proxy("p", ("127.0.0.1", server.sockets[0].getsockname()[1])).start()
    try:
        await test(proxy)
    finally:
        await proxy.stop()
        server.close()


async def connect(proxy: Proxy):
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def round_trip(reader, writer, payload: bytes = b"ping", timeout: float = 5.0) -> bytes:
    writer.write(payload)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(payload)), timeout)


def run(test) -> None:
    asyncio.run(with_proxy(test))


def test_traffic_passes_both_ways_when_healthy():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        assert await round_trip(reader, writer, b"hello") == b"hello"
        assert proxy.bytes_up == 5
        writer.close()

    run(test)


def test_partition_holds_traffic_keeps_the_connection_and_delivers_after_heal():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        assert await round_trip(reader, writer) == b"ping"
        proxy.set_toxic(Toxic(kind=LinkFault.PARTITION))
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        assert proxy.observed_ns is not None, "the black hole noted when it first held a byte"
        assert not reader.at_eof()
        proxy.set_toxic(None)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"
        writer.close()

    run(test)


def test_partition_keeps_new_connections_from_reaching_the_server():
    async def test(proxy: Proxy) -> None:
        proxy.set_toxic(Toxic(kind=LinkFault.PARTITION))
        reader, writer = await connect(proxy)   # the kernel accepts; nothing passes
        writer.write(b"x")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(1), 0.5)
        proxy.set_toxic(None)
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        writer.close()

    run(test)


def test_one_way_partition_lets_the_other_direction_through():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        await round_trip(reader, writer)
        proxy.set_toxic(Toxic(kind=LinkFault.PARTITION, direction=Direction.DOWNSTREAM))
        writer.write(b"up")
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(2), 0.5)
        assert proxy.bytes_up == 6, "the client's bytes still reached the server"
        writer.close()

    run(test)


def test_reset_resets_open_and_new_connections():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        await round_trip(reader, writer)
        proxy.set_toxic(Toxic(kind=LinkFault.RESET))
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await round_trip(reader, writer)
        reader2, writer2 = await connect(proxy)
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError, BrokenPipeError)):
            await round_trip(reader2, writer2)
        proxy.set_toxic(None)
        reader3, writer3 = await connect(proxy)
        assert await round_trip(reader3, writer3) == b"ping"
        writer3.close()

    run(test)


def test_down_closes_connections():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        await round_trip(reader, writer)
        proxy.set_toxic(Toxic(kind=LinkFault.DOWN))
        assert await asyncio.wait_for(reader.read(10), 5) == b""

    run(test)


def test_latency_delays_each_direction():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        await round_trip(reader, writer)
        proxy.set_toxic(Toxic(kind=LinkFault.LATENCY, latency_ms=150, jitter_ms=20))
        started = time.monotonic()
        await round_trip(reader, writer)
        elapsed = time.monotonic() - started
        assert elapsed >= 2 * 0.13, f"a round trip through 150 +- 20 ms each way took {elapsed:.3f} s"
        proxy.set_toxic(None)
        started = time.monotonic()
        await round_trip(reader, writer)
        assert time.monotonic() - started < elapsed
        writer.close()

    run(test)


def test_bandwidth_caps_throughput():
    async def test(proxy: Proxy) -> None:
        reader, writer = await connect(proxy)
        proxy.set_toxic(Toxic(kind=LinkFault.BANDWIDTH, rate_kbps=20, direction=Direction.UPSTREAM))
        payload = b"x" * 20 * 1024
        started = time.monotonic()
        assert await round_trip(reader, writer, payload, timeout=20) == payload
        elapsed = time.monotonic() - started
        assert elapsed >= 0.8, f"20 KiB at 20 KiB/s arrived in {elapsed:.2f} s"
        writer.close()

    run(test)


def test_hub_steers_every_proxy_of_a_link():
    async def main() -> None:
        server = await echo_server()
        upstream = ("127.0.0.1", server.sockets[0].getsockname()[1])
        hub = ProxyHub(seed=1)
        try:
            coord = [await hub.add("m000", "coord", f"zk-{i}", upstream) for i in range(2)]
            data = await hub.add("m000", "data", "broker-0", upstream)
            hub.set_toxic("m000", "coord", Toxic(kind=LinkFault.PARTITION))
            assert all(proxy.toxic is not None for proxy in coord) and data.toxic is None
            reader, writer = await asyncio.open_connection("127.0.0.1", data.port)
            assert await round_trip(reader, writer) == b"ping"
            hub.heal_all()
            assert all(proxy.toxic is None for proxy in coord)
            with pytest.raises(KeyError):
                hub.set_toxic("m001", "data", None)
            writer.close()
        finally:
            await hub.stop()
            server.close()

    asyncio.run(main())


async def kafka_like_server() -> asyncio.base_events.Server:
    """Answers each Kafka-framed request with a frame carrying its correlation id."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                body = await reader.readexactly(size)
                reply = body[4:8] + b"ok"
                writer.write(len(reply).to_bytes(4, "big") + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def kafka_request(api_key: int, correlation: int) -> bytes:
    body = api_key.to_bytes(2, "big") + (0).to_bytes(2, "big") + correlation.to_bytes(4, "big") + b"\x00\x00"
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("heartbeat_api", [12, 68], ids=["Heartbeat", "ConsumerGroupHeartbeat"])
def test_kafka_proxy_black_holes_group_apis_while_fetches_flow(heartbeat_api):
    """The classic Heartbeat and KIP-848's ConsumerGroupHeartbeat are both coordination traffic."""
    async def main() -> None:
        server = await kafka_like_server()
        hub = ProxyHub()
        try:
            proxy = await hub.add("m000", ("coord", "data"), "broker-0",
                                  ("127.0.0.1", server.sockets[0].getsockname()[1]))
            coordinator = await asyncio.open_connection("127.0.0.1", proxy.port)
            fetcher = await asyncio.open_connection("127.0.0.1", proxy.port)
            hub.set_toxic("m000", "coord", Toxic(kind=LinkFault.PARTITION))
            heartbeat, fetch = kafka_request(heartbeat_api, 7), kafka_request(1, 8)
            coordinator[1].write(heartbeat)
            fetcher[1].write(fetch)
            reply = await asyncio.wait_for(fetcher[0].readexactly(10), 5)
            assert reply[4:8] == (8).to_bytes(4, "big"), "the fetch was answered"
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(coordinator[0].readexactly(10), 0.5)
            assert hub.observed_ns("m000", "coord") is not None
            assert hub.observed_ns("m000", "data") is None
            hub.set_toxic("m000", "coord", None)
            reply = await asyncio.wait_for(coordinator[0].readexactly(10), 5)
            assert reply[4:8] == (7).to_bytes(4, "big"), "the held heartbeat went through after the heal"
            for _, writer in (coordinator, fetcher):
                writer.close()
        finally:
            await hub.stop()
            server.close()

    asyncio.run(main())
