"""The runner: one scenario on one backend, from an empty machine to RUN_DIR/events and RUN_DIR/lock.json.

    setup      ZooKeeper (when the cluster has it), brokers, topics, fault proxies
    warmup     members start; wait until the group owns every partition, each exactly once
    timeline   the producer starts; the resolved schedule is applied step by step (t = 0 here)
    heal       every fault still in force is undone (links, pauses, servers)
    settle     the group gets `settle` seconds to converge
    teardown   members leave (SIGTERM), producer, brokers, ZooKeeper and proxies stop

Teardown always runs: after Ctrl-C, SIGTERM, an error, or the unexpected death of any part (a member,
the producer or a broker exiting without being told to). Every child process has its own process
group and dies with the runner (parent-death signal), so nothing is orphaned. Events written so far
stay in RUN_DIR/events/; lock.json says how the run ended.

Link faults need the member's traffic to pass a proxy (experiments.faults.proxy). Members that some
link fault targets get one proxy per server per link:
- legacy: `coord` = the member's ZooKeeper connect string points at its own proxies; `data` = the
  brokers advertise the member's proxies to it (advertise map keyed by its client id, the member name);
- modern: the brokers advertise the member's proxies to it (Metadata and FindCoordinator alike); each
  proxy reads Kafka frames and files the group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, OffsetCommit, OffsetFetch) under `coord` and the rest under `data`, a toxic per class.
Other members connect directly. In a shared host process (per_process > 1) each member has proxies and
a connect string / bootstrap list of its own.

Member faults: a member with a host process to itself (or a step covering every member of its host)
gets real signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM). A step on part of a shared host is carried out
through the host's control channel (experiments.faults.process, experiments.member_host): an emulated
crash black-holes both of the member's links, then the host drops it without a word; an emulated pause
black-holes them and the host stops polling it until the heal; a leave is the host closing just that
member; a restart heals its links and has the host start a fresh instance under the same name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import signal
import sys
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from experiments.faults import registry
from experiments.faults.process import RUN_MARKER_ENV, ChildProcess
from experiments.faults.proxy import ProxyHub, Toxic
from experiments.faults.server import ServerFaults
from experiments.runmeta import ClusterAddresses, RunMeta, ScenarioSource, write_run_meta
from experiments.scenario import LinkFault, Problem, Scenario, ScenarioError, Schedule, Step, resolve
from rebalance import events as ev
from rebalance.events import EventRecorder

STOP_TIMEOUT_S = 20.0
STABLE_QUIET_S = 2.0
COMMAND_TIMEOUT_S = 30.0
HOLD = Toxic(kind=LinkFault.PARTITION)   # the black hole an emulated crash or pause puts on both links


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


def check_member_settings(scenario: Scenario, backend: str) -> None:
    """The backend's own check of the group's native settings, before anything starts: a typo in
    [group.legacy] fails here, naming its line, not later in a member process."""
    from rebalance.member import MemberConfig

    group = scenario.group
    section = "legacy" if backend == "legacy" else "modern"
    settings = {**group.extra, **(group.legacy if backend == "legacy" else group.modern)}
    config = MemberConfig(group=group.name, topics=scenario.subscribed_topics, strategy=group.strategy,
                          member_name="m000", zk_connect="127.0.0.1:2181", bootstrap="127.0.0.1:9092",
                          session_timeout_ms=group.session_timeout_ms, extra=settings)
    try:
        if backend == "legacy":
            from legacy_zk.config import LegacyConfig

            LegacyConfig.from_member_config(config)
        else:
            from modern.member import settings_from

            settings_from(config, client_id="m000")
    except (ValueError, TypeError) as error:
        line = scenario.line_of("group", section) or scenario.line_of("group", "extra") or scenario.line_of("group")
        raise ScenarioError(scenario.source, [Problem(f"group.{section}", line, str(error))]) from None


def default_run_dir(scenario: Scenario, root: Path = Path("runs")) -> Path:
    return root / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run(scenario: Scenario, options: RunOptions, *, schedule: Schedule | None = None) -> RunResult:
    """Run one scenario on one backend (blocking). `schedule` lets `compare` share one resolution."""
    return asyncio.run(Run(scenario, options, schedule or resolve(scenario)).main())


def compare(scenario: Scenario, run_dir: Path, *, zk_provider: str = "auto", progress: bool = True,
            backends: tuple[str, ...] | None = None) -> list[RunResult]:
    """Both backends, one after the other, with the identical schedule, into RUN_DIR/<backend>."""
    schedule = resolve(scenario)
    for backend in backends or scenario.backends:
        check_member_settings(scenario, backend)   # both checked before either starts
    results = []
    for backend in backends or scenario.backends:
        result = run(scenario, RunOptions(backend=backend, run_dir=run_dir / backend, zk_provider=zk_provider,
                                          progress=progress), schedule=schedule)
        results.append(result)
        if result.status == "interrupted":
            break
    (run_dir / "compare.json").write_text(json.dumps({
        "scenario": scenario.name, "seed": scenario.seed, "schedule": schedule.to_json(),
        "runs": [{"backend": result.run_dir.name, "status": result.status, "reason": result.reason}
                 for result in results],
    }, indent=2))
    return results


class Run:
    def __init__(self, scenario: Scenario, options: RunOptions, schedule: Schedule) -> None:
        if options.backend not in scenario.backends:
            raise ValueError(f"scenario {scenario.name!r} is for {', '.join(scenario.backends)}, "
                             f"not {options.backend!r}")
        check_member_settings(scenario, options.backend)
        self.scenario = scenario
        self.schedule = schedule
        self.backend = options.backend
        self.options = options
        self.run_dir = options.run_dir.resolve()
        self.events_dir = self.run_dir / "events"
        self.run_id = options.run_id or f"{scenario.name}-{options.backend}-{uuid.uuid4().hex[:8]}"
        self.recorder: EventRecorder | None = None
        self.proxies = ProxyHub(seed=scenario.seed)
        self.servers = ServerFaults(None, None)
        self.ensemble = None
        self.zk_connect: str | None = None    # with the run's chroot
        self.cluster = None
        self.hosts: dict[str, ChildProcess] = {}
        self.producer: ChildProcess | None = None
        self.phase = "setup"
        self.t0_ns: int | None = None
        self.started_ms = int(time.time() * 1000)
        self.applied: list[dict] = []
        self.active: dict[str, dict] = {}     # fault_id -> its fault_started event, while in force
        self.observed: dict[str, int | None] = {}   # fault_id -> when its effect was seen
        self.target_tasks: dict[str, asyncio.Future] = {}
        self.step_tasks: list[asyncio.Future] = []
        self.members_proxied: dict[str, dict[str, list[str]]] = {}
        self.member_state: dict[str, str] = {}   # running | paused | crashed | left (members of started hosts)
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
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.abort, f"interrupted ({signal.Signals(signum).name})")
        self.write_lock("running")
        display = asyncio.ensure_future(self.progress.show(self, live=self.options.progress))
        status, reason = "completed", ""
        try:
            await self.setup()
            await self.warmup()
            await self.play()
            await self.heal()
            await self.enter_phase("settle")
            await self.sleep_until(time.monotonic_ns() + int(self.scenario.settle * 1e9))
        except Aborted:
            status = "interrupted" if self._abort_reason.startswith("interrupted") else "failed"
            reason = self._abort_reason
        except Exception as error:  # noqa: BLE001 - recorded, then everything is stopped
            status, reason = "failed", f"{type(error).__name__}: {error}"
            (self.run_dir / "runner-error.txt").write_text(traceback.format_exc())
        finally:
            await asyncio.shield(self.teardown(status))
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
        self.progress.final(self, status, reason)
        return RunResult(self.run_dir, status, reason)

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

    # ------------------------------------------------------------------ setup

    async def setup(self) -> None:
        await self.enter_phase("setup")
        cluster = self.scenario.cluster
        if cluster.zookeeper_nodes:
            import zkensemble

            self.ensemble = await asyncio.to_thread(zkensemble.start, nodes=cluster.zookeeper_nodes,
                                                    provider=self.options.zk_provider, owner_pid=os.getpid())
            self.zk_connect = self.ensemble.chroot(f"run-{self.run_id}")
            self.check_abort()
        await self.start_proxies()
        self.write_advertise_map()
        from broker.cluster import start_cluster

        self.cluster = await asyncio.to_thread(
            start_cluster, cluster.brokers, zk=self.zk_connect if self.backend == "legacy" else None,
            data_dir=self.run_dir / "brokers" / "data", log_dir=self.run_dir / "logs",
            advertise_map=self.run_dir / "advertise.json", coordinator=self.backend == "modern",
        )
        self.servers = ServerFaults(self.ensemble, self.cluster)
        self.check_abort()
        await self.create_topics()
        self.write_lock("running")
        self.watchdog = asyncio.ensure_future(self.watch_parts())

    async def create_topics(self) -> None:
        from broker.admin import create_topic

        for topic in self.scenario.topics:
            await asyncio.to_thread(create_topic, self.cluster.bootstrap, topic.name, topic.partitions)
            self.check_abort()

    async def start_proxies(self) -> None:
        """Proxies for each member a link fault targets. Upstreams are looked up per connection, so a
        restarted server on a new address is still reached."""
        brokers = self.scenario.cluster.brokers
        proxied = set(self.schedule.proxied_members())
        for host in self.schedule.hosts:
            for member in (member for member in host.members if member in proxied):
                links: dict[str, list[str]] = {"coord": [], "data": []}
                if self.backend == "legacy":   # the member's own ZooKeeper connect string lists these
                    for index in range(self.scenario.cluster.zookeeper_nodes):
                        proxy = await self.proxies.add(member, "coord", f"zk-{index}", self.zk_upstream(index))
                        links["coord"].append(proxy.address)
                for index in range(brokers):
                    if self.backend == "legacy":
                        proxy = await self.proxies.add(member, "data", f"broker-{index}", self.broker_upstream(index))
                    else:
                        # The coordinator is one of the brokers: one Kafka proxy per broker carries both
                        # links, told apart frame by frame (group APIs = coord, the rest = data).
                        proxy = await self.proxies.add(member, ("coord", "data"), f"broker-{index}",
                                                       self.broker_upstream(index))
                        links["coord"].append(proxy.address)
                    links["data"].append(proxy.address)
                self.members_proxied[member] = links

    def zk_upstream(self, index: int):
        def address() -> tuple[str, int]:
            host, _, port = self.ensemble.nodes[index].client_address.rpartition(":")
            return host, int(port)

        return address

    def broker_upstream(self, index: int):
        def address() -> tuple[str, int]:
            broker = self.cluster.brokers[index]
            return broker.host, broker.port

        return address

    def write_advertise_map(self) -> None:
        mapping: dict[str, dict[str, str]] = {}
        for member, links in self.members_proxied.items():
            mapping[member] = {str(index): address for index, address in enumerate(links["data"])}
        path = self.run_dir / "advertise.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(mapping, indent=1))
        temporary.replace(path)   # atomic: brokers re-read it on change

    # ------------------------------------------------------------------ members

    def member_argv(self, host: str, members: tuple[str, ...]) -> list[str]:
        group = self.scenario.group
        argv = [sys.executable, "-m", "experiments.cli", "member", "--backend", self.backend,
                "--group", group.name, "--strategy", group.strategy,
                "--session-timeout-ms", str(group.session_timeout_ms),
                "--events", str(self.events_dir / f"{host}.jsonl"), "--run-id", self.run_id]
        for topic in self.scenario.subscribed_topics:
            argv += ["--topic", topic]
        if len(members) == 1:
            argv += ["--id", members[0]]
        else:
            argv += ["--id", host, "--count", str(len(members))]
        # One address list per member (given once when they are all the same).
        addresses = [self.member_address(member) for member in members]
        for address in addresses if len(set(addresses)) > 1 else addresses[:1]:
            argv += ["--zk" if self.backend == "legacy" else "--bootstrap", address]
        if self.backend == "modern":
            if group.static:
                argv += ["--instance-id", members[0] if len(members) == 1 else host]
        settings = {**group.extra, **(group.legacy if self.backend == "legacy" else group.modern)}
        for key, value in settings.items():
            argv += ["--config", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        return argv

    def member_address(self, member: str) -> str:
        """The member's ZooKeeper connect string (legacy) or bootstrap list (modern): its proxies, if any."""
        proxied = self.members_proxied.get(member)
        if self.backend == "legacy":
            if proxied:
                chroot = self.zk_connect[self.zk_connect.index("/"):]
                return ",".join(proxied["coord"]) + chroot
            return self.zk_connect
        return ",".join(proxied["data"]) if proxied else self.cluster.bootstrap

    def member_started(self, member: str) -> bool:
        host = self.hosts.get(self.schedule.host_of(member).name)
        return host is not None and host.running

    async def start_members(self, members) -> None:
        for host_name in dict.fromkeys(self.schedule.host_of(member).name for member in members):
            spec = next(host for host in self.schedule.hosts if host.name == host_name)
            process = ChildProcess(host_name, self.member_argv(host_name, spec.members),
                                   log_path=self.run_dir / "logs" / f"{host_name}.log", control=len(spec.members) > 1)
            await process.start()
            self.hosts[host_name] = process
            for member in spec.members:
                self.member_state[member] = "running"

    def split(self, members) -> tuple[list[ChildProcess], list[str]]:
        """Host processes that `members` cover whole (for real signals), and the members of hosts
        they cover in part (for per-member commands). The rule resolve() uses for `emulated`."""
        members = list(members)
        whole = [host.name for host in self.schedule.hosts if host.members and set(host.members) <= set(members)]
        partial = [member for member in members if self.schedule.host_of(member).name not in whole]
        return [self.hosts[name] for name in whole if name in self.hosts], partial

    async def command(self, member: str, op: str) -> int:
        process = self.hosts[self.schedule.host_of(member).name]
        return await process.command(op, member, COMMAND_TIMEOUT_S)

    def hold(self, member: str) -> None:
        self.proxies.set_toxic(member, "both", HOLD)

    def release(self, member: str) -> None:
        self.proxies.set_toxic(member, "both", None)

    def _set_state(self, members, state: str) -> None:
        for member in members:
            self.member_state[member] = state

    async def stop_members(self, members) -> int | None:
        processes, partial = self.split(members)
        await asyncio.gather(*(process.stop(STOP_TIMEOUT_S) for process in processes))
        seen = [time.monotonic_ns()]
        seen += await asyncio.gather(*(self.command(member, "leave") for member in partial))
        self._set_state(members, "left")
        return max(seen)

    async def crash_members(self, members) -> int | None:
        processes, partial = self.split(members)
        for process in processes:
            process.crash()
        for member in partial:   # black hole first: nothing the member has in flight gets out
            self.hold(member)
        acked = await asyncio.gather(*(self.command(member, "crash") for member in partial))
        seen = [await process.wait_exit(10.0) for process in processes] + list(acked)
        self._set_state(members, "crashed")
        return None if None in seen else max(seen)

    async def pause_members(self, members) -> int | None:
        processes, partial = self.split(members)
        for process in processes:
            process.pause()
        for member in partial:
            self.hold(member)
        acked = await asyncio.gather(*(self.command(member, "pause") for member in partial))
        seen = [await process.wait_state("T", 5.0) for process in processes] + list(acked)
        self._set_state(members, "paused")
        return None if None in seen else max(seen)

    async def resume_members(self, members) -> int | None:
        processes, partial = self.split(members)
        for process in processes:
            process.resume()
        for member in partial:
            self.release(member)
        acked = await asyncio.gather(*(self.command(member, "resume") for member in partial))
        seen = [await process.wait_state("RSD", 5.0) for process in processes] + list(acked)
        self._set_state(members, "running")
        return None if None in seen else max(seen)

    async def restart_members(self, members) -> int | None:
        processes, partial = self.split(members)
        for process in processes:
            await process.stop(STOP_TIMEOUT_S)
        if processes:
            await self.start_members([member for member in members if member not in partial])
        seen = [time.monotonic_ns()]
        for member in partial:
            state = self.member_state.get(member)
            if state in ("running", "paused"):
                await self.command(member, "leave")      # a restart of a running member: clean stop first
            elif state == "crashed" and member in self.members_proxied:
                self.release(member)                     # a crashed member's links are healed first
            seen.append(await self.command(member, "start"))
            self.member_state[member] = "running"
        return max(seen)

    # ------------------------------------------------------------------ warmup and timeline

    async def warmup(self) -> None:
        await self.enter_phase("warmup", members=len(self.schedule.initial_members))
        await self.start_members(self.schedule.initial_members)
        deadline = time.monotonic() + self.scenario.group.warmup_timeout
        stable_since = None
        while time.monotonic() < deadline:
            await self.sleep_until(time.monotonic_ns() + 200_000_000)
            self.progress.poll()
            if self.progress.stable(len(self.schedule.initial_members)):
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= STABLE_QUIET_S:
                    return
            else:
                stable_since = None
        self.recorder.emit(ev.PHASE, name="warmup-timeout", detail=self.progress.ownership_summary())

    async def play(self) -> None:
        self.t0_ns = time.monotonic_ns()
        await self.enter_phase("timeline", duration_s=self.scenario.duration)
        self.write_lock("running")
        await self.start_producer()
        for step in self.schedule.steps:
            await self.sleep_until(self.t0_ns + int(step.at * 1e9))
            await self.apply(step)
        await self.sleep_until(self.t0_ns + int(self.scenario.duration * 1e9))

    async def start_producer(self) -> None:
        producer = self.scenario.producer
        if producer.rate <= 0:
            return
        topic = next(t for t in self.scenario.topics if t.name == self.scenario.producer_topic)
        duration = producer.duration or self.scenario.duration
        self.producer = ChildProcess("producer", [
            sys.executable, "-m", "experiments.cli", "produce", "--bootstrap", self.cluster.bootstrap,
            "--topic", topic.name, "--partitions", str(topic.partitions), "--rate", str(producer.rate),
            "--duration", str(duration), "--events", str(self.events_dir / "producer.jsonl"),
            "--run-id", self.run_id,
        ], log_path=self.run_dir / "logs" / "producer.log")
        await self.producer.start()

    async def apply(self, step: Step) -> None:
        """Start a step without holding up the timeline (a confirmation may take seconds); steps on
        the same target still run in schedule order."""
        self.applied.append({"fault_id": step.fault_id, "op": step.op, "at": step.at,
                             "offset_s": round((time.monotonic_ns() - self.t0_ns) / 1e9, 3)})
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
        if not handler.is_fault:
            if step.action == "phase":
                name = str(step.params["name"])
            elif step.action == "scale":
                name = f"scale-to-{step.params['to']}"
            else:
                name = f"{step.action}-{len(step.targets)}"
            await self.enter_phase(name, fault_id=step.fault_id, targets=list(step.targets))
            await handler.start(self, step)
            return
        if step.op == "heal":
            returned = await handler.heal(self, step)
            if step.action == "link":   # the proxy tells when the toxic first held, delayed or reset traffic
                self.fault_stopped(step, observed=returned, healed=time.monotonic_ns())
            else:
                self.fault_stopped(step, observed=self.observed.pop(step.fault_id, None), healed=returned)
            return
        undone = self.undone_by(step)   # a restart closes the crash (or kill) it undoes
        self.fault_started(step)
        observed = await handler.start(self, step)
        for fault_id in undone:
            started = self.active.pop(fault_id)
            self.recorder.emit(ev.FAULT_STOPPED, **{key: started[key] for key in _FAULT_KEYS},
                               observed_ts_ns=self.observed.pop(fault_id, None), healed_ts_ns=observed,
                               healed_by=step.fault_id)
        if step.action in _INSTANT:
            self.fault_stopped(step, observed=observed, healed=observed)
        else:
            self.observed[step.fault_id] = observed

    def undone_by(self, step: Step) -> list[str]:
        undoes = {"restart": {"crash", "leave"}, "zk_restart": {"zk_kill"}, "broker_restart": {"broker_kill",
                  "coordinator_kill"}, "coordinator_restart": {"broker_kill", "coordinator_kill"}}.get(step.action, set())
        return [fault_id for fault_id, event in self.active.items()
                if event["kind"] in undoes and set(event["targets"]) & set(step.targets)]

    def _fault_fields(self, step: Step) -> dict:
        kind = step.params.get("fault", step.action) if step.action == "link" else step.action
        members = [self.member_id(target) for target in step.targets if not target.startswith(("zk-", "broker-"))]
        return {
            "fault_id": step.fault_id, "kind": kind, "action": step.action,
            "target": ",".join(step.targets), "targets": list(step.targets), "member_ids": members,
            "link": step.link, "params": dict(step.params), "emulated": step.emulated, "at_s": step.at,
            "line": step.line,
        }

    def member_id(self, name: str) -> str:
        """The id a member's own events carry: its name, or for legacy 0.8's `<group>_<consumer.id>`."""
        return f"{self.scenario.group.name}_{name}" if self.backend == "legacy" else name

    def fault_started(self, step: Step) -> dict:
        event = self.recorder.emit(ev.FAULT_STARTED, **self._fault_fields(step))
        self.active[step.fault_id] = event
        return event

    def fault_stopped(self, step: Step, *, observed: int | None, healed: int | None) -> None:
        """`observed_ts_ns`: when the fault's effect was first seen; `healed_ts_ns`: when its undoing was."""
        self.active.pop(step.fault_id, None)
        self.recorder.emit(ev.FAULT_STOPPED, **self._fault_fields(step), observed_ts_ns=observed,
                           healed_ts_ns=healed)

    # ------------------------------------------------------------------ heal and teardown

    async def heal(self) -> None:
        await self.enter_phase("heal")
        if self.step_tasks:
            await asyncio.wait(self.step_tasks)
        self.check_abort()
        self.proxies.heal_all()
        for process in self.hosts.values():
            process.resume()
        for member, state in list(self.member_state.items()):   # pauses end at their heal; this is a safety net
            if state == "paused":
                with contextlib.suppress(Exception):
                    await self.command(member, "resume")
                self.member_state[member] = "running"
        await self.servers.heal_all()
        healed = time.monotonic_ns()
        for fault_id, started in list(self.active.items()):
            self.active.pop(fault_id)
            self.recorder.emit(ev.FAULT_STOPPED, **{key: started[key] for key in _FAULT_KEYS},
                               observed_ts_ns=self.observed.pop(fault_id, None), healed_ts_ns=healed,
                               healed_by="final-heal")

    async def watch_parts(self) -> None:
        """Any part that exits without being told to ends the run."""
        while True:
            await asyncio.sleep(0.5)
            for name, process in self.hosts.items():
                if not process.running and not process.expected_exit:
                    self.abort(f"member host {name} exited by itself (code {process.process.returncode}); "
                               f"see {process.log_path}")
            if self.producer and not self.producer.running and self.producer.process.returncode not in (0, None):
                if not self.producer.expected_exit:
                    self.abort(f"the producer failed (code {self.producer.process.returncode}); "
                               f"see {self.producer.log_path}")
            if self.cluster is not None:
                for broker in self.cluster.brokers:
                    if not broker.alive and broker.node_id not in self.servers.brokers_killed:
                        self.abort(f"broker {broker.node_id} exited by itself; see {broker.log_path}")

    async def teardown(self, status: str) -> None:
        self.phase = "teardown"
        if self.recorder is not None:
            self.recorder.emit(ev.PHASE, name="teardown", status=status)
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None:
            watchdog.cancel()
        for task in self.step_tasks:
            task.cancel()
        self.proxies.heal_all()     # members leave cleanly only if they can reach their servers
        stops = [process.stop(STOP_TIMEOUT_S) for process in self.hosts.values()]
        if self.producer is not None:
            stops.append(self.producer.stop(STOP_TIMEOUT_S))
        for outcome in await asyncio.gather(*stops, return_exceptions=True):
            if isinstance(outcome, BaseException):
                self.note(f"stopping a child failed: {outcome!r}")
        if self.cluster is not None:
            try:
                await asyncio.to_thread(self.cluster.stop)
            except Exception as error:  # noqa: BLE001 - keep tearing down
                self.note(f"stopping the brokers failed: {error!r}")
        if self.ensemble is not None:
            try:
                await asyncio.to_thread(self.ensemble.stop)
            except Exception as error:  # noqa: BLE001
                self.note(f"stopping ZooKeeper failed: {error!r}")
        await self.proxies.stop()
        for process in self.hosts.values():
            process.kill_now()

    def note(self, text: str) -> None:
        with open(self.run_dir / "runner-notes.txt", "a") as notes:
            notes.write(text + "\n")

    # ------------------------------------------------------------------ lock file

    def write_lock(self, status: str, reason: str = "") -> None:
        scenario_text = Path(self.scenario.source).read_text() if Path(self.scenario.source).is_file() else ""
        group = self.scenario.group
        write_run_meta(self.run_dir, RunMeta(
            name=self.scenario.name,
            run_id=self.run_id,
            backend=self.backend,
            strategy=group.strategy,
            session_timeout_ms=group.session_timeout_ms,
            topics={topic.name: topic.partitions for topic in self.scenario.topics},
            members=len(self.schedule.initial_members),
            group=group.name,
            status=status,
            reason=reason,
            scenario=ScenarioSource(
                name=self.scenario.name, source=self.scenario.source,
                sha256=hashlib.sha256(scenario_text.encode()).hexdigest() if scenario_text else None,
                resolved=_jsonable({key: value for key, value in asdict(self.scenario).items() if key != "lines"}),
            ),
            seed=self.scenario.seed,
            schedule=self.schedule.to_json(),
            applied=tuple(self.applied),
            timeline_start_ns=self.t0_ns,
            started_ms=self.started_ms,
            ended_ms=int(time.time() * 1000) if status != "running" else None,
            cluster=ClusterAddresses(
                zookeeper=self.zk_connect,
                zookeeper_provider=getattr(getattr(self.ensemble, "provider", None), "value", None),
                zookeeper_ensemble=getattr(self.ensemble, "name", None),
                brokers=self.cluster.bootstrap if self.cluster else None,
                coordinator_broker=self.schedule.coordinator_broker,
            ),
            hosts={host.name: tuple(host.members) for host in self.schedule.hosts},
            member_ids={name: self.member_id(name) for host in self.schedule.hosts for name in host.members},
            proxies=self.members_proxied,
            versions=versions(),
        ))


_FAULT_KEYS = ("fault_id", "kind", "action", "target", "targets", "member_ids", "link", "params", "emulated",
               "at_s", "line")
# Restarts are instants (started and stopped at once); a crash, leave or kill stays in force until a
# restart undoes it or the final heal ends the fault window.
_INSTANT = {"restart", "zk_restart", "broker_restart", "coordinator_restart"}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("rebalance-lab", "kazoo", "kafka-python", "confluent-kafka", "pyspark"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    return found


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    return value


# ---------------------------------------------------------------------- progress, from the event files


@dataclass
class _Tail:
    offset: int = 0
    partial: bytes = b""


@dataclass
class Progress:
    """Running counts read by tailing RUN_DIR/events/*.jsonl; also tells the warmup when the group is stable."""

    events_dir: Path
    scenario: Scenario
    schedule: Schedule
    produced: int = 0
    consumed: int = 0
    rebalances: int = 0
    failed_rebalances: int = 0
    faults: int = 0
    members_up: set = field(default_factory=set)
    owned: dict = field(default_factory=dict)
    tails: dict = field(default_factory=dict)
    recent: list = field(default_factory=list)

    def poll(self) -> None:
        for path in sorted(self.events_dir.glob("*.jsonl")):
            tail = self.tails.setdefault(path, _Tail())
            try:
                with open(path, "rb") as handle:
                    handle.seek(tail.offset)
                    chunk = handle.read()
            except OSError:
                continue
            tail.offset += len(chunk)
            lines = (tail.partial + chunk).split(b"\n")
            tail.partial = lines.pop()
            for raw in lines:
                with contextlib.suppress(ValueError):
                    self.feed(json.loads(raw))

    def feed(self, event: dict) -> None:
        kind, member = event.get("type"), event.get("member", "")
        if kind == ev.RECORDS_CONSUMED:
            self.consumed += int(event.get("count", 0))
        elif kind == ev.RECORD_PRODUCED:
            self.produced += 1
        elif kind == ev.RECORDS_PRODUCED:
            self.produced += int(event.get("count", 0))
        elif kind == ev.REBALANCE_COMPLETED:
            self.rebalances += 1
        elif kind == ev.REBALANCE_FAILED:
            self.failed_rebalances += 1
        elif kind == ev.MEMBER_STARTED:
            self.members_up.add(member)
        elif kind == ev.MEMBER_STOPPED:
            self.members_up.discard(member)
            self.owned.pop(member, None)
        elif kind == ev.PARTITIONS_ASSIGNED:
            self.owned.setdefault(member, set()).update(event.get("partitions", []))
        elif kind in (ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST):
            self.owned.setdefault(member, set()).difference_update(event.get("partitions", []))
        elif kind == ev.FAULT_STARTED:
            self.faults += 1
            if event.get("kind") == "crash" and event.get("emulated"):   # its host writes nothing more for it
                for crashed in event.get("member_ids") or []:
                    self.members_up.discard(crashed)
                    self.owned.pop(crashed, None)
        if kind in (ev.FAULT_STARTED, ev.FAULT_STOPPED, ev.PHASE):
            label = event.get("name") or f"{event.get('kind')} {event.get('target')}"
            self.recent = [*self.recent[-4:], f"{kind.replace('_', ' ')}: {label}"]

    def all_partitions(self) -> set[str]:
        return {f"{topic.name}-{index}" for topic in self.scenario.topics
                if topic.name in self.scenario.subscribed_topics for index in range(topic.partitions)}

    def stable(self, members: int) -> bool:
        """Every subscribed partition owned by exactly one member, and every member up."""
        if len(self.members_up) < members:
            return False
        claims = [partition for partitions in self.owned.values() for partition in partitions]
        return len(claims) == len(set(claims)) and set(claims) == self.all_partitions()

    def ownership_summary(self) -> dict:
        claims = [partition for partitions in self.owned.values() for partition in partitions]
        return {"members_up": len(self.members_up), "owned": len(set(claims)),
                "double_owned": len(claims) - len(set(claims)), "partitions": len(self.all_partitions())}

    # ---- display

    def render(self, run: Run):
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        elapsed = (time.monotonic_ns() - run.t0_ns) / 1e9 if run.t0_ns else 0.0
        clock = f"{elapsed:5.1f} / {self.scenario.duration:.0f} s" if run.t0_ns else "-"
        table.add_row("run", f"{self.scenario.name} on {run.backend}  [dim]{run.run_dir}[/dim]")
        table.add_row("phase", f"{run.phase}   timeline {clock}")
        upcoming = [step for step in self.schedule.steps if not run.t0_ns or step.at > elapsed][:3]
        table.add_row("next", "; ".join(f"{step.at:.0f}s {step.op} {step.action} {','.join(step.targets)}"
                                        for step in upcoming) or "-")
        table.add_row("records", f"produced {self.produced}   consumed {self.consumed}")
        table.add_row("group", f"members up {len(self.members_up)}   rebalances {self.rebalances}"
                               f"   failed {self.failed_rebalances}")
        table.add_row("faults", f"{self.faults} started, {len(run.active)} in force")
        for line in self.recent:
            table.add_row("", f"[dim]{line}[/dim]")
        return table

    async def show(self, run: Run, *, live: bool) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        if not (live and console.is_terminal):
            while True:          # keep counting for the warmup and the final line
                self.poll()
                await asyncio.sleep(0.5)
        with Live(self.render(run), console=console, refresh_per_second=4, transient=False) as display:
            while True:
                self.poll()
                display.update(self.render(run))
                await asyncio.sleep(0.5)

    def final(self, run: Run, status: str, reason: str) -> None:
        self.poll()
        from rich.console import Console

        Console(stderr=True).print(
            f"[bold]{self.scenario.name}[/bold] on {run.backend}: {status}{': ' + reason if reason else ''}; "
            f"produced {self.produced}, consumed {self.consumed}, rebalances {self.rebalances}, "
            f"faults {self.faults}; events in {run.events_dir}")
