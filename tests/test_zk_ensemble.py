"""A three-node ensemble under server faults, on real ZooKeeper, for both providers.

Every test makes its own ensemble (zk_factory) because it damages it.
"""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient, KazooState

from tests.fixtures.zk import PROVIDERS, QUICK_RECONNECT
from zkensemble import Mode, wait_until

pytestmark = [pytest.mark.zk, pytest.mark.ensemble]


class StateLog:
    """Every connection state a kazoo client went through, to assert on afterwards."""

    def __init__(self, client: KazooClient) -> None:
        self.states: list[KazooState] = []
        self._lock = threading.Lock()
        client.add_listener(self._record)

    def _record(self, state: KazooState) -> None:
        with self._lock:
            self.states.append(state)

    def seen(self, state: KazooState) -> bool:
        with self._lock:
            return state in self.states

    def last(self) -> KazooState | None:
        with self._lock:
            return self.states[-1] if self.states else None


@pytest.fixture(params=PROVIDERS)
def three(request, zk_factory):
    return zk_factory(nodes=3, provider=request.param)


def test_session_ensemble_has_one_leader(zk_ensemble):
    modes = sorted(mode.value for mode in zk_ensemble.modes())
    assert modes == ["follower", "follower", "leader"]


def test_killing_one_node_of_three_keeps_the_quorum_and_clients_reconnect(three):
    victim = three.leader()
    assert victim is not None
    others = [n for n in three.nodes if n.index != victim]
    # The client's first host is the victim (no shuffling), so the kill cuts its own connection.
    hosts = ",".join([three.nodes[victim].client_address] + [n.client_address for n in others])
    client = KazooClient(hosts=f"{hosts}/{three.chroot().rpartition('/')[2]}", timeout=10.0,
                         randomize_hosts=False, connection_retry=QUICK_RECONNECT)
    log = StateLog(client)
    client.start(timeout=30)
    try:
        client.ensure_path("/")
        client.create("/mine", b"x", ephemeral=True)
        session = client.client_id

        three.kill(victim)
        assert three.nodes[victim].mode() is Mode.DOWN
        wait_until(lambda: log.seen(KazooState.SUSPENDED), 30, "the client to notice the lost server")
        wait_until(lambda: log.last() is KazooState.CONNECTED, 60, "the client to reconnect to a survivor")
        wait_until(lambda: three.leader() in [n.index for n in others], 60, "a leader among the survivors")

        assert not log.seen(KazooState.LOST), "two of three nodes must keep the session alive"
        assert client.client_id == session
        assert client.exists("/mine") is not None  # the ephemeral node survived with the session
        client.create("/after-kill", b"y")  # and the quorum still takes writes
        assert sorted(n.mode().value for n in others) == ["follower", "leader"]

        three.restart(victim)
        assert three.nodes[victim].mode() is Mode.FOLLOWER  # same address, rejoined as a follower
    finally:
        client.stop()
        client.close()


def test_node_cut_off_from_its_peers_stops_serving_its_clients(three):
    victim = three.leader()  # the hardest case: the leader itself ends up in the minority
    assert victim is not None
    isolated = three.nodes[victim]
    client = KazooClient(hosts=f"{isolated.client_address}/{three.chroot().rpartition('/')[2]}", timeout=10.0,
                         connection_retry=QUICK_RECONNECT)
    log = StateLog(client)
    client.start(timeout=30)
    try:
        client.ensure_path("/")
        three.isolate(victim)

        three.wait_mode(victim, lambda mode: mode is Mode.NOT_SERVING, 60, "to stop serving")
        wait_until(lambda: log.seen(KazooState.SUSPENDED), 60, "its client to be disconnected")
        majority = [n for n in three.nodes if n.index != victim]
        wait_until(lambda: sorted(n.mode().value for n in majority) == ["follower", "leader"], 60,
                   "the majority to elect a leader of its own")
        # The client can reach its server but cannot get a session from it while it is cut off.
        assert log.last() is not KazooState.CONNECTED

        three.heal(victim)
        three.wait_mode(victim, lambda mode: mode is Mode.FOLLOWER, 60, "to rejoin as a follower")
        wait_until(lambda: log.last() is KazooState.CONNECTED, 60, "its client to reconnect")
        client.create("/after-heal", b"")
    finally:
        client.stop()
        client.close()


def test_paused_node_is_unresponsive_and_resumes(three):
    follower = next(n.index for n in three.nodes if n.mode() is Mode.FOLLOWER)
    three.pause(follower)
    assert three.nodes[follower].mode(timeout_s=1.0) is Mode.UNRESPONSIVE
    assert three.leader() is not None  # two of three still form a quorum
    three.resume(follower)
    three.wait_serving(follower, 60)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_restart_keeps_the_client_address_and_the_data(zk_factory, provider):
    one = zk_factory(nodes=1, provider=provider)
    hosts = one.chroot()
    client = KazooClient(hosts=hosts, timeout=10.0, connection_retry=QUICK_RECONNECT)
    client.start(timeout=30)
    try:
        client.ensure_path("/")
        client.create("/kept", b"data")
        address = one.nodes[0].client_address
        one.restart(0)
        assert one.nodes[0].client_address == address
        wait_until(lambda: client.state == KazooState.CONNECTED, 60, "the client to reconnect")
        assert client.get("/kept")[0] == b"data"
    finally:
        client.stop()
        client.close()
