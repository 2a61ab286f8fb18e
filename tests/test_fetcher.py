"""The group members' data path (`modern.client.fetcher`) against the lab's broker, with records written by
kafka-python's producer: the reset policy, seek, reassignment, max.poll.records, an offset out of range, a
close that unblocks a waiting fetch, and a dead leader that holds up no fetch from the live ones."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest
from kafka import KafkaProducer

from broker.admin import create_topic
from broker.cluster import FailoverTiming
from broker.topics import TopicSpec
from modern.client.fetcher import MAX_POLL_RECORDS, Fetcher
from rebalance.types import TopicPartition

pytestmark = pytest.mark.broker


@pytest.fixture
def topic(broker, unique_topic):
    broker.run(broker.broker.create_topic(TopicSpec(name=unique_topic, partitions=2)))
    return unique_topic


def produce(bootstrap: str, topic: str, partition: int, count: int, start: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for index in range(start, start + count):
        producer.send(topic, value=f"{partition}:{index}".encode(), partition=partition)
    producer.flush()
    producer.close()


def drain(fetcher: Fetcher, wanted: int, timeout_s: float = 10.0) -> list:
    records, deadline = [], time.monotonic() + timeout_s
    while len(records) < wanted and time.monotonic() < deadline:
        for batch in fetcher.poll(200).values():
            records.extend(batch)
    return records


def test_reset_policy_seek_and_reassignment(broker, topic):
    produce(broker.bootstrap, topic, 0, 10)
    produce(broker.bootstrap, topic, 1, 5)
    first, second = TopicPartition(topic, 0), TopicPartition(topic, 1)

    earliest = Fetcher([broker.bootstrap], client_id="m-earliest", auto_offset_reset="earliest")
    latest = Fetcher([broker.bootstrap], client_id="m-latest", auto_offset_reset="latest")
    try:
        earliest.assign([first, second])
        records = drain(earliest, 15)
        assert sorted((r.partition, r.offset) for r in records) == \
            [(0, offset) for offset in range(10)] + [(1, offset) for offset in range(5)]
        assert all(r.value == f"{r.partition}:{r.offset}".encode() for r in records)

        latest.assign([first])
        assert drain(latest, 1, timeout_s=1.0) == [], "latest starts after what is there"
        produce(broker.bootstrap, topic, 0, 3, start=10)
        assert [r.offset for r in drain(latest, 3)] == [10, 11, 12]

        earliest.seek(first, 4)
        assert [r.offset for r in drain(earliest, 9)] == list(range(4, 13))
        earliest.assign([second])      # the first partition is given up: nothing of it comes back
        produce(broker.bootstrap, topic, 0, 2, start=13)
        produce(broker.bootstrap, topic, 1, 1, start=5)
        assert [(r.partition, r.offset) for r in drain(earliest, 1)] == [(1, 5)]
        assert drain(earliest, 1, timeout_s=1.0) == []
    finally:
        earliest.close()
        latest.close()


def test_at_most_max_poll_records_per_poll_and_none_lost(broker, topic):
    total = MAX_POLL_RECORDS * 2 + 7
    produce(broker.bootstrap, topic, 0, total)
    fetcher = Fetcher([broker.bootstrap], client_id="m")
    try:
        fetcher.assign([TopicPartition(topic, 0)])
        sizes, offsets = [], []
        deadline = time.monotonic() + 15
        while len(offsets) < total and time.monotonic() < deadline:
            handed = sum(fetcher.poll(500).values(), [])
            sizes.append(len(handed))
            offsets.extend(r.offset for r in handed)
        assert offsets == list(range(total))
        assert max(sizes) == MAX_POLL_RECORDS
    finally:
        fetcher.close()


def test_an_offset_out_of_range_is_reset_by_the_policy(broker, topic):
    produce(broker.bootstrap, topic, 0, 4)
    fetcher = Fetcher([broker.bootstrap], client_id="m")
    try:
        fetcher.assign([TopicPartition(topic, 0)])
        fetcher.seek(TopicPartition(topic, 0), 1_000)
        assert [r.offset for r in drain(fetcher, 4)] == [0, 1, 2, 3]
    finally:
        fetcher.close()


def test_close_from_another_thread_ends_a_waiting_poll(broker, topic):
    fetcher = Fetcher([broker.bootstrap], client_id="m")
    fetcher.assign([TopicPartition(topic, 0)])
    fetcher.poll(100)                              # connected, positioned
    returned = threading.Event()

    def wait() -> None:
        fetcher.poll(20_000)
        returned.set()

    threading.Thread(target=wait, daemon=True).start()
    time.sleep(0.3)
    fetcher.close()
    assert returned.wait(10.0), "a poll blocked in its fetch outlived the close (its own wait was 20 s)"


def test_an_unreachable_broker_is_retried_without_spinning():
    fetcher = Fetcher(["127.0.0.1:1"], client_id="m")
    fetcher.assign([TopicPartition("t", 0)])
    started = time.monotonic()
    polls = 0
    while time.monotonic() - started < 0.5:
        assert fetcher.poll(100) == {}
        polls += 1
    fetcher.close()
    assert polls <= 10, f"{polls} polls in half a second: the fetcher did not back off"


def test_bad_reset_policy_is_named():
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Fetcher(["127.0.0.1:9092"], client_id="m", auto_offset_reset="smallest")


def test_a_silent_broker_holds_up_no_poll():
    """A link that swallows requests (a black hole): each poll still returns when its time is up."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        fetcher = Fetcher([f"127.0.0.1:{silent.getsockname()[1]}"], client_id="m")
        fetcher.assign([TopicPartition("t", 0)])
        for _ in range(3):
            started = time.monotonic()
            assert fetcher.poll(200) == {}
            assert time.monotonic() - started < 5.0, "a poll waited for the silent broker"
        fetcher.close()
    finally:
        silent.close()


def test_a_wakeup_ends_a_poll_waiting_on_a_silent_broker():
    """`wakeup` from another thread ends the wait of a poll under way (the classic member wakes its fetch when
    its group has news for the application's thread, as any answer ends Kafka's network poll); a wakeup with
    no poll under way ends the next one."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        fetcher = Fetcher([f"127.0.0.1:{silent.getsockname()[1]}"], client_id="m")
        fetcher.enable_wakeup()
        fetcher.assign([TopicPartition("t", 0)])
        threading.Timer(0.3, fetcher.wakeup).start()
        started = time.monotonic()
        assert fetcher.poll(60_000) == {}
        assert time.monotonic() - started < 30, "the wakeup did not end the poll"
        fetcher.wakeup()
        started = time.monotonic()
        assert fetcher.poll(60_000) == {}
        assert time.monotonic() - started < 30, "a wakeup before the poll did not end it"
        fetcher.close()
    finally:
        silent.close()


def test_a_dead_leader_holds_up_no_fetch_from_the_live_ones(broker_cluster, unique_topic):
    """Kafka's fetcher skips a node in reconnect backoff and fetches from every other leader; the metadata
    names the dead broker for the whole test (its session outlasts it)."""
    cluster = broker_cluster(3, failover=FailoverTiming(broker_session_timeout_ms=600_000))
    create_topic(cluster.bootstrap, unique_topic, 3)
    leaders = cluster.partition_leaders(unique_topic, 0)
    dead = leaders[0]                                   # the leader of the member's lowest partition
    live = [p for p in range(3) if leaders[p] != dead]
    assert live, leaders
    for partition in range(3):
        produce(cluster.bootstrap, unique_topic, partition, 1)
    fetcher = Fetcher(cluster.bootstrap.split(","), client_id="m")
    try:
        fetcher.assign([TopicPartition(unique_topic, p) for p in range(3)])
        assert len(drain(fetcher, 3, timeout_s=30)) == 3       # connected to every leader, positioned
        cluster.kill(dead)
        for offset in range(1, 4):      # each round needs fetches sent after the kill
            for partition in live:
                produce(cluster.live_bootstrap, unique_topic, partition, 1, start=offset)
            records = drain(fetcher, len(live), timeout_s=30)
            assert sorted((r.partition, r.offset) for r in records) == [(p, offset) for p in live]
        assert cluster.partition_leaders(unique_topic)[0] == dead, "the metadata still names the dead leader"
    finally:
        fetcher.close()


def wait_for_an_answer(fetcher: Fetcher, timeout_s: float = 10.0) -> None:
    """Until an answer to a request out has reached the fetcher's socket (not yet read)."""
    sockets = [channel.sock for channel in fetcher._channels.values() if channel.busy]
    assert sockets and select.select(sockets, [], [], timeout_s)[0], "no answer arrived"


def test_records_go_out_in_arrival_order_and_unbuffered_partitions_are_fetched_meanwhile(broker, topic):
    """Kafka's FetchCollector hands data out in the order it arrived, and AbstractFetch fetches every
    partition with nothing buffered, even while others still have data buffered."""
    first, second = TopicPartition(topic, 0), TopicPartition(topic, 1)
    produce(broker.bootstrap, topic, 1, MAX_POLL_RECORDS + 100)
    fetcher = Fetcher([broker.bootstrap], client_id="m", max_wait_ms=20_000)   # a fetch waits for data
    try:
        fetcher.assign([first, second])
        handed = {}
        deadline = time.monotonic() + 10
        while not handed and time.monotonic() < deadline:
            handed = fetcher.poll(200)
        assert list(handed) == [second] and len(handed[second]) == MAX_POLL_RECORDS
        assert fetcher.in_flight() == {first}, "the partition with nothing buffered is fetched meanwhile"
        produce(broker.bootstrap, topic, 0, 5)
        wait_for_an_answer(fetcher)
        handed = fetcher.poll(0)
        assert list(handed) == [second, first], "the second partition's data arrived first"
        assert [len(records) for records in handed.values()] == [100, 5]
    finally:
        fetcher.close()


def test_records_buffered_for_a_kept_partition_survive_a_reassignment(broker, topic):
    """Kafka keeps a kept partition's state and buffered data across an assignment (assignFromSubscribed,
    FetchBuffer.retainAll); the member seeks the kept partition to its consumed position, which changes
    nothing."""
    first, second = TopicPartition(topic, 0), TopicPartition(topic, 1)
    produce(broker.bootstrap, topic, 0, MAX_POLL_RECORDS + 100)
    fetcher = Fetcher([broker.bootstrap], client_id="m", max_wait_ms=20_000)
    try:
        fetcher.assign([first, second])
        handed = {}
        deadline = time.monotonic() + 10
        while not handed and time.monotonic() < deadline:
            handed = fetcher.poll(200)
        assert len(handed[first]) == MAX_POLL_RECORDS
        fetcher.assign([first])                      # the second partition is revoked, the first kept
        fetcher.seek(first, MAX_POLL_RECORDS)
        handed = fetcher.poll(0)                     # no time to fetch again: what was buffered
        assert [r.offset for r in handed.get(first, [])] == list(range(MAX_POLL_RECORDS, MAX_POLL_RECORDS + 100))
        assert fetcher.position(first) == MAX_POLL_RECORDS + 100
    finally:
        fetcher.close()


def test_a_connection_dropped_by_an_answer_read_before_it_in_the_same_round_is_not_read():
    """A killed broker's connection turns readable (end of file) in the same wait in which a metadata answer
    arrives that no longer lists that broker; taking the answer first drops the connection, and the round
    must then skip it (it once read a socket already closed: AttributeError, and the member's poll failed)."""
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from modern.client.fetch_channel import FetchChannel
    from modern.client.fetcher import BOOTSTRAP
    from rebalance.kafka_frames import encode_response

    fetcher = Fetcher(["127.0.0.1:1"], client_id="m0")
    peers = []
    for node, request in ((BOOTSTRAP, MetadataRequest[9](topics=[], allow_auto_topic_creation=False)),
                          (0, FetchRequest[12](replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1,
                                               isolation_level=0, session_id=0, session_epoch=-1, topics=[],
                                               forgotten_topics_data=[], rack_id=""))):
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        channel = FetchChannel(node=node, address=("127.0.0.1", 9000 + node), client_id="m0", sock=ours,
                               request=request, correlation_id=7, sent_at=time.monotonic())
        fetcher._channels[node] = channel
        peers.append(theirs)
    metadata = MetadataResponse[9](throttle_time_ms=0, brokers=[(1, "127.0.0.1", 9001, None)], cluster_id="c",
                                   controller_id=1, topics=[])
    peers[0].sendall(encode_response(metadata, 7))
    peers[1].close()                            # broker 0 is gone: its connection reads end of file
    assert {fd for fd, _ in _ready([c.sock for c in fetcher._channels.values()])} == \
        {c.sock.fileno() for c in fetcher._channels.values()}, "both connections readable in one wait"

    fetcher._await(time.monotonic() + 1)        # takes the metadata, which drops broker 0's connection

    assert 0 not in fetcher._channels and fetcher._addresses == {1: ("127.0.0.1", 9001)}
    peers[0].close()


def _ready(sockets):
    waiter = select.poll()
    for sock in sockets:
        waiter.register(sock.fileno(), select.POLLIN)
    return waiter.poll(1000)
