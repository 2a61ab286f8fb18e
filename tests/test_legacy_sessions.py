"""The 0.8 member across session expiries and reconnects, on a real ZooKeeper.

What zkclient and the Java ZooKeeper client did, and these tests hold the member to:
after an expiry, the new-session handler's rebalance and then a second one from every
listener fired again; after a reconnect within the session, the watches the server fires
for nodes changed meanwhile (even changed back); the reconnect retried about every second.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from experiments.faults.proxy import Toxic
from experiments.scenario import LinkFault
from legacy_zk.member import LegacyMember
from legacy_zk.zk import RECONNECT_BACKOFF_CAP_S
from tests import test_legacy_zk as legacy
from tests.test_legacy_zk import fake_broker_nodes, parts, wait_for_state, wait_settled, wait_until

# The same fixtures as the other legacy tests: a chroot of the shared ZooKeeper, a group, proxies.
zk_connect, kz, group, link_proxy = legacy.zk_connect, legacy.kz, legacy.group, legacy.link_proxy


def expire_session(connect: str, member: LegacyMember) -> None:
    """End a member's session on the server, as an expiry does: a second client joins the same
    session and closes it. The member's next contact is told the session expired."""
    session_id, password = member.zk.client.client_id
    twin = KazooClient(hosts=connect, client_id=(session_id, password))
    twin.start(timeout=30)
    twin.stop()
    twin.close()


def member_behind_a_proxy(group, link_proxy, name: str) -> tuple[LegacyMember, legacy.LinkProxy]:
    """A started member whose ZooKeeper link goes through a fault proxy. RESET drops its connection at
    once; its 20 s session outlives the disconnects here."""
    link = link_proxy()
    member = group.member(name, zk_connect=link.connect_string(group.zk_connect),
                          **{"zookeeper.session.timeout.ms": 20000})
    member.start()
    return member, link


def session_states(members: legacy.Group, member: LegacyMember) -> list[tuple[str, int]]:
    return [(e["state"], e["ts_ns"]) for e in members.events(type="session_state", member=member.member_id)]


def test_after_an_expiry_the_returning_member_rebalances_twice(group, kz):
    fake_broker_nodes(kz, {"t": 6})
    y, z = group.start("y", "z")
    wait_settled([y, z], kz, group.group, "t", 6)

    expire_session(group.zk_connect, z)
    wait_until(lambda: group.events(type="partitions_lost", member=z.member_id), 30, "z to learn of the expiry")
    views = wait_settled([y, z], kz, group.group, "t", 6)
    assert views == {y.member_id: parts(0, 1, 2), z.member_id: parts(3, 4, 5)}

    lost_ns = next(ts for state, ts in session_states(group, z) if state == "LOST")
    triggers = [e["trigger"] for e in group.events(type="rebalance_started", member=z.member_id, since_ns=lost_ns)]
    # First the new-session handler's rebalance, then the one every re-fired listener asked for.
    assert len(triggers) == 2, triggers
    assert triggers[0] == "new-session"
    assert set(triggers[1].split(",")) == {"ids-changed", "topic-changed"}


def test_a_member_that_expired_and_returned_while_another_was_disconnected_is_not_missed(group, kz, link_proxy):
    fake_broker_nodes(kz, {"t": 6})
    z, link = member_behind_a_proxy(group, link_proxy, "z")
    w, y = group.start("w", "y")
    wait_settled([w, y, z], kz, group.group, "t", 6)
    ids_path = f"/consumers/{group.group}/ids"
    members_before = kz.get_children(ids_path)
    session = z.zk.session_id

    link.set(Toxic(kind=LinkFault.RESET))
    cut_ns = wait_for_state(group, z, "SUSPENDED")
    w_session = w.zk.session_id
    expire_session(group.zk_connect, w)
    # w (a fixed consumer.id) comes back under the same name, in a new session.
    wait_until(lambda: w.zk.session_id != w_session and w.zk.connected
               and kz.exists(f"{ids_path}/{w.member_id}") is not None
               and kz.exists(f"{ids_path}/{w.member_id}").ephemeralOwner == w.zk.session_id,
               30, "w to re-register in a new session")
    assert sorted(kz.get_children(ids_path)) == sorted(members_before)  # the same members as before the cut

    link.set(None)
    wait_for_state(group, z, "CONNECTED", since_ns=cut_ns)
    wait_until(lambda: group.events(type="rebalance_started", member=z.member_id, since_ns=cut_ns), 30,
               "z to rebalance after its reconnect")
    views = wait_settled([w, y, z], kz, group.group, "t", 6)
    assert z.zk.session_id == session  # a reconnect, not an expiry
    assert views[z.member_id] == parts(4, 5)
    # The ids children changed (and changed back) while z was away: the server would have fired
    # z's re-sent child watch, and 0.8 rebalanced.
    triggers = [e["trigger"] for e in group.events(type="rebalance_started", member=z.member_id, since_ns=cut_ns)]
    assert triggers and "ids-changed" in triggers[0].split(",")


def test_a_watch_on_brokers_ids_is_set_again_after_a_reconnect(group, kz, link_proxy):
    fake_broker_nodes(kz, {"t": 2})
    m, link = member_behind_a_proxy(group, link_proxy, "m")
    wait_settled([m], kz, group.group, "t", 2)

    # The broker leaves; a topic notification makes m rebalance, find no broker, and watch /brokers/ids.
    kz.delete("/brokers/ids/0")
    kz.set("/brokers/topics/t", kz.get("/brokers/topics/t")[0])
    wait_until(lambda: any("no brokers" in e["detail"] for e in group.events(type="rebalance_attempt"))
               and m.idle, 30, "m to find no broker")

    link.set(Toxic(kind=LinkFault.RESET))
    down_ns = wait_for_state(group, m, "SUSPENDED")
    link.set(None)
    back_ns = wait_for_state(group, m, "CONNECTED", since_ns=down_ns)
    wait_until(lambda: m.idle, 30, "m to finish its reconnect's rebalance")

    fake_broker_nodes(kz, {})  # the broker returns after the reconnect: only a watch set again sees it
    wait_until(lambda: [e for e in group.events(type="rebalance_started", member=m.member_id, since_ns=back_ns)
                        if "brokers-changed" in e["trigger"].split(",")], 30, "m to rebalance on the broker's return")


def test_the_reconnect_backoff_is_capped_at_a_second(group, kz):
    fake_broker_nodes(kz, {"t": 2})
    m = group.start("m")[0]
    wait_settled([m], kz, group.group, "t", 2)
    policy = m.zk.reconnect_retry
    assert m.zk.client._conn_retry is policy  # the policy the client reconnects with

    # Replay the policy on twelve failed connection attempts, recording the waits between them.
    waits: list[float] = []
    attempts = iter(range(13))
    replay = policy.copy()
    replay.sleep_func = waits.append
    replay.interrupt = None

    def connect() -> str:
        if next(attempts) < 12:
            raise ConnectionLoss()
        return "connected"

    assert replay(connect) == "connected"
    assert len(waits) == 12
    assert max(waits) <= RECONNECT_BACKOFF_CAP_S
    assert waits[-1] == RECONNECT_BACKOFF_CAP_S  # it does reach the cap: about a second between tries
