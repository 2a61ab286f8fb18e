"""The members' shared half (`modern.client.fetched`): positions the reset policy gives are committed like
consumed ones, and an OffsetFetch that times out leaves its partitions waiting, not fetched, for a later poll
to ask again; poll never raises for it (against the lab's broker)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from broker.admin import create_topic
from broker.topics import TopicSpec
from modern.client.fetched import FetchingMember
from modern.common import errors
from modern.common.errors import GroupError
from rebalance.backends import profile
from rebalance.events import NullRecorder
from rebalance.member import MemberConfig
from rebalance.types import TopicPartition
from tests.test_fetcher import produce

pytestmark = pytest.mark.broker


class BareMember(FetchingMember):
    """The fetching half alone: the group half's hooks record what they are asked."""

    def __init__(self, bootstrap: str, topic: str, reset: str) -> None:
        self.config = MemberConfig(group="g", topics=(topic,), bootstrap=bootstrap, auto_offset_reset=reset)
        self.settings = SimpleNamespace(fetch_max_wait_ms=100, client_id="m")
        self.member_id, self.recorder = "m", NullRecorder()
        self._fetcher, self._owned, self._positions = None, frozenset(), {}
        self._lock, self._closed = threading.RLock(), False
        self.commits: list[dict] = []

    def _commit_offsets(self, offsets):
        self.commits.append(dict(offsets))
        return errors.NONE

    def _group_news(self) -> threading.Event:
        return threading.Event()


@pytest.fixture
def topic(broker, unique_topic):
    broker.run(broker.broker.create_topic(TopicSpec(name=unique_topic, partitions=1)))
    return unique_topic


def test_a_position_set_by_the_reset_policy_is_committed(broker, topic):
    """Kafka's SubscriptionState.allConsumed takes every partition with a valid position, one the reset
    policy set included."""
    produce(broker.bootstrap, topic, 0, 3)
    tp = TopicPartition(topic, 0)
    member = BareMember(broker.bootstrap, topic, reset="latest")
    member._start_fetching("range")
    try:
        member._owned = frozenset({tp})
        member._fetch_from({})
        deadline = time.monotonic() + 10
        while tp not in member._positions and time.monotonic() < deadline:
            assert member._fetch(0.1, generation=1) == []
        member.commit()
        assert member.commits == [{tp: 3}]
    finally:
        member._fetcher.close()


def test_a_committed_offset_fetch_that_times_out_waits_unfetched_for_a_later_poll(broker, topic):
    produce(broker.bootstrap, topic, 0, 5)
    tp = TopicPartition(topic, 0)
    member = BareMember(broker.bootstrap, topic, reset="earliest")
    member._start_fetching("range")
    answers = [GroupError(errors.COORDINATOR_NOT_AVAILABLE, "OffsetFetch")] * 2 + [{tp: 2}]

    def offset_fetch(partitions):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    try:
        member._owned = frozenset({tp})
        member._fetch_from(member._committed_offsets({tp}, offset_fetch))
        assert member._fetch(0.3, generation=1) == [], "unfetched while its committed offset is unknown"
        records = []
        deadline = time.monotonic() + 10
        while not records and time.monotonic() < deadline:
            records = member._fetch(0.2, generation=1)
        assert answers == [] and [r.offset for r in records] == [2, 3, 4], "from the committed offset"
    finally:
        member._fetcher.close()


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_a_member_whose_offset_fetch_times_out_keeps_polling(broker_cluster, monkeypatch, unique_topic, backend):
    """The members' own OffsetFetch path: a timeout (the client's retries spent) is not raised out of poll."""
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    cluster = broker_cluster(1)
    create_topic(cluster.bootstrap, unique_topic, 1)
    produce(cluster.bootstrap, unique_topic, 0, 4)
    member = profile(backend).make(MemberConfig(group=f"g-{unique_topic}", topics=(unique_topic,),
                                                bootstrap=cluster.bootstrap, member_name="m", auto_commit=False))
    owner = member.coordinator if backend == "classic" else member
    name = "fetch_committed" if backend == "classic" else "_fetch_committed"
    real, failures = getattr(owner, name), []

    def times_out_once(partitions):
        if not failures:
            failures.append(partitions)
            raise GroupError(errors.COORDINATOR_NOT_AVAILABLE, "OffsetFetch")
        return real(partitions)

    setattr(owner, name, times_out_once)
    member.start()
    try:
        offsets = []
        deadline = time.monotonic() + 30
        while len(offsets) < 4 and time.monotonic() < deadline:
            offsets += [r.offset for r in member.poll(0.2)]
        assert failures and offsets == [0, 1, 2, 3]
    finally:
        member.close()
