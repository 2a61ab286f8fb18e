"""The server faults in virtual time: what each does to each generation, and what is not played.

- `coordinator_kill` / `broker_kill` and their restarts, on the two coordinator protocols: the broker cluster
  (`experiments.sim.brokers.Cluster`): the coordinator moves once a survivor declares the dead broker gone, the
  group is replayed there after the load delay, the members find it (`experiments.sim.failover`), and the data
  partitions the dead broker led take and give no record until they move (`brokers.DataPath`).
- the same on 0.8: the group lives in ZooKeeper, so the group is untouched; the dead broker's registration
  (`/brokers/ids/<id>`, an ephemeral node of its ZooKeeper session, `broker/zk.py`) goes once that session
  expires and comes back with the restart. 0.8's members watch /brokers/ids only after a rebalance that found
  no broker, so no watch fires. With records the brokers' data path is the coordinators' (`brokers.DataPath`: the
  lab's brokers move a dead broker's partitions the same way whatever the generation), on a cluster that hosts
  no group; 0.8's fetcher is kafka-python's KafkaConsumer, whose reconnect backoff grows to 30 s as the
  producer's does (the coordinator clients' fetcher caps it at 1 s).
- `zk_isolate` on the two coordinator protocols: nothing. Their brokers are started without ZooKeeper (the
  runner passes `zk` to the cluster only for a generation that needs it) and their members never talk to it,
  so the fault is recorded and has no effect, as in the real runs.
- `zk_isolate` on 0.8: the ZooKeeper model is one server, so the ensemble is modelled around it
  (`ZkEnsemble`): each member's session sits on a node of its own draw (kazoo shuffles the hosts); the cut-off
  node notices it has lost its quorum after syncLimit ticks (`zkensemble`'s 4 x 500 ms) and drops its clients,
  which reconnect to another node at kazoo's first retry (`legacy_zk.zk.reconnect_retry`), within the session.
  When the cut-off node led the ensemble (taken to be the highest id, which wins the first election when every
  node starts empty), the other two drop their clients too and elect a leader (ZooKeeper's finalizeWait, 200 ms)
  before anyone reconnects. With records the members go on fetching meanwhile (the data link is up).

Not played: `zk_kill`, `zk_restart`, `zk_pause` (`unplayed_server_faults` names them), and an isolation whose
reconnection would outlast the members' session (a new session: 0.8's re-registration, not modelled here)."""

from __future__ import annotations

import json
import random

from experiments.scenario.actions import Action
from experiments.sim.brokers import Cluster, DataPath
from experiments.sim.classic_coordinator import Coordinator
from experiments.sim.failover import FailoverClassicMember, FailoverKip848Member
from experiments.sim.kip848_coordinator import Coordinator as Kip848Coordinator
from legacy_zk.registry import BROKER_IDS
from legacy_zk.zk import reconnect_retry
from rebalance.backends import GroupProtocol
from zkensemble.config import EnsembleConfig

KILLS = {Action.COORDINATOR_KILL, Action.BROKER_KILL}
RESTARTS = {Action.COORDINATOR_RESTART, Action.BROKER_RESTART}
SERVER_FAULTS = KILLS | RESTARTS | {Action.ZK_ISOLATE}
BROKER_ZK_SESSION_MS = 6_000     # broker/zk.py: the broker's registration session (KazooClient timeout=6.0)
QUORUM_LOST_MS = EnsembleConfig.tick_ms * EnsembleConfig.sync_limit   # a node cut off notices after syncLimit ticks
ELECTION_MS = 200                # ZooKeeper's finalizeWait: two nodes agreeing on a new leader


def unplayed_server_faults(scenario, schedule, coordinated: bool, backend: str, *, warm_start: bool = False) -> str | None:
    """Why a server fault of the schedule is not played on `backend`, or None."""
    steps = [step for step in schedule.steps if Action(step.action) in SERVER_FAULTS]
    if warm_start and steps:
        return "a warm start with a server fault is not simulated: the group starts on one broker by joining"
    session_ms = scenario.group.session_timeout_ms
    if not coordinated and any(step.action == Action.ZK_ISOLATE.value for step in steps) \
            and session_ms <= ZkEnsemble.outage_ms(True):
        return (f"zk_isolate on {backend}: a session of {session_ms} ms would expire before its member "
                f"reconnects ({ZkEnsemble.outage_ms(True):.0f} ms), and a new session is not modelled here")
    return fail_back_within_run(scenario, schedule) if coordinated else None


def fail_back_within_run(scenario, schedule) -> str | None:
    """Why the brokers' data path is not played through this schedule's restarts, or None."""
    end_s = scenario.duration + scenario.settle
    back = [step for step in schedule.steps if Action(step.action) in RESTARTS
            and step.at + scenario.cluster.fail_back_delay_ms / 1000 < end_s]
    if back:
        return (f"line {back[0].line}: the restarted broker would lead its partitions again within the run "
                f"(fail_back_delay_ms = {scenario.cluster.fail_back_delay_ms}); the data partitions moving back "
                f"are not modelled")
    return None


def node_of(target: str) -> int:
    """`broker-1`, `zk-0` -> 1, 0."""
    return int(target.rsplit("-", 1)[1])


class ServerFaults:
    """The server faults of one simulated run."""

    def __init__(self, play, *, records: bool = False) -> None:
        self.play = play
        self.cluster: Cluster | None = None
        cluster = play.scenario.cluster
        coordinated = play.profile.group_protocol in (GroupProtocol.CLASSIC, GroupProtocol.CONSUMER)
        if coordinated or records:   # 0.8's group lives in ZooKeeper: its brokers matter for the data path only
            self.cluster = Cluster(play.sim, brokers=cluster.brokers, group=play.scenario.group.name,
                                   make_coordinator=self._coordinator if coordinated else _no_group,
                                   session_timeout_ms=cluster.broker_session_timeout_ms,
                                   load_delay_ms=cluster.coordinator_load_delay_ms,
                                   fail_back_delay_ms=cluster.fail_back_delay_ms)
            self.cluster.data.track(play.topics)
        if coordinated:
            play.coordinator = self.cluster.latest
            play.serving = self.cluster
            play.classic_member, play.kip848_member = FailoverClassicMember, FailoverKip848Member

    @staticmethod
    def wanted(schedule) -> bool:
        return any(Action(step.action) in SERVER_FAULTS for step in schedule.steps)

    def _coordinator(self, node: int, log: list, loaded: bool):
        play = self.play
        recorder = play.recorders.of(f"coordinator-{node}")
        group = play.scenario.group.name
        if play.profile.group_protocol is GroupProtocol.CONSUMER:
            config = play.consumer_group_config
            if loaded:
                return Kip848Coordinator.loaded(play.sim, group, recorder, play.topics, config, log, node=node)
            return Kip848Coordinator(play.sim, group, recorder, play.topics, config, node=node, log=log)
        if loaded:
            return Coordinator.loaded(play.sim, group, recorder, log, node=node)
        return Coordinator(play.sim, group, recorder, node=node, log=log)

    # -- what the play hands over -------------------------------------------------------------------------

    def fetching(self, app) -> None:
        if self.cluster is not None:
            data, name = self.cluster.data, app.client.name
            backoff = DataPath.KAFKA_PYTHON_FETCHER_BACKOFF if self.play.profile.needs_zookeeper else DataPath.FETCHER_BACKOFF
            app.readable = lambda tp: data.readable(name, (tp.topic, tp.partition), self.play.sim.now_ms, backoff)

    def producing(self, producer) -> None:
        if self.cluster is not None:
            self.cluster.data.producer = producer

    # -- the faults ---------------------------------------------------------------------------------------

    def start(self, action: Action, target: str) -> None:
        node = node_of(target)
        if action in KILLS:
            self._kill(node)
        elif action in RESTARTS:
            self._restart(node)
        elif action is Action.ZK_ISOLATE and self.play.zk is not None:
            members = [member for member in self.play.members.values() if member.alive]
            ZkEnsemble(self.play.sim, self.play.scenario.cluster.zookeeper_nodes, self.play.seed).isolate(node, members)

    def heal(self, action: Action, target: str) -> None:
        """The end of a timed server fault (`zk_isolate`): the node rejoins; its clients have moved away already."""

    def _kill(self, node: int) -> None:
        if self.cluster is not None:
            self.cluster.kill(node)
        if self.play.zk is not None:
            zk, path = self.play.zk, f"{BROKER_IDS}/{node}"
            self.play.sim.after(BROKER_ZK_SESSION_MS, lambda: zk.delete(path) if path in zk.nodes else None)

    def _restart(self, node: int) -> None:
        if self.cluster is not None:
            self.cluster.restart(node)
        if self.play.zk is not None:
            zk, path = self.play.zk, f"{BROKER_IDS}/{node}"
            if path not in zk.nodes:
                zk.create(path, json.dumps({"host": "127.0.0.1", "port": 9092 + node}).encode())


class _NoGroup:
    """What a 0.8 cluster's broker runs for the group: nothing (the group lives in ZooKeeper)."""

    def stop(self, *, unload: bool) -> None:
        pass


def _no_group(node: int, log: list, loaded: bool) -> _NoGroup:
    return _NoGroup()


class ZkEnsemble:
    """Which node of the ensemble each 0.8 member's session sits on, and what a node cut off does to them."""

    def __init__(self, sim, nodes: int, seed: int) -> None:
        self.sim, self.nodes, self.seed = sim, nodes, seed
        self.leader = nodes - 1

    def home(self, member: str) -> int:
        return random.Random(f"{self.seed}/zookeeper/{member}").randrange(self.nodes)

    @staticmethod
    def outage_ms(leader: bool) -> float:
        """From the cut to a dropped client's reconnection: the quorum lost, an election if the leader went, then
        kazoo's first retry that finds a serving node."""
        retry, waited = reconnect_retry(), 0.0
        ready, delay = (ELECTION_MS if leader else 0.0), retry.delay
        while True:
            waited += delay * 1000
            if waited >= ready:
                return QUORUM_LOST_MS + waited
            delay = min(delay * retry.backoff, retry.max_delay)

    def isolate(self, node: int, members) -> None:
        leader = node == self.leader
        hit = [member for member in members if leader or self.home(member.name) == node]
        self.sim.after(QUORUM_LOST_MS, lambda: [member.suspend() for member in hit])
        self.sim.after(self.outage_ms(leader), lambda: [member.reconnect() for member in hit])
