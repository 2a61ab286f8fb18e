"""The 0.8 ZooKeeper consumer against a real ZooKeeper (and the lab's broker where records flow).

Each test gets its own chroot, group and topic. Waits poll a condition with a deadline;
a fault counts from when its effect is seen (a session expired, an ids node gone).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from experiments.faults.proxy import Proxy, Toxic
from experiments.scenario import LinkFault
from legacy_zk.member import LegacyMember
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from rebalance.types import TopicPartition

pytestmark = [pytest.mark.zk]

REPO = Path(__file__).resolve().parents[1]
SESSION_MS = 2000
FAST = {"rebalance.backoff.ms": 200, "zookeeper.sync.time.ms": 200}


# -- a real ZooKeeper ------------------------------------------------------------------------------

@pytest.fixture
def zk_connect(zk) -> str:
    """A connect string with a fresh chroot on the shared ZooKeeper (tests/fixtures/zk.py)."""
    connect = zk.chroot()
    hosts, _, chroot = connect.partition("/")
    root = KazooClient(hosts)
    root.start(timeout=30)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    return connect


@pytest.fixture
def kz(zk_connect):
    """A plain kazoo client inside the test's chroot, to look at the tree as an outsider."""
    client = KazooClient(zk_connect)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


class LinkProxy:
    """The lab's fault proxy on its own event-loop thread, in front of one member's ZooKeeper link."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split(":")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy = self._run(Proxy("zk-link", (host, int(port))).start())

    def connect_string(self, zk_connect: str) -> str:
        _, _, chroot = zk_connect.partition("/")
        return f"{self.proxy.address}/{chroot}"

    def set(self, toxic: Toxic | None) -> None:
        self._loop.call_soon_threadsafe(self.proxy.set_toxic, toxic)

    def close(self) -> None:
        self._run(self.proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)


@pytest.fixture
def link_proxy(zk_connect):
    proxies: list[LinkProxy] = []

    def make() -> LinkProxy:
        proxies.append(LinkProxy(zk_connect.partition("/")[0]))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


def fake_broker_nodes(kz: KazooClient, topics: dict[str, int]) -> None:
    """/brokers/* exactly as a 0.8 broker writes them, for tests where no record flows."""
    kz.create("/brokers/ids/0", json.dumps(
        {"version": 1, "host": "127.0.0.1", "port": 9, "jmx_port": -1, "timestamp": "1"}
    ).encode(), ephemeral=True, makepath=True)
    for topic, count in topics.items():
        kz.create(f"/brokers/topics/{topic}", json.dumps(
            {"version": 1, "partitions": {str(p): [0] for p in range(count)}}
        ).encode(), makepath=True)


# -- members ---------------------------------------------------------------------------------------

class Group:
    """Members of one group in this process, all closed at teardown."""

    def __init__(self, zk_connect: str, events: Path, group: str, topic: str) -> None:
        self.zk_connect, self.group, self.topic = zk_connect, group, topic
        self.recorder = EventRecorder(events, run_id="test", backend="legacy")
        self.events_path = events
        self.members: dict[str, LegacyMember] = {}

    def member(self, name: str, *, zk_connect: str | None = None, pod_id: bool = False, **extra) -> LegacyMember:
        """consumer.id is the name, so that the ids, and range's shares, order as the names do; with `pod_id`,
        the lab's default: the name behind a random tag, ordered as a deployment's pods are."""
        named = {} if pod_id else {"consumer.id": name}
        config = MemberConfig(
            group=self.group, topics=(self.topic,), member_name=name, zk_connect=zk_connect or self.zk_connect,
            session_timeout_ms=SESSION_MS, extra={**FAST, **named, **extra},
        )
        member = LegacyMember(config, recorder=self.recorder)
        self.members[name] = member
        return member

    def start(self, *names: str, **extra) -> list[LegacyMember]:
        started = [self.member(name, **extra) for name in names]
        for member in started:
            member.start()
        return started

    def close(self) -> None:
        for member in self.members.values():
            member.close()
        self.recorder.close()

    def events(self, *, type: str | None = None, member: str | None = None, since_ns: int = 0) -> list[dict]:
        return [
            e for e in read_events(self.events_path)
            if (type is None or e["type"] == type) and (member is None or e["member"] == member)
            and e["ts_ns"] >= since_ns
        ]


@pytest.fixture
def group(zk_connect, tmp_path):
    g = Group(zk_connect, tmp_path / "events.jsonl", f"g-{uuid.uuid4().hex[:6]}", "t")
    yield g
    g.close()


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def owners_tree(kz: KazooClient, group: str, topic: str) -> dict[int, str]:
    """The owner znodes as they stand (one may vanish while being read: then it is not there)."""
    path = f"/consumers/{group}/owners/{topic}"
    tree = {}
    try:
        children = kz.get_children(path)
    except NoNodeError:
        return {}
    for child in children:
        try:
            tree[int(child)] = kz.get(f"{path}/{child}")[0].decode()
        except NoNodeError:
            pass
    return tree


def settled(members: Iterable[LegacyMember], kz: KazooClient, group: str, topic: str, partitions: int):
    """Every member idle, every partition owned exactly once, and ZooKeeper agreeing with the members."""
    members = list(members)
    if not all(m.idle for m in members):
        return None
    views = {m.member_id: m.assignment() for m in members}
    owned = Counter(tp for tps in views.values() for tp in tps)
    if sorted(owned) != [TopicPartition(topic, p) for p in range(partitions)] or max(owned.values()) != 1:
        return None
    tree = owners_tree(kz, group, topic)
    expected = {tp.partition: f"{m.consumer_id}-0" for m in members for tp in m.assignment()}
    return views if tree == expected else None


def wait_for_state(members: Group, member: LegacyMember, state: str, since_ns: int = 0) -> int:
    """When the member recorded the session `state` (at or after `since_ns`). kazoo sets its own state
    before it calls the member's listener, which records the event, so a test waits for the record."""
    def recorded() -> int | None:
        return next((e["ts_ns"] for e in members.events(type="session_state", member=member.member_id, since_ns=since_ns)
                     if e["state"] == state), None)
    return wait_until(recorded, 30, f"{member.member_id} to record {state}")


def wait_settled(members, kz, group, topic, partitions, timeout_s=30.0):
    return wait_until(lambda: settled(members, kz, group, topic, partitions), timeout_s,
                      f"{len(list(members))} members to settle on {partitions} partitions")


def parts(*numbers: int, topic: str = "t") -> set[TopicPartition]:
    return {TopicPartition(topic, n) for n in numbers}


# -- members in their own processes (to kill or stop them) -----------------------------------------

def member_process(zk_connect: str, group: str, topic: str, name: str, events: Path, *extra: str,
                   session_ms: int = SESSION_MS) -> subprocess.Popen:
    args = [sys.executable, "-m", "experiments.cli.app", "member", "--backend", "legacy", "--zk", zk_connect,
            "--group", group, "--topic", topic, "--id", name, "--session-timeout-ms", str(session_ms),
            "--events", str(events), "--run-id", "test"]
    for key, value in {**FAST, "consumer.id": name}.items():
        args += ["--config", f"{key}={value}"]
    for setting in extra:
        args += ["--config", setting]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
    process.wait(30)


# -- the tests -------------------------------------------------------------------------------------

def test_pods_ids_order_at_random_so_range_shares_do_not_follow_the_start_order(group, kz):
    """0.8 sorts consumer ids (`<group>_<host>-<time>-<uuid>`; the pods of a deployment have random host
    names): which members own partitions when there are more members than partitions is a draw, not the
    start order. The lab's consumer.id is the name behind a random tag."""
    fake_broker_nodes(kz, {"t": 4})
    members = group.start(*(f"m{i:03d}" for i in range(10)), pod_id=True)
    views = wait_settled(members, kz, group.group, "t", 4)
    ids = [m.consumer_id for m in members]
    assert sorted(kz.get_children(f"/consumers/{group.group}/ids")) == sorted(ids)
    assert ids != sorted(ids)                        # in start order: 1 chance in 10! = 3.6 million
    first_four_by_id = sorted(members, key=lambda m: m.consumer_id)[:4]
    assert {m.member_id for m in members if views[m.member_id]} == {m.member_id for m in first_four_by_id}


def test_three_members_split_six_partitions_by_range_in_the_08_layout(group, kz):
    fake_broker_nodes(kz, {"t": 6})
    c0, c1, c2 = group.start("c0", "c1", "c2")
    views = wait_settled([c0, c1, c2], kz, group.group, "t", 6)
    assert views == {c0.member_id: parts(0, 1), c1.member_id: parts(2, 3), c2.member_id: parts(4, 5)}

    # The tree, as 0.8 wrote it.
    ids = f"/consumers/{group.group}/ids"
    assert sorted(kz.get_children(ids)) == [f"{group.group}_c0", f"{group.group}_c1", f"{group.group}_c2"]
    data, stat = kz.get(f"{ids}/{c1.member_id}")
    registration = json.loads(data)
    assert list(registration) == ["version", "subscription", "pattern", "timestamp"]
    assert registration["version"] == 1 and registration["subscription"] == {"t": 1}
    assert registration["pattern"] == "static" and registration["timestamp"].isdigit()
    assert stat.ephemeralOwner == c1.zk.session_id
    for partition, holder in owners_tree(kz, group.group, "t").items():
        _, owner_stat = kz.get(f"/consumers/{group.group}/owners/t/{partition}")
        owner = {m.member_id: m for m in (c0, c1, c2)}[holder.rsplit("-", 1)[0]]
        assert owner_stat.ephemeralOwner == owner.zk.session_id  # ephemeral, in its owner's session

    # A fourth joins: every member rebalances (the herd), and range over 4 threads gives 2,2,1,1.
    joined_ns = time.monotonic_ns()
    c3 = group.start("c3")[0]
    views = wait_settled([c0, c1, c2, c3], kz, group.group, "t", 6)
    assert views == {c0.member_id: parts(0, 1), c1.member_id: parts(2, 3),
                     c2.member_id: parts(4), c3.member_id: parts(5)}
    for m in (c0, c1, c2):
        assert group.events(type="watch_notification", member=m.member_id, since_ns=joined_ns)
        assert group.events(type="rebalance_started", member=m.member_id, since_ns=joined_ns)
        # eager: each gave up everything before taking its share back
        assert group.events(type="partitions_revoked", member=m.member_id, since_ns=joined_ns)
    requests = group.events(type="coordination_request", since_ns=joined_ns)
    assert {"get_children", "get", "create", "delete"} <= {e["op"] for e in requests}
    assert all(e["latency_ms"] >= 0 and "path" in e for e in requests)


def test_killed_member_session_expires_and_the_others_take_over(group, kz, tmp_path):
    fake_broker_nodes(kz, {"t": 6})
    c0, c1 = group.start("c0", "c1")
    killed = member_process(group.zk_connect, group.group, "t", "c2", tmp_path / "c2.jsonl")
    try:
        c2_id = f"{group.group}_c2"
        c2_share = {0: f"{c0.member_id}-0", 1: f"{c0.member_id}-0", 2: f"{c1.member_id}-0",
                    3: f"{c1.member_id}-0", 4: f"{c2_id}-0", 5: f"{c2_id}-0"}
        wait_until(lambda: c0.idle and c1.idle and owners_tree(kz, group.group, "t") == c2_share
                   and c0.assignment() == parts(0, 1) and c1.assignment() == parts(2, 3),
                   60, "c2 (own process) to own t-4, t-5")
        killed.kill()  # SIGKILL: no clean close, its session lingers until ZooKeeper expires it
        killed.wait(10)
        killed_at = time.monotonic()
        wait_until(lambda: not kz.exists(f"/consumers/{group.group}/ids/{c2_id}"), 30, "c2's session to expire")
        expired_after = time.monotonic() - killed_at
        views = wait_settled([c0, c1], kz, group.group, "t", 6)
        assert views == {c0.member_id: parts(0, 1, 2), c1.member_id: parts(3, 4, 5)}
        assert expired_after > 0.5 * SESSION_MS / 1000  # not at once: only when the session timed out
    finally:
        stop_process(killed)


def test_concurrent_joins_cause_owner_conflicts_and_retries_yet_converge(group, kz, link_proxy):
    fake_broker_nodes(kz, {"t": 6})
    # The first member's ZooKeeper link is slow (30 ms each way): it learns of the joins late
    # and releases late, while the joiners, each on its own view, already claim. Their backoff
    # (1 s, 4 attempts) outlasts its rebalance, so the group still converges.
    slow = link_proxy()
    first = group.member("c0", zk_connect=slow.connect_string(group.zk_connect))
    first.start()
    wait_settled([first], kz, group.group, "t", 6)
    slow.set(Toxic(kind=LinkFault.LATENCY, latency_ms=30))
    joined_ns = time.monotonic_ns()
    joiners = [group.member(f"c{i}", **{"rebalance.backoff.ms": 1000}) for i in range(1, 6)]
    threads = [threading.Thread(target=m.start) for m in joiners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    everyone = [first, *joiners]
    views = wait_settled(everyone, kz, group.group, "t", 6, timeout_s=60)
    assert all(len(v) == 1 for v in views.values())  # range: 6 partitions over 6 threads
    attempts = group.events(type="rebalance_attempt", since_ns=joined_ns)
    conflicts = [a for a in attempts if a["outcome"] == "owner_conflict"]
    assert conflicts, "members claiming what another had not released yet must collide"
    assert all("held by" in a["detail"] for a in conflicts)
    assert any(a["attempt"] > 1 and a["outcome"] == "success" for a in attempts)  # a retry that worked


def test_exhausted_retries_leave_a_member_owning_nothing_until_the_next_change(group, kz, tmp_path):
    fake_broker_nodes(kz, {"t": 6})
    # b runs alone in its own process with a long session, and owns everything...
    b_events = tmp_path / "b.jsonl"
    b = member_process(group.zk_connect, group.group, "t", "b", b_events, session_ms=30000)
    try:
        wait_until(lambda: len(owners_tree(kz, group.group, "t")) == 6, 60, "b to own all six partitions")
        b.send_signal(signal.SIGSTOP)  # ...then stalls (a long GC): its session lives, it releases nothing
        a = group.start("a", **{"rebalance.max.retries": 2, "rebalance.backoff.ms": 100})[0]
        failed = wait_until(lambda: group.events(type="rebalance_failed", member=a.member_id), 30,
                            "a to give up")
        assert "can't rebalance after 2 retries" in failed[0]["error"]
        attempts = group.events(type="rebalance_attempt", member=a.member_id)
        assert [x["outcome"] for x in attempts] == ["owner_conflict", "owner_conflict"]
        assert a.assignment() == set() and "owns nothing" in a.status
        metrics = group.events(type="metrics", member=a.member_id)[-1]
        assert metrics["failed-rebalance-total"] == 1 and metrics["rebalance-total"] == 0
        assert all(holder.startswith(f"{group.group}_b-") for holder in owners_tree(kz, group.group, "t").values())

        # b wakes, releases everything and takes its half. Nothing tells a: its half stays unowned.
        resumed_ns = time.monotonic_ns()
        b.send_signal(signal.SIGCONT)
        wait_until(lambda: [e for e in read_events(b_events)
                            if e["type"] == "rebalance_completed" and e["ts_ns"] > resumed_ns], 30,
                   "b to rebalance after resuming")
        assert owners_tree(kz, group.group, "t") == {p: f"{group.group}_b-0" for p in (3, 4, 5)}
        assert a.assignment() == set() and a.idle

        # The next change in the group (a third member) brings a back.
        c = group.start("c")[0]
        wait_until(lambda: a.assignment() == parts(0, 1) and c.assignment() == parts(4, 5) and a.idle and c.idle
                   and sorted(owners_tree(kz, group.group, "t")) == list(range(6)), 30,
                   "a to own its share after the next change")
    finally:
        stop_process(b)


# -- with records: the lab's broker in legacy mode ---------------------------------------------------

@pytest.fixture
def legacy_broker(zk_connect, kz):
    """A broker registered in ZooKeeper the 0.8 way, with a 6-partition topic "t"."""
    from broker.admin import create_topic
    from broker.embedded import EmbeddedBroker
    from broker.server import BrokerConfig

    with EmbeddedBroker(BrokerConfig(port=0, zk=zk_connect)) as embedded:
        create_topic(embedded.bootstrap, "t", 6)
        wait_until(lambda: kz.exists("/brokers/topics/t") and kz.get_children("/brokers/ids"), 30,
                   "the broker's 0.8 registration")
        yield embedded


class Producer:
    """Writes the lab's record values ({"seq", "ts_ms"}) round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self.topic, self.partitions, self.seq = topic, partitions, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def send(self, count: int) -> None:
        for _ in range(count):
            value = json.dumps({"seq": self.seq, "ts_ms": time.time_ns() // 1_000_000}).encode()
            self._producer.send(self.topic, value, partition=self.seq % self.partitions)
            self.seq += 1
        self._producer.flush(30)

    def run_in_background(self, per_round: int = 6, every_s: float = 0.05) -> None:
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.send(per_round)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)
        self._producer.close()


class Poller:
    """Polls one member on its own thread, noting (partition, offset) -> when it was handed out."""

    def __init__(self, member: LegacyMember) -> None:
        self.member = member
        self.seen: dict[tuple[int, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for record in self.member.poll(0.1):
                self.seen.setdefault((record.partition, record.offset), time.monotonic_ns())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def consume(member: LegacyMember, count: int, timeout_s: float = 30.0) -> list:
    records: list = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += member.poll(0.2)
    return records


@pytest.mark.broker
def test_committed_offsets_survive_a_restart(group, kz, legacy_broker):
    producer = Producer(legacy_broker.bootstrap, "t", 6)
    try:
        producer.send(60)
        first = group.start("a")[0]
        records = consume(first, 60)
        assert sorted((r.partition, r.offset) for r in records) == [(p, o) for p in range(6) for o in range(10)]
        batches = group.events(type="records_consumed", member=first.member_id)
        assert sum(b["count"] for b in batches) == 60
        assert all(isinstance(ts, int) for b in batches for ts in b["produce_ts_ms"])
        first.close()  # commits (auto.commit.enable) before the session closes
        for partition in range(6):
            value, _ = kz.get(f"/consumers/{group.group}/offsets/t/{partition}")
            assert value == b"10"  # the next offset to consume, as a decimal string

        producer.send(30)
        again = group.start("a")[0]  # same consumer.id, new session: resumes from the committed offsets
        records = consume(again, 30)
        assert sorted((r.partition, r.offset) for r in records) == [(p, o) for p in range(6) for o in range(10, 15)]
        assert consume(again, 1, timeout_s=1.0) == []  # nothing consumed twice
    finally:
        producer.close()


@pytest.mark.broker
def test_member_cut_off_from_zookeeper_keeps_consuming_while_another_claims_its_partitions(
    group, kz, legacy_broker, link_proxy
):
    link = link_proxy()  # only z's ZooKeeper link goes through it; its broker link is direct
    z = group.member("z", zk_connect=link.connect_string(group.zk_connect), **{"auto.commit.interval.ms": 300})
    z.start()
    y = group.start("y")[0]
    wait_settled([y, z], kz, group.group, "t", 6)
    assert z.assignment() == parts(3, 4, 5)
    producer = Producer(legacy_broker.bootstrap, "t", 6)
    pollers = [Poller(y), Poller(z)]
    try:
        producer.run_in_background()
        wait_until(lambda: any(p in (3, 4, 5) for p, _ in pollers[1].seen), 30, "z to consume")

        link.set(Toxic(kind=LinkFault.PARTITION))
        wait_until(lambda: z.session_state == "SUSPENDED", 30, "z to see its ZooKeeper link down")
        wait_until(lambda: y.assignment() == parts(0, 1, 2, 3, 4, 5) and y.idle, 30,
                   "y to claim z's partitions once z's session expired")
        claimed_ns = time.monotonic_ns()
        # z still believes it owns them, and keeps fetching them from the broker: the zombie
        assert z.assignment() == parts(3, 4, 5)
        wait_until(lambda: [k for k, ts in pollers[1].seen.items() if ts > claimed_ns and k in pollers[0].seen],
                   30, "a record handed out to both y and z after y's claim")
        both = {k for k, ts in pollers[1].seen.items() if ts > claimed_ns and k in pollers[0].seen}
        assert {p for p, _ in both} <= {3, 4, 5}
        assert set(owners_tree(kz, group.group, "t")) == set(range(6))
        assert all(h.startswith(y.member_id) for h in owners_tree(kz, group.group, "t").values())

        # The events tell the same story: y was assigned z's partitions while z revoked nothing.
        y_assigned = [e for e in group.events(type="partitions_assigned", member=y.member_id)
                      if {"t-3", "t-4", "t-5"} <= set(e["partitions"])]
        assert y_assigned
        cut_ns = y_assigned[0]["ts_ns"]
        assert not group.events(type="partitions_revoked", member=z.member_id, since_ns=cut_ns - 10**9)
        z_late = [e for e in group.events(type="records_consumed", member=z.member_id, since_ns=cut_ns)
                  if e["partition"] in (3, 4, 5)]
        assert z_late

        # Heal: z learns its session expired, loses its partitions, re-registers, and the group splits again.
        link.set(None)
        wait_until(lambda: group.events(type="partitions_lost", member=z.member_id), 30, "z to learn of the expiry")
        states = [e["state"] for e in group.events(type="session_state", member=z.member_id)]
        assert states.index("SUSPENDED") < states.index("LOST")
        wait_until(lambda: z.assignment() == parts(3, 4, 5) and y.assignment() == parts(0, 1, 2)
                   and z.idle and y.idle, 30, "the group to split again after the heal")
        # z's auto-commit (its own scheduler thread, as 0.8's) blocked while it was cut off and went
        # through once it was back: a commit for partitions y owned then, made before z had them again
        # (whether before or after z declared them lost: 0.8's scheduler races its new-session handler).
        lost_ns = next(e["ts_ns"] for e in group.events(type="session_state", member=z.member_id)
                       if e["state"] == "LOST")
        back_ns = next(e["ts_ns"] for e in group.events(type="partitions_assigned", member=z.member_id,
                                                        since_ns=lost_ns) if {"t-3", "t-4", "t-5"} <= set(e["partitions"]))
        late = [e for e in group.events(type="offsets_committed", member=z.member_id, since_ns=lost_ns)
                if e["ts_ns"] < back_ns]
        assert late and set(late[0]["offsets"]) <= {"t-3", "t-4", "t-5"}
    finally:
        for poller in pollers:
            poller.stop()
        producer.close()


def test_member_command_leaves_cleanly_on_sigterm(group, kz, tmp_path):
    fake_broker_nodes(kz, {"t": 6})
    events = tmp_path / "m.jsonl"
    process = member_process(group.zk_connect, group.group, "t", "m", events, session_ms=30000)
    try:
        wait_until(lambda: len(owners_tree(kz, group.group, "t")) == 6, 60, "the member to own all partitions")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, process.stderr.read().decode()
        # A clean leave closes the session: its znodes go at once, not after a 30 s session timeout.
        assert kz.get_children(f"/consumers/{group.group}/ids") == []
        assert owners_tree(kz, group.group, "t") == {}
        types = [e["type"] for e in read_events(events)]
        assert types[0] == "member_started" and types[-1] == "member_stopped"
    finally:
        stop_process(process)


def test_roundrobin_deals_partitions_by_java_hash_order(group, kz):
    from rebalance.assignors.legacy import legacy_roundrobin

    fake_broker_nodes(kz, {"t": 6})
    members = group.start("c0", "c1", **{"partition.assignment.strategy": "roundrobin"})
    views = wait_settled(members, kz, group.group, "t", 6)
    expected = legacy_roundrobin({"t": 6}, {m.member_id: {"t": 1} for m in members})
    assert views == {m.member_id: set(expected[f"{m.member_id}-0"]) for m in members}
    assert views[members[0].member_id] != parts(0, 1, 2)  # not range's contiguous split


def test_a_member_cut_off_from_zookeeper_still_closes_promptly(group, kz, link_proxy):
    fake_broker_nodes(kz, {"t": 6})
    link = link_proxy()
    m = group.member("m", zk_connect=link.connect_string(group.zk_connect), **{"auto.commit.interval.ms": 200})
    m.start()
    wait_settled([m], kz, group.group, "t", 6)
    link.set(Toxic(kind=LinkFault.PARTITION))
    wait_until(lambda: m.session_state == "SUSPENDED", 30, "the member to see its link down")
    began = time.monotonic()
    m.close()
    assert time.monotonic() - began < 5.0
    assert group.events(type="member_stopped", member=m.member_id)


def test_no_broker_yet_means_watching_brokers_ids_until_one_registers(group, kz):
    kz.create("/brokers/topics/t", json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(6)}}).encode(),
              makepath=True)
    m = group.start("m")[0]
    wait_until(lambda: group.events(type="rebalance_completed", member=m.member_id) and m.idle, 30,
               "the first rebalance")
    assert m.assignment() == set()
    attempt = group.events(type="rebalance_attempt", member=m.member_id)[-1]
    assert attempt["outcome"] == "success" and "no brokers" in attempt["detail"]
    fake_broker_nodes(kz, {})  # a broker registers: the /brokers/ids child watch fires
    wait_settled([m], kz, group.group, "t", 6)
    assert any(e["path"] == "/brokers/ids" for e in group.events(type="watch_notification", member=m.member_id))


def test_more_partitions_in_a_topic_trigger_a_rebalance(group, kz):
    fake_broker_nodes(kz, {"t": 4})
    a, b = group.start("a", "b")
    assert wait_settled([a, b], kz, group.group, "t", 4) == {a.member_id: parts(0, 1), b.member_id: parts(2, 3)}
    kz.set("/brokers/topics/t", json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(6)}}).encode())
    assert wait_settled([a, b], kz, group.group, "t", 6) == {a.member_id: parts(0, 1, 2), b.member_id: parts(3, 4, 5)}
    for m in (a, b):
        assert any(e["trigger"] == "topic-changed" for e in group.events(type="rebalance_started", member=m.member_id))


def test_a_short_disconnect_keeps_the_session_and_the_watches_work_again(group, kz, link_proxy):
    fake_broker_nodes(kz, {"t": 6})
    link = link_proxy()
    # A long session, so that kazoo notices the silence (after 2/3 of it) well before it expires.
    z = group.member("z", zk_connect=link.connect_string(group.zk_connect), **{"zookeeper.session.timeout.ms": 9000})
    z.start()
    y = group.start("y")[0]
    wait_settled([y, z], kz, group.group, "t", 6)
    session = z.zk.session_id
    runs_before = len(group.events(type="rebalance_started", member=z.member_id))

    link.set(Toxic(kind=LinkFault.PARTITION))
    down_ns = wait_for_state(group, z, "SUSPENDED")
    link.set(None)
    wait_for_state(group, z, "CONNECTED", since_ns=down_ns)
    wait_until(lambda: z.idle, 30, "z to finish its reconnect")
    assert z.zk.session_id == session  # same session: its ephemerals never went away
    assert z.assignment() == parts(3, 4, 5)
    assert len(group.events(type="rebalance_started", member=z.member_id)) == runs_before  # nothing changed

    x = group.start("x")[0]  # the re-armed ids watch must tell z of the join
    views = wait_settled([x, y, z], kz, group.group, "t", 6)
    assert views == {x.member_id: parts(0, 1), y.member_id: parts(2, 3), z.member_id: parts(4, 5)}
    assert len(group.events(type="rebalance_started", member=z.member_id)) > runs_before


def test_auto_commit_runs_on_its_own_thread_through_a_long_rebalance(group, kz):
    """0.8 commits from a scheduler thread of its own (kafka-consumer-autocommit), not from the watcher
    executor: a rebalance that takes 3 s does not hold back the commits due every 200 ms meanwhile."""
    fake_broker_nodes(kz, {"t": 2})
    member = group.member("m", **{"auto.commit.interval.ms": 200})
    consumed = itertools.count(1)
    member.fetcher.positions = lambda: {TopicPartition("t", 0): next(consumed)}   # always something new
    real_run = member.rebalancer.run
    window: list[int] = []

    def long_rebalance(trigger: str) -> bool:
        window.append(time.monotonic_ns())
        try:
            return real_run(trigger)
        finally:
            time.sleep(3.0)
            window.append(time.monotonic_ns())

    member.rebalancer.run = long_rebalance
    member.start()
    wait_until(lambda: len(window) >= 2, 30, "the long rebalance to end")
    during = [e for e in group.events(type="offsets_committed", member=member.member_id)
              if window[0] < e["ts_ns"] < window[1]]
    assert len(during) >= 5, f"{len(during)} commits during a 3 s rebalance, one due every 200 ms"
