"""A scenario file played in virtual time, the runner's phases in the runner's order, into a run folder.

The phases are the runner's (`experiments.run.runner`): setup, warm-up (the initial members join; the warm-up
ends once the group has been stable for 2 s), the timeline with its steps (a step declared `after = "stable"`
waits for a stable group, at most its timeout, and moves the rest of the timeline back), heal, settle and
teardown (every member leaves). Steps come from the scenario's resolver, the same schedule a real run plays.
The run's record is a RunRecord, as the runner writes it, its versions naming the simulation."""

from __future__ import annotations

import gc
from dataclasses import asdict, replace
from pathlib import Path

from experiments.faults.members import STOP_TIMEOUT_S
from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord, ScenarioSource
from experiments.run.member_configs import member_config, native_settings, workload_of
from experiments.run.provenance import process_commit, versions
from experiments.run.settling import running_before
from experiments.scenario import load
from experiments.scenario.model import Scenario, Step
from experiments.sim import host_startup, kip848, legacy
from experiments.sim.application import Application
from experiments.sim.classic import ClassicMember
from experiments.sim.classic_coordinator import Coordinator
from experiments.sim.classic_timing import ClientTiming
from experiments.sim.kernel import Simulation
from experiments.sim.kip848_coordinator import Coordinator as Kip848Coordinator
from experiments.sim.network import Network
from experiments.sim.playable import check_playable
from experiments.sim.recorders import T0_MS, T0_NS, Recorders, Tap
from experiments.sim.records import Logs, Producer
from experiments.sim.server_faults import ServerFaults
from experiments.sim.timeline_steps import TimelineSteps
from experiments.sim.zookeeper import ZooKeeper
from legacy_zk.config import LegacyConfig, reset_name
from modern.classic.member import settings_from as classic_settings
from modern.coordinator.consumer_group import ConsumerGroupConfig
from modern.kip848.client_settings import Kip848Settings
from modern.kip848.client_settings import settings_from as kip848_settings
from rebalance import events as ev
from rebalance.backends import GroupProtocol, canonical_name, profile
from rebalance.consumer_group_timing import ConsumerGroupTiming
from rebalance.events import RunnerPhase
from rebalance.member import MemberConfig

SETUP_MS = 1_000            # the servers' start: nothing to wait for here, a phase for the summary to find
STABLE_QUIET_MS = 2_000     # the runner's STABLE_QUIET_S
POLL_MS = 200               # how often the runner looks at the group
# A join wave's host process, when it was not started armed in the warm-up: its start-up (Python and the client's
# imports) before its members begin, on two cores while the group runs. Not measured.
PROCESS_START_MS = 1_500
# A host restarted whole: from its last member's close to its new process's first member, and between the new
# process's members. Measured in two real runs of seed002-mixed (KIP-848 uniform and classic cooperative-sticky,
# 2026-12-07, machine index python 0.61-0.62 s, load 0.8-1.5), two restarts each: 485, 664, 733 and 811 ms; the
# members 1.5-21.8 ms apart, 7 ms at the median (n = 16).
RESTART_PROCESS_START_MS, RESTART_MEMBER_START_MS = 700, 7
# 0.8's new process is slower, each member opening its own ZooKeeper session before it starts: two real runs of
# seed002 on 0.8 range (2026-12-07, machine index python 0.45-0.62 s), two restarts each, 1.1, 1.5, 1.7 and 1.8 s;
# its members 39-473 ms apart, 51 ms at the median in the second run (n = 8; the first's 54-170 ms).
LEGACY_RESTART_PROCESS_START_MS, LEGACY_RESTART_MEMBER_START_MS = 1_600, 50
# The runner's teardown stops every member host at once, the hosts beginning within 20 ms of each other; a host
# closes its members one after another, each once the one before has had its LeaveGroup answered (1 ms here: the
# host's own CPU, which made them about 20 ms apart in a real herd run, is not modelled).
MEMBER_CLOSE_MS, HOSTS_SPREAD_MS = 1, 20


def simulate(scenario: Scenario, backend: str, out: Path, *, seed: int | None = None,
             warm_start: bool = False, records: bool = False, events: bool = True, tap: Tap | None = None,
             shared_zookeeper: bool = False) -> RunFolder:
    """Play `scenario` on `backend` in virtual time into the run folder `out` (new or empty). `warm_start`: the
    initial members begin as a stable group their coordinator loaded, instead of joining one by one (KIP-848
    only so far; docs/simulation.md, "Warm start"). `records`: the producer runs and each member's application
    polls, handles and commits as the scenario's workload says (0.8's not through a restarted broker that leads again within the run; "Records"). `events`
    False: no event file is written, only the run's record; `tap` reads every event as it is emitted (a tally of the
    run's measures, experiments.sim.measures). `shared_zookeeper` (0.8): the ZooKeeper server shared among the
    requests in it and each attempt's registrations read as one request, for groups of thousands (docs/simulation.md,
    "Speed")."""
    backend = canonical_name(backend)
    schedule = check_playable(scenario, backend, warm_start=warm_start, records=records)
    folder = RunFolder(out)
    if folder.path.exists() and any(folder.path.iterdir()):
        raise FileExistsError(f"{out} is not empty; give a new folder")
    seed = scenario.seed if seed is None else seed
    play = _Play(scenario, backend, schedule, folder, seed, warm_start=warm_start, records=records, events=events,
                 tap=tap, shared_zookeeper=shared_zookeeper)
    # Without the cyclic collector while it plays: scanning the millions of timers and closures a large group keeps
    # alive took most of the time (the classic herd at N = 5,000: 23.4 s with it, 9.1 s without); the seed's cycles
    # are collected once it is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        play.run()
    finally:
        play.sim.discard()
        if collecting:
            gc.enable()
    return folder


def run_seed(task: tuple) -> str:
    """One seed as a task a Spark worker runs (scenario file, --set overrides, backend, seed, run folder, warm
    start, records[, shared ZooKeeper]): the same call as a seed played here, so a seed's events are the same
    wherever it ran."""
    scenario_path, overrides, backend, seed, out, warm_start, records, *shared = task
    return str(simulate(load(Path(scenario_path), overrides=overrides), backend, Path(out), seed=seed,
                        warm_start=warm_start, records=records, shared_zookeeper=bool(shared and shared[0])).path)


class _Play(TimelineSteps):
    def __init__(self, scenario: Scenario, backend: str, schedule, folder: RunFolder, seed: int, *,
                 warm_start: bool = False, records: bool = False, events: bool = True, tap: Tap | None = None,
                 shared_zookeeper: bool = False) -> None:
        self.scenario, self.backend, self.schedule, self.folder, self.seed = scenario, backend, schedule, folder, seed
        self.warm_start = warm_start
        self.profile = profile(backend)
        self._member_ids: dict[str, str] = {}
        self._judged: tuple[tuple[str, ...], list[str]] = ((), [])   # the members a wait judges, and their ids
        self.sim = Simulation(seed)
        self.run_id = f"sim-{scenario.name}-{backend}-{seed}"
        self.recorders = Recorders(folder, self.sim, run_id=self.run_id, backend=backend, write=events, tap=tap)
        self.runner = self.recorders.of("runner")
        group = scenario.group
        # The members whose host processes the runner starts armed in the warm-up: each joins the moment it is due
        self.armed = {name for host in schedule.wave_hosts() for name in host.members} if group.prestart else set()
        self.topics = {topic.name: topic.partitions for topic in scenario.topics}
        self.partitions = {f"{topic}-{p}" for topic, n in self.topics.items() for p in range(n)}
        self.network = Network(self.sim)
        self.strategy = self.profile.strategy(group.strategy)
        coordinator_events = self.recorders.of("coordinator-0")
        self.zk: ZooKeeper | None = None
        self.hosts: dict[str, legacy.Host] = {}
        if self.profile.needs_zookeeper:
            self.zk = legacy.zookeeper_of(self.sim, scenario.cluster.brokers, self.topics, shared=shared_zookeeper)
            self.legacy_config = LegacyConfig(   # 0.8's, with the scenario's [group.legacy] (auto.commit.interval.ms...)
                group_id=group.name, topics=tuple(self.topics), zookeeper_connect="sim",
                zookeeper_session_timeout_ms=group.session_timeout_ms,
                auto_commit_interval_ms=MemberConfig.auto_commit_interval_ms,
                auto_offset_reset=reset_name(MemberConfig.auto_offset_reset),
                partition_assignment_strategy=self.strategy).with_overrides(native_settings(scenario, self.profile))
            self.coordinator = None
        elif self.profile.group_protocol is GroupProtocol.CONSUMER:
            timing = ConsumerGroupTiming.from_settings(native_settings(scenario, self.profile))
            self.consumer_group_config = ConsumerGroupConfig(**asdict(timing))
            self.coordinator = Kip848Coordinator(self.sim, group.name, coordinator_events, self.topics,
                                                  self.consumer_group_config)
        else:
            self.coordinator = Coordinator(self.sim, group.name, coordinator_events)
        self.classic_member, self.kip848_member, self.serving = ClassicMember, kip848.Kip848Member, self.coordinator
        self.servers = ServerFaults(self, records=records) if ServerFaults.wanted(schedule) else None   # the brokers
        self.observed: dict[str, int] = {}    # server faults: when their effect was seen
        # the clients' settings as the real members read them from the scenario's [group.<backend>]
        config = member_config(scenario, self.profile, "m000", "127.0.0.1:9092", workload=False)
        self.timing = ClientTiming(session_timeout_ms=group.session_timeout_ms)
        self.kip848_settings: Kip848Settings | None = None
        if self.profile.group_protocol is GroupProtocol.CLASSIC:
            self.timing = ClientTiming.of(classic_settings(config, client_id="sim"), config.auto_commit_interval_ms)
        elif self.profile.group_protocol is GroupProtocol.CONSUMER:
            self.kip848_settings = kip848_settings(config, client_id="sim")
        self.members: dict[str, ClassicMember | kip848.Kip848Member | legacy.LegacyMember] = {}
        self.running: list[str] = []
        self.applied: list[dict] = []
        self.late_ms = 0.0
        self.timeline_start_ms = 0.0
        self.records_flow = False
        self.active: dict[str, dict] = {}     # faults in force: their fault_started events
        self.status = "running"
        self.logs = Logs(self.topics) if records and scenario.producer.rate > 0 else None
        self.producer: Producer | None = None

    # -- the phases, in the runner's order -----------------------------------------------------------

    def run(self) -> None:
        folder = self.folder
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.write_record(self.record("running"))
        try:
            self.play()
            self.status = "completed"
        except KeyboardInterrupt:
            self.status = "interrupted"
            raise
        except BaseException:
            self.status = "failed"
            raise
        finally:
            if self.status != "completed":
                self.phase(RunnerPhase.TEARDOWN, status=self.status)
            self.recorders.close()
            folder.write_record(self.record(self.status))

    def play(self) -> None:
        self.phase(RunnerPhase.SETUP)
        self.sim.run_until(SETUP_MS)
        self.phase(RunnerPhase.WARMUP, members=len(self.schedule.initial_members))
        if self.warm_start:
            self.start_stable(self.schedule.initial_members)
        else:
            self.start_hosts()
        if not self.wait_stable(self.scenario.group.warmup_timeout * 1000, self.schedule.initial_members):
            self.runner.emit(ev.PHASE, name=ev.WARMUP_TIMEOUT, detail={})
        self.timeline_start_ms = self.sim.now_ms
        self.phase("timeline", duration_s=self.scenario.duration)
        self.records_flow = self.scenario.producer.rate > 0   # the runner starts the producer here
        if self.logs is not None:
            topic = self.scenario.producer_topic
            self.producer = Producer(self.sim, self.logs, self.recorders.of("producer"), topic=topic,
                                     partitions=self.topics[topic], rate=self.scenario.producer.rate)
            duration = self.scenario.producer.duration
            self.producer.run(self.sim.now_ms, None if duration is None else duration * 1000)
            if self.servers is not None:
                self.servers.producing(self.producer)
        for member in self.members.values():
            if self.records_flow and isinstance(member, legacy.LegacyMember):
                member.records_flow()
        for index, step in enumerate(self.schedule.steps):
            self.sim.run_until(self.timeline_start_ms + self.late_ms + step.at * 1000)
            if step.params.get("after") == "stable":
                step = self.wait_step(step, index)
            self.apply(step)
        self.sim.run_until(self.timeline_start_ms + self.late_ms + self.scenario.duration * 1000)
        if self.producer is not None:
            self.producer.stop()   # the timeline's end, however late its waits made it (the runner's producer too)
        self.phase(RunnerPhase.HEAL)
        self.final_heal()
        self.phase(RunnerPhase.SETTLE)
        self.sim.run_until(self.sim.now_ms + self.scenario.settle * 1000)
        self.phase(RunnerPhase.TEARDOWN)
        hosts: dict[str, list[str]] = {}
        for name in self.running:
            hosts.setdefault(self.schedule.host_of(name).name, []).append(name)
        for names in hosts.values():
            begins = self.sim.rng.uniform(0, HOSTS_SPREAD_MS)
            for index, name in enumerate(names):
                self.sim.after(begins + index * MEMBER_CLOSE_MS, self.members[name].leave)
        self.sim.run_until(self.sim.now_ms + HOSTS_SPREAD_MS + max(map(len, hosts.values()), default=0)
                           * MEMBER_CLOSE_MS + 1_000)

    def phase(self, name: str, **fields: object) -> None:
        self.runner.emit(ev.PHASE, name=name, **fields)

    def wait_stable(self, timeout_ms: float, members) -> bool:
        """The warm-up's wait: until the group has been seen stable for STABLE_QUIET_MS (every member up,
        every partition owned once), at most `timeout_ms`; True when it was."""
        deadline = self.sim.now_ms + timeout_ms
        stable_since: float | None = None
        while self.sim.now_ms < deadline:
            self.sim.run_until(self.sim.now_ms + POLL_MS)
            if self.settled(members, quiet_ms=0):
                stable_since = self.sim.now_ms if stable_since is None else stable_since
                if self.sim.now_ms - stable_since >= STABLE_QUIET_MS:
                    return True
            else:
                stable_since = None
        return False

    def settled(self, names, *, quiet_ms: float) -> bool:
        """The runner's judgement (experiments.run.settling), on the events the members wrote."""
        now_ns = self.recorders.clock()[0]
        names = tuple(names)   # asked every POLL_MS of a wait: thousands of times in a large group's
        if self._judged[0] != names:
            self._judged = (names, [self.member_id(name) for name in names])
        return self.recorders.settling.stable(self._judged[1], self.partitions,
                                              now_ns=now_ns, quiet_ns=int(quiet_ms * 1_000_000))

    def wait_step(self, step: Step, index: int) -> Step:
        """A step declared `after = "stable"`: held back until nothing has moved for STABLE_QUIET_MS, at most
        its timeout; the rest of the timeline moves back by the wait."""
        began = self.sim.now_ms
        deadline = began + float(step.params["timeout"]) * 1000
        members = running_before(self.schedule, index)
        while not (stable := self.settled(members, quiet_ms=STABLE_QUIET_MS)) and self.sim.now_ms < deadline:
            self.sim.run_until(min(deadline, self.sim.now_ms + POLL_MS))
        self.late_ms += self.sim.now_ms - began
        return replace(step, params={**step.params, "waited_s": round((self.sim.now_ms - began) / 1000, 3),
                                     "stable": stable})

    def member_id(self, name: str) -> str:
        known = self._member_ids.get(name)
        if known is None:
            known = self._member_ids[name] = self.profile.member_id(self.scenario.group.name, name)
        return known

    def start(self, name: str) -> None:
        member = self.new_member(name)
        member.start()
        if self.records_flow and isinstance(member, legacy.LegacyMember):
            member.records_flow()

    def join_wave(self, step: Step) -> None:
        """A join wave as the runner plays it (experiments.faults.registry): every member due at the step's time,
        or at its declared offset (`spread_s`). Hosts started armed in the warm-up (`prestart`, the default) start
        each member when it is due; otherwise their processes start at the step and take PROCESS_START_MS first."""
        offsets = step.start_offsets_s
        now_ns = self.recorders.clock()[0]
        armed = [name in self.armed for name in step.targets]
        self.armed.difference_update(step.targets)
        self.runner.emit(ev.JOIN_WAVE, fault_id=step.fault_id, members=[self.member_id(name) for name in step.targets],
                         due_ns=[now_ns + round(offset * 1e9) for offset in offsets], armed=all(armed))
        for name, offset, ready in zip(step.targets, offsets, armed, strict=True):
            delay_ms = offset * 1000 + (0 if ready else PROCESS_START_MS)
            if delay_ms:
                self.sim.after(delay_ms, lambda name=name: self.start(name))
            else:
                self.start(name)

    def start_hosts(self) -> None:
        """The warm-up as the runner plays it: every initial member's host process started at once, and (`prestart`)
        every later wave's, armed; they share the cores while they come up (experiments.sim.host_startup), and each
        initial member begins once its host is up."""
        initial = self.schedule.initial_members
        hosts = list(dict.fromkeys(self.schedule.host_of(name).name for name in initial))
        armed = len(self.schedule.wave_hosts()) if self.scenario.group.prestart else 0
        ready = host_startup.ready_after_ms(host_startup.start_work_ms(self.sim.rng, len(hosts) + armed))
        self.network.starting(ready, host_startup.CORES)
        up = dict(zip(hosts, ready, strict=False))   # the armed hosts' times only take their share of the cores
        begun: dict[str, int] = {}
        for name in initial:
            host = self.schedule.host_of(name).name
            begun[host] = begun.get(host, -1) + 1
            self.sim.after(up[host] + begun[host] * host_startup.MEMBER_START_MS, lambda name=name: self.start(name))

    def start_stable(self, names) -> None:
        """The warm start: the members as a stable group their coordinator loaded (kip848_coordinator.Coordinator.load_stable)."""
        members = [self.new_member(name) for name in names]
        assigned = self.coordinator.load_stable(members)
        for member in members:
            member.start_stable(assigned[member.member_id], epoch=len(members))

    def new_member(self, name: str) -> ClassicMember | kip848.Kip848Member | legacy.LegacyMember:
        host_name = self.schedule.host_of(name).name
        host = self.recorders.of(host_name)
        if self.zk is not None:
            tag = f"{self.sim.rng.getrandbits(32):08x}"   # pod_client_id's tag, drawn from the seed
            member = legacy.LegacyMember(
                self.sim, self.network, self.zk, self.hosts.setdefault(host_name, legacy.Host()), host,
                name=self.member_id(name), consumer_id=f"{self.scenario.group.name}_{tag}.{name}",
                group=self.scenario.group.name, topics=self.topics, strategy=self.strategy, config=self.legacy_config,
                zk_nodes=max(self.scenario.cluster.zookeeper_nodes, 1))
            if self.logs is not None:
                member.attach(self.application_of(member))
        elif self.profile.group_protocol is GroupProtocol.CONSUMER:
            member = self.kip848_member(self.sim, self.network, self.serving, host, name=self.member_id(name),
                                         group=self.scenario.group.name, topics=self.topics,
                                         assignor=self.profile.runs_as(self.strategy), settings=self.kip848_settings)
            if self.logs is not None:
                member.attach(self.application_of(member))
        else:
            # A real member's client.id is its name behind a tag drawn anew at each start (pod_client_id), so the
            # members' ids, and the order range and round-robin hand partitions out in, are random; drawn from the seed
            tag = f"{self.sim.rng.getrandbits(32):08x}"
            member = self.classic_member(self.sim, self.network, self.serving, host, name=self.member_id(name),
                                   group=self.scenario.group.name, topics=self.topics, strategy=self.strategy,
                                   timing=self.timing, client_id=f"{tag}.{self.member_id(name)}")
            if self.logs is not None:
                member.attach(self.application_of(member))
        self.members[name] = member
        self.running.append(name)
        return member

    def application_of(self, member) -> Application:
        timing = self.kip848_settings or self.timing
        one_at_a_time = isinstance(member, legacy.LegacyMember)
        app = Application(self.sim, member, self.logs, workload_of(self.scenario, self.profile), seed=self.seed,
                          max_poll_records=legacy.RECORDS_A_POLL if one_at_a_time else self.scenario.workload.max_poll_records,
                          auto_commit_interval_ms=timing.auto_commit_interval_ms, retry_backoff_ms=timing.retry_backoff_ms)
        if self.servers is not None:
            self.servers.fetching(app)
        return app

    def leave(self, name: str) -> None:
        self.running.remove(name)
        self.members[name].leave()

    def restart(self, names) -> None:
        """A restart step as the runner plays it (experiments.faults.members, `restart`). A host process covered
        whole is stopped and started anew: SIGTERM makes each of its running members leave, each after the batch
        it is handling; once every one has closed (or the runner kills the process at STOP_TIMEOUT_S) a new
        process starts, comes up after RESTART_PROCESS_START_MS and begins its members RESTART_MEMBER_START_MS
        apart (0.8's: the LEGACY_ ones). A member of a host covered in part is stopped cleanly and started alone
        (modelled: a new process of its own, after its own close)."""
        names = list(names)
        if set(names) == set(self.schedule.host_of(names[0]).members):
            self._restart_process(names)
        else:
            for name in names:
                self._restart_process([name])

    def _restart_process(self, names: list[str]) -> None:
        closing = [name for name in names if name in self.running]
        started: list[bool] = []

        process_ms, member_ms = ((LEGACY_RESTART_PROCESS_START_MS, LEGACY_RESTART_MEMBER_START_MS) if self.zk is not None
                                 else (RESTART_PROCESS_START_MS, RESTART_MEMBER_START_MS))

        def new_process() -> None:
            if not started:
                started.append(True)
                for position, name in enumerate(names):
                    self.sim.after(process_ms + position * member_ms, lambda name=name: self.start(name))

        def closed(name: str) -> None:
            closing.remove(name)
            if not closing:
                new_process()

        def killed() -> None:   # still not closed when the runner gives up on the stop
            if not started:
                for name in list(closing):
                    self.kill(old[name])
                new_process()

        if not closing:
            new_process()
            return
        old = {name: self.members[name] for name in closing}
        for name in list(closing):
            old[name].on_stopped = lambda name=name: closed(name)
            self.leave(name)
        self.sim.after(STOP_TIMEOUT_S * 1000, killed)

    def crash(self, name: str) -> None:
        self.running.remove(name)
        self.kill(self.members[name])

    def kill(self, member) -> None:
        if isinstance(member, legacy.LegacyMember):
            member.crash(self.scenario.group.session_timeout_ms)
        else:
            member.crash()

    # -- the record ---------------------------------------------------------------------------------

    def record(self, status: str) -> RunRecord:
        scenario, group = self.scenario, self.scenario.group
        source = Path(scenario.source)
        return RunRecord(
            name=scenario.name, run_id=self.run_id, backend=self.backend, strategy=group.strategy,   # as the runner
            session_timeout_ms=group.session_timeout_ms, topics=dict(self.topics),
            members=len(self.schedule.initial_members), group=group.name, status=status,
            scenario=ScenarioSource(name=scenario.name, source=str(source),
                                    resolved={"description": scenario.description, "simulated": True,
                                              **({"zookeeper": "shared"} if self.zk and self.zk.shared else {})}),
            seed=self.seed, schedule=self.schedule.to_json(), applied=tuple(self.applied),
            timeline_start_ns=T0_NS + round(self.timeline_start_ms * 1_000_000), started_ms=T0_MS,
            ended_ms=T0_MS + int(self.sim.now_ms),
            hosts={host.name: tuple(host.members) for host in self.schedule.hosts},
            member_ids={name: self.member_id(name) for name in self.members},
            versions={**versions(), "simulation": "virtual time"}, commit=process_commit())
