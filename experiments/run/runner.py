"""The runner: one scenario on one backend, from an empty machine to RUN_DIR/events and RUN_DIR/lock.json.
`Run.main` calls one method per phase, in this order (the phase events carry the names on the left):

    setup      ZooKeeper (when the cluster has it), brokers, topics, fault proxies
    warmup     members start; wait until the group owns every partition, each exactly once
    timeline   (`play`) the producer starts; the resolved schedule is applied step by step (t = 0 here);
               a step whose entry says `after = "stable"` first waits for a stable group (at most its
               `timeout`), and the rest of the timeline moves back by the wait; the producer (unless its
               `duration` says otherwise) produces until the timeline's end, waits included
    heal       every fault still in force is undone (links, pauses, servers)
    settle     the group gets `settle` seconds to converge
    teardown   members leave (SIGTERM), producer, brokers, ZooKeeper and proxies stop

Teardown always runs: after Ctrl-C, SIGTERM, an error, or the unexpected death of any part (a member,
the producer or a broker exiting without being told to). Every child process has its own process
group and dies with the runner (parent-death signal), so nothing is orphaned. Events written so far
stay in RUN_DIR/events/; lock.json says how the run ended.

What the backend needs (ZooKeeper, a coordinator in the brokers), how its members connect and what
their ids are is its profile's answer (rebalance.backends). Each member host gets its members' configs
as one JSON file (experiments.run.member_configs). Link faults need the member's traffic to pass proxies of
its own (experiments.run.member_links); in a shared host process (per_process > 1) each member has proxies
and a connect string / bootstrap list of its own. The run holds its servers (experiments.run.server_processes)
and its clients, the member hosts and the producer (experiments.run.client_processes); a comparison runs one
scenario on each backend in turn (experiments.run.comparison).

Faults: what each action is, `experiments/scenario/actions.py`; who carries it out, `experiments/faults/
registry.py` (member faults in `members.py`, server faults in `server.py`, links through the proxies);
its fault_started / fault_stopped events, `experiments/faults/history.py`.

Witnesses: the servers' own counters (`experiments/run/witness.py`: ZooKeeper's `mntr`, or the brokers'
request counts when they host the coordinator) are recorded as `server_counters` events (`experiments/run/
samplers.py`, beside the machine's load once a second) at every phase boundary, at the start and end of
the warm-up's quiet window (the baseline of background traffic), just before each membership step (join,
leave, crash, restart, pause; a phase of its own for joins and scaling) and `AFTER_CHANGE_S` after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import traceback
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from experiments.faults import registry
from experiments.faults.history import FaultHistory
from experiments.faults.members import STOP_TIMEOUT_S, MemberFaults
from experiments.faults.process import RUN_MARKER_ENV
from experiments.faults.proxy import ProxyHub
from experiments.faults.server import ServerFaults
from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import RunFolder
from experiments.run.client_processes import ClientProcesses
from experiments.run.conditions import judge
from experiments.run.describe import describe_run
from experiments.run.member_configs import check_member_settings
from experiments.run.member_links import MemberLinks
from experiments.run.progress import Progress
from experiments.run.run_evidence import gather
from experiments.run.samplers import Samplers
from experiments.run.server_processes import ServerProcesses
from experiments.run.settling import running_before
from experiments.scenario import Scenario, Schedule, Step, resolve
from experiments.scenario.actions import Target, phase_name, spec_of
from experiments.scenario.model import on_backend
from rebalance import events as ev
from rebalance.backends import canonical_name, profile
from rebalance.events import EventRecorder

STABLE_QUIET_S = 2.0
AFTER_CHANGE_S = 5.0    # the servers' counters are read again this long after a membership step


class Aborted(Exception):
    """The run ends early: interrupted, or a part died."""


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    backend: str
    run_dir: Path
    run_id: str = ""
    zk_provider: str = "auto"
    progress: bool = True


@dataclass
class RunResult:
    run_dir: Path
    status: str                 # completed | interrupted | failed
    reason: str = ""


def default_run_dir(scenario: Scenario, root: Path = Path(RUNS_DIR)) -> Path:
    return root / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run(scenario: Scenario, options: RunOptions, *, schedule: Schedule | None = None) -> RunResult:
    """Run one scenario on one backend (blocking). `schedule` lets a comparison share one resolution."""
    return asyncio.run(Run(scenario, options, schedule or resolve(scenario)).main())


class Run:
    def __init__(self, scenario: Scenario, options: RunOptions, schedule: Schedule) -> None:
        options = replace(options, backend=canonical_name(options.backend))   # `modern` runs as `classic`
        if options.backend not in scenario.backends:
            raise ValueError(f"scenario {scenario.name!r} is for {', '.join(scenario.backends)}, "
                             f"not {options.backend!r}")
        self.profile = profile(options.backend)
        scenario = on_backend(scenario, options.backend)   # "default" strategy: the backend's own
        check_member_settings(scenario, self.profile)
        self.scenario = scenario
        self.schedule = schedule
        self.backend = options.backend
        self.options = options
        self.run_dir = options.run_dir.resolve()
        self.folder = RunFolder(self.run_dir)
        self.events_dir = self.folder.events
        self.run_id = options.run_id or f"{scenario.name}-{options.backend}-{uuid.uuid4().hex[:8]}"
        self.recorder: EventRecorder | None = None
        self.proxies = ProxyHub(seed=scenario.seed)
        self.server_processes = ServerProcesses(scenario, self.profile, self.folder, run_id=self.run_id,
                                                zk_provider=options.zk_provider, check_abort=self.check_abort)
        self.servers = ServerFaults(None, None)
        self.samplers: Samplers | None = None   # once the recorder is open
        self.phase = ev.RunnerPhase.SETUP
        self.t0_ns: int | None = None
        self.late_ns = 0                    # how far waits for a stable group have moved the timeline back
        self.waiting_since_ns: int | None = None   # a step is being held back for a stable group since then
        self.started_ms = int(time.time() * 1000)
        self.applied: list[dict] = []
        self.history: FaultHistory | None = None   # once the recorder is open
        self.target_tasks: dict[str, asyncio.Future] = {}
        self.step_tasks: list[asyncio.Future] = []
        self.witness_tasks: list[asyncio.Future] = []
        self.links = MemberLinks(self.profile, self.proxies, self.folder.advertised)
        self.members_proxied = self.links.proxied
        self.clients = ClientProcesses(scenario, self.profile, schedule, self.folder, run_id=self.run_id,
                                       links=self.links, servers=self.server_processes)
        self.members = MemberFaults(schedule=schedule, hosts=self.clients.hosts, proxies=self.proxies,
                                    start_hosts=self.clients.start_hosts)
        self._abort = asyncio.Event()
        self._abort_reason = ""
        self.progress = Progress(self.events_dir, scenario, schedule)

    # ------------------------------------------------------------------ the whole run

    async def main(self) -> RunResult:
        self.events_dir.mkdir(parents=True, exist_ok=True)
        outer_marker = os.environ.get(RUN_MARKER_ENV)
        os.environ[RUN_MARKER_ENV] = str(self.run_dir)   # every descendant carries it: the final sweep finds them
        self.recorder = EventRecorder(self.events_dir / "runner.jsonl", run_id=self.run_id, backend=self.backend,
                                      process="runner")
        self.history = FaultHistory(self.recorder, self.member_id)
        self.samplers = Samplers(self.recorder, self.clients.hosts, self.note)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.abort, f"interrupted ({signal.Signals(signum).name})")
        self.write_lock("running")
        if self.scenario.workload.service != "none":   # before the live display: the offered load and capacity
            from rich.console import Console

            Console(stderr=True).print(f"[bold]{self.scenario.name}[/bold] on {self.backend}: "
                                       f"{self.scenario.load().line()}")
        display = asyncio.ensure_future(self.progress.show(self, live=self.options.progress))
        sampler = asyncio.ensure_future(self.samplers.host_load())
        status, reason = "completed", ""
        try:
            await self.setup()
            await self.warmup()
            await self.play()
            await self.heal()
            await self.settle()
        except Aborted:
            status = "interrupted" if self._abort_reason.startswith("interrupted") else "failed"
            reason = self._abort_reason
        except Exception as error:  # noqa: BLE001 - recorded, then everything is stopped
            status, reason = "failed", f"{type(error).__name__}: {error}"
            self.folder.runner_error.write_text(traceback.format_exc())
        finally:
            await asyncio.shield(self.teardown(status))
            sampler.cancel()
            display.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await display
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            self.write_lock(status, reason)
            self.recorder.close()
            if outer_marker is None:
                os.environ.pop(RUN_MARKER_ENV, None)
            else:
                os.environ[RUN_MARKER_ENV] = outer_marker
        self.judge_conditions()
        self.progress.final(self, status, reason)
        return RunResult(self.run_dir, status, reason)

    def judge_conditions(self) -> None:
        """Whether the machine carried the run, from what the run recorded: conditions.json, and its line first
        among what the run prints at its end."""
        try:
            conditions = judge(gather(self.run_dir))
        except Exception as error:  # noqa: BLE001 - a run's events are kept whatever the check makes of them
            self.note(f"judging the run's conditions failed: {error!r}")
            return
        self.folder.conditions.write_text(conditions.dumps())
        from rich.console import Console

        Console(stderr=True).print(conditions.line(), markup=False, highlight=False, soft_wrap=True)

    def abort(self, reason: str) -> None:
        if not self._abort.is_set():
            self._abort_reason = reason
            self._abort.set()

    def check_abort(self) -> None:
        if self._abort.is_set():
            raise Aborted(self._abort_reason)

    async def sleep_until(self, deadline_ns: int) -> None:
        """Wait until a monotonic deadline, or raise Aborted at once when the run is ended."""
        remaining = (deadline_ns - time.monotonic_ns()) / 1e9
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._abort.wait(), remaining)
        self.check_abort()

    async def enter_phase(self, name: str, **fields: object) -> None:
        self.phase = name
        self.recorder.emit(ev.PHASE, name=name, **fields)
        await self.samplers.server_counters(f"phase {name}")

    async def witness_after(self, step: Step) -> None:
        with contextlib.suppress(Aborted):
            await self.sleep_until(time.monotonic_ns() + int(AFTER_CHANGE_S * 1e9))
            await self.samplers.server_counters(f"after {step.fault_id}")

    # ------------------------------------------------------------------ setup

    async def setup(self) -> None:
        await self.enter_phase(ev.RunnerPhase.SETUP)
        servers = self.server_processes
        await servers.start_zookeeper()
        await self.start_proxies()    # before the brokers: they read the advertise map at start
        await servers.start_brokers(self.links.advertise_map)
        self.servers = ServerFaults(servers.ensemble, servers.cluster)
        self.samplers.witness = servers.witness()
        self.check_abort()
        await servers.create_topics()
        self.write_lock("running")
        self.watchdog = asyncio.ensure_future(self.watch_parts())

    async def start_proxies(self) -> None:
        proxied = set(self.schedule.proxied_members())
        await self.links.add_proxies(
            [member for host in self.schedule.hosts for member in host.members if member in proxied],
            zk_nodes=self.scenario.cluster.zookeeper_nodes, brokers=self.scenario.cluster.brokers,
            zk_upstream=self.server_processes.zk_address, broker_upstream=self.server_processes.broker_address)
        self.links.write_advertise_map()

    # ------------------------------------------------------------------ warm-up and play

    async def warmup(self) -> None:
        await self.enter_phase(ev.RunnerPhase.WARMUP, members=len(self.schedule.initial_members))
        await self.clients.start_hosts(self.schedule.initial_members)
        await self.arm_wave_hosts()
        deadline = time.monotonic() + self.scenario.group.warmup_timeout
        members = [self.member_id(name) for name in self.schedule.initial_members]
        partitions = self.progress.all_partitions()
        stable_since = None
        while time.monotonic() < deadline:
            await self.sleep_until(time.monotonic_ns() + 200_000_000)
            self.progress.poll()
            # the judge of `after = "stable"` (and of the simulated warm-up), seen to hold for the quiet window
            if self.progress.settling.stable(members, partitions, now_ns=time.monotonic_ns(), quiet_ns=0):
                if stable_since is None:
                    stable_since = time.monotonic()
                    await self.samplers.server_counters("quiet start")
                if time.monotonic() - stable_since >= STABLE_QUIET_S:
                    await self.samplers.server_counters("quiet end")
                    return
            else:
                stable_since = None
        self.recorder.emit(ev.PHASE, name=ev.WARMUP_TIMEOUT, detail=self.progress.ownership_summary())

    async def play(self) -> None:
        self.t0_ns = time.monotonic_ns()
        await self.enter_phase("timeline", duration_s=self.scenario.duration)
        self.write_lock("running")
        await self.clients.start_producer()
        for index, step in enumerate(self.schedule.steps):
            await self.sleep_until(self.t0_ns + self.late_ns + int(step.at * 1e9))
            if step.params.get("after") == "stable":
                step = await self.wait_until_stable(step, index)
            await self.apply(step)
        await self.sleep_until(self.t0_ns + self.late_ns + int(self.scenario.duration * 1e9))
        if self.clients.producer is not None and self.scenario.producer.duration is None:
            await self.clients.producer.stop(STOP_TIMEOUT_S)   # the timeline's end, however late its waits made it

    async def wait_until_stable(self, step: Step, index: int) -> Step:
        """Hold a step back until the group is stable again (experiments.run.settling), at most its
        `timeout`; every later step and the timeline's end move back by the wait. The step's event carries
        how long it waited and whether the group was stable (`stable` false: the step went ahead on the
        timeout, and the change before it may overlap this one)."""
        began = time.monotonic_ns()
        self.waiting_since_ns = began
        deadline = began + int(float(step.params["timeout"]) * 1e9)
        members = [self.member_id(name) for name in running_before(self.schedule, index)]
        partitions = self.progress.all_partitions()
        while True:
            self.progress.poll()
            now = time.monotonic_ns()
            stable = self.progress.settling.stable(members, partitions, now_ns=now, quiet_ns=int(STABLE_QUIET_S * 1e9))
            if stable or now >= deadline:
                break
            await self.sleep_until(min(deadline, now + 200_000_000))
        self.late_ns += now - began
        self.waiting_since_ns = None
        params = {**step.params, "waited_s": round((now - began) / 1e9, 3), "stable": stable}
        if not stable:
            params["unstable"] = self.progress.settling.why_not(members, partitions)
        return replace(step, params=params)

    # ------------------------------------------------------------------ members

    async def arm_wave_hosts(self) -> None:
        """The host processes of every later join wave, started now and armed: process up, clients made and
        connected, nobody joined. Their members join when the step comes, at the moment it says (plus the
        scenario's declared spread), not as fast as two cores can start the processes."""
        hosts = self.schedule.wave_hosts() if self.scenario.group.prestart else ()
        if hosts:
            members = [member for host in hosts for member in host.members]
            await self.clients.start_hosts(members, armed=True)
            self.members.arm(members)

    # ------------------------------------------------------------------ timeline steps

    async def apply(self, step: Step) -> None:
        """Start a step without holding up the timeline (a confirmation may take seconds); steps on
        the same target still run in schedule order."""
        self.applied.append({"fault_id": step.fault_id, "op": step.op, "at": step.at,
                             "offset_s": round((time.monotonic_ns() - self.t0_ns) / 1e9, 3),
                             **({"waited_s": step.params["waited_s"], "stable": step.params["stable"]}
                                if "waited_s" in step.params else {})})
        keys = step.targets or ("",)
        previous = [task for task in dict.fromkeys(self.target_tasks.get(key) for key in keys) if task]
        task = asyncio.ensure_future(self._apply(step, previous))
        for key in keys:
            self.target_tasks[key] = task
        self.step_tasks.append(task)

    async def _apply(self, step: Step, previous: list[asyncio.Future]) -> None:
        if previous:
            await asyncio.wait(previous)
        try:
            await self._apply_now(step)
        except Exception as error:  # noqa: BLE001 - a failed step ends the run, it does not vanish
            self.abort(f"step {step.fault_id} ({step.action} {','.join(step.targets)}) failed: "
                       f"{type(error).__name__}: {error}")

    async def _apply_now(self, step: Step) -> None:
        handler = registry.handler_for(step.action)
        membership = spec_of(step.action).target in (Target.GROUP, Target.MEMBER)
        if membership and spec_of(step.action).is_fault:
            await self.samplers.server_counters(f"before {step.fault_id}")   # a join's phase mark reads them already
        if not spec_of(step.action).is_fault:
            waited = {"params": dict(step.params)} if "waited_s" in step.params else {}
            await self.enter_phase(phase_name(step.action, step.targets, step.params), fault_id=step.fault_id,
                                   targets=list(step.targets), **waited)
            await handler.start(self, step)
        elif step.op == "heal":
            await self.history.heal(step, lambda: handler.heal(self, step))
        else:
            await self.history.start(step, lambda: handler.start(self, step))
        if membership:
            self.witness_tasks.append(asyncio.ensure_future(self.witness_after(step)))   # holds nothing up

    def member_id(self, name: str) -> str:
        """The id a member's own events carry (legacy: 0.8's `<group>_<consumer.id>`)."""
        return self.profile.member_id(self.scenario.group.name, name)

    # ------------------------------------------------------------------ heal, settle, teardown

    async def heal(self) -> None:
        await self.enter_phase(ev.RunnerPhase.HEAL)
        if self.step_tasks:
            await asyncio.wait(self.step_tasks)
        self.check_abort()
        self.proxies.heal_all()
        await self.members.heal_all()
        await self.servers.heal_all()
        self.history.final_heal(time.monotonic_ns())

    async def settle(self) -> None:
        """The group gets the scenario's `settle` seconds to converge, with every fault healed."""
        await self.enter_phase(ev.RunnerPhase.SETTLE)
        await self.sleep_until(time.monotonic_ns() + int(self.scenario.settle * 1e9))

    async def teardown(self, status: str) -> None:
        self.phase = ev.RunnerPhase.TEARDOWN
        if self.recorder is not None:
            self.recorder.emit(ev.PHASE, name=ev.RunnerPhase.TEARDOWN, status=status)
            await self.samplers.server_counters("phase teardown")
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None:
            watchdog.cancel()
        for task in (*self.step_tasks, *self.witness_tasks):
            task.cancel()
        self.proxies.heal_all()     # members leave cleanly only if they can reach their servers
        await self.clients.stop(self.note)
        await self.server_processes.stop(self.note)
        await self.proxies.stop()
        for process in self.clients.hosts.values():
            process.kill_now()

    async def watch_parts(self) -> None:
        """Any part that exits without being told to ends the run."""
        while True:
            await asyncio.sleep(0.5)
            for name, process in self.clients.hosts.items():
                if not process.running and not process.expected_exit:
                    self.abort(f"member host {name} exited by itself (code {process.process.returncode}); "
                               f"see {process.log_path}")
            producer = self.clients.producer
            if producer and not producer.running and producer.process.returncode not in (0, None):
                if not producer.expected_exit:
                    self.abort(f"the producer failed (code {producer.process.returncode}); "
                               f"see {producer.log_path}")
            if self.server_processes.cluster is not None:
                for broker in self.server_processes.cluster.brokers:
                    if not broker.alive and broker.node_id not in self.servers.brokers_killed:
                        self.abort(f"broker {broker.node_id} exited by itself; see {broker.log_path}")

    def note(self, text: str) -> None:
        with open(self.folder.runner_notes, "a") as notes:
            notes.write(text + "\n")

    # ------------------------------------------------------------------ lock file

    def write_lock(self, status: str, reason: str = "") -> None:
        self.folder.write_record(describe_run(self, status, reason))
