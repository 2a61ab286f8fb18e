"""Why a classic group rebalances: every move to PreparingRebalance carries its reason, as Kafka logs one for
each rebalance a group starts ("Preparing to rebalance group ... (reason: ...)", `GroupCoordinator.prepareRebalance`
at 3.7, `GroupMetadataManager.prepareRebalance` in the new coordinator), and the coordinator writes it into the
run's events (`coordinator_event`, `rebalance_reason`, `member_ids`)."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import JoinGroupRequest

from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from modern.classic.consumer_protocol import encode_subscription
from modern.client.connection import BrokerConnection, parse_address
from modern.coordinator.classic_group import ClassicGroupState, GroupConfig, RebalanceReason
from modern.coordinator.service import CoordinatorConfig, CoordinatorExtension
from rebalance import events as ev
from rebalance.events import EventRecorder, read_events
from rebalance.types import Subscription
from tests.test_modern_group import Sim

S = ClassicGroupState


class Watched(Sim):
    """A Sim that also keeps every transition the group reported."""

    def __init__(self, **config) -> None:
        super().__init__(**config)
        self.transitions = []

    def _take(self, out) -> None:
        super()._take(out)
        self.transitions.extend(out.transitions)

    def rebalances(self) -> list[tuple[RebalanceReason, tuple[str, ...]]]:
        """(reason, members it names) of each move to PreparingRebalance since the last call."""
        moves = [t for t in self.transitions if t.to_state is S.PREPARING_REBALANCE]
        self.transitions.clear()
        return [(t.cause.reason, t.cause.members) for t in moves]


def stable(sim: Watched, *names: str) -> tuple[dict[str, str], int]:
    sim.stable_group(*names)
    ids = {name: sim.replies[name].member_id for name in names}
    generation = sim.replies[names[0]].generation_id
    for name in names[1:]:
        sim.sync(("sync", name), ids[name], generation)
    sim.transitions.clear()
    return ids, generation


def test_each_rebalance_a_group_starts_carries_its_reason_and_the_members_it_names():
    sim = Watched()
    sim.join("a", client="a")
    assert sim.rebalances() == [(RebalanceReason.NEW_MEMBER, ("a-1",))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.join("c", client="c")
    assert sim.rebalances() == [(RebalanceReason.NEW_MEMBER, ("c-3",))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.join("a2", ids["a"], client="a")                        # the leader rejoins a stable group
    assert sim.rebalances() == [(RebalanceReason.LEADER_REJOINED, (ids["a"],))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.join("b2", ids["b"], client="b", protocols=(("range", b"other topics"),))   # a follower's metadata changed
    assert sim.rebalances() == [(RebalanceReason.METADATA_CHANGED, (ids["b"],))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.leave(ids["b"])
    assert sim.rebalances() == [(RebalanceReason.MEMBER_LEFT, (ids["b"],))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.keep_alive([ids["a"]], generation, until_ms=sim.now + 12_000)    # b's 10 s session runs out
    assert sim.rebalances() == [(RebalanceReason.SESSION_EXPIRED, (ids["b"],))]

    sim = Watched()
    ids, generation = stable(sim, "a", "b")
    sim.join("a2", ids["a"], client="a")
    sim.join("b2", ids["b"], client="b")                        # the join phase ends: generation + 1
    sim.rebalances()
    new_generation = sim.replies["a2"].generation_id
    sim.sync(("sync2", "a"), ids["a"], new_generation, {ids["a"]: b"x", ids["b"]: b"y"})
    # b heartbeats but never syncs: dropped at the rebalance timeout (30 s)
    sim.keep_alive([ids["a"], ids["b"]], new_generation, until_ms=sim.now + 31_000)
    assert sim.rebalances()[0] == (RebalanceReason.PENDING_SYNC_EXPIRED, (ids["b"],))


def test_the_reason_is_declared_in_the_event_vocabulary():
    fields = ev.VOCABULARY[ev.COORDINATOR_EVENT].fields
    assert fields["rebalance_reason"] is ev.FieldType.TEXT and fields["member_ids"] is ev.FieldType.TEXTS
    assert {reason.value for reason in RebalanceReason} >= {"new-member", "member-left", "session-expired"}


@pytest.mark.broker
def test_the_coordinator_writes_the_reason_into_the_run_events(tmp_path):
    """A JoinGroup to an in-process broker: the coordinator's `coordinator_event` for Empty -> PreparingRebalance
    names the new member."""
    path = tmp_path / "coordinator.jsonl"
    with EventRecorder(path) as recorder:
        extension = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=100)),
                                         recorder=recorder)
        with EmbeddedBroker(BrokerConfig(port=0), extensions=[extension]) as embedded:
            connection = BrokerConnection(*parse_address(embedded.bootstrap), client_id="alice", timeout_s=20)
            answer = connection.request(JoinGroupRequest[3](
                group_id="g-reasons", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=encode_subscription(Subscription(topics=("t",))))]))
            connection.close()
    moves = [e for e in read_events(path) if e["type"] == ev.COORDINATOR_EVENT
             and e.get("to_state") == S.PREPARING_REBALANCE.value]
    assert [(e["rebalance_reason"], e["member_ids"]) for e in moves] == [("new-member", [answer.member_id])]
    assert moves[0]["reason"] == f"Adding new member {answer.member_id}"
