"""The run's clients: the member host processes (each a `python -m experiments.run.member_cli` given its
members' configs as one file; experiments.run.member_host) and the producer (`python -m broker.cli produce`).
The runner holds one (`Run.clients`): the warm-up starts the hosts, a join wave's armed ones with them, the
timeline starts the producer and stops it at its end, the watchdog reads both and the teardown stops them
together. A member reaches its servers through its own proxies, if any (experiments.run.member_links)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from experiments.faults.members import STOP_TIMEOUT_S
from experiments.faults.process import ChildProcess
from experiments.folders.run_folder import RunFolder
from experiments.run.member_configs import host_argv
from experiments.run.member_links import MemberLinks
from experiments.run.server_processes import ServerProcesses
from experiments.scenario import Scenario, Schedule
from rebalance.backends import BackendProfile


def producing_room_s(scenario: Scenario, schedule: Schedule) -> float:
    """How long a producer that produces for the whole timeline may have to: the timeline, plus every wait for
    a stable group at its longest (each wait moves the timeline's end back). `play` stops it at the end."""
    waits = sum(float(step.params["timeout"]) for step in schedule.steps if step.params.get("after") == "stable")
    return scenario.duration + waits + 10.0


class ClientProcesses:
    """The member hosts by host name, and the producer once the timeline starts it."""

    def __init__(self, scenario: Scenario, profile: BackendProfile, schedule: Schedule, folder: RunFolder, *,
                 run_id: str, links: MemberLinks, servers: ServerProcesses) -> None:
        self.scenario = scenario
        self.profile = profile
        self.schedule = schedule
        self.folder = folder
        self.run_id = run_id
        self.links = links
        self.servers = servers
        self.hosts: dict[str, ChildProcess] = {}
        self.producer: ChildProcess | None = None

    def member_address(self, member: str) -> str | None:
        servers = self.servers
        return self.links.address(member, zk_connect=servers.zk_connect,
                                  bootstrap=servers.cluster.bootstrap if servers.cluster else None)

    async def start_hosts(self, members, *, armed: bool = False) -> None:
        """Start the host processes of `members`; `armed`: each member joins only on its start command."""
        for host_name in dict.fromkeys(self.schedule.host_of(member).name for member in members):
            spec = next(host for host in self.schedule.hosts if host.name == host_name)
            argv = host_argv(self.scenario, self.profile, spec.members,
                             config_path=self.folder.member_settings(host_name), address_of=self.member_address,
                             events=self.folder.events / f"{host_name}.jsonl", run_id=self.run_id)
            process = ChildProcess(host_name, argv + (["--armed"] if armed else []),
                                   log_path=self.folder.log(host_name), control=armed or len(spec.members) > 1,
                                   yields_cpu=True)   # members yield the CPU to the servers
            await process.start()
            self.hosts[host_name] = process

    async def start_producer(self) -> None:
        producer = self.scenario.producer
        if producer.rate <= 0:
            return
        topic = next(t for t in self.scenario.topics if t.name == self.scenario.producer_topic)
        duration = producer.duration or producing_room_s(self.scenario, self.schedule)
        self.producer = ChildProcess("producer", [
            sys.executable, "-m", "broker.cli", "produce", "--bootstrap", self.servers.cluster.bootstrap,
            "--topic", topic.name, "--partitions", str(topic.partitions), "--rate", str(producer.rate),
            "--duration", str(duration), "--events", str(self.folder.events / "producer.jsonl"),
            "--run-id", self.run_id,
        ], log_path=self.folder.log("producer"))
        await self.producer.start()

    async def stop(self, note: Callable[[str], None]) -> None:
        """Every host (SIGTERM: its members leave) and the producer at once; a child that fails to stop is
        noted."""
        stops = [process.stop(STOP_TIMEOUT_S) for process in self.hosts.values()]
        if self.producer is not None:
            stops.append(self.producer.stop(STOP_TIMEOUT_S))
        for outcome in await asyncio.gather(*stops, return_exceptions=True):
            if isinstance(outcome, BaseException):
                note(f"stopping a child failed: {outcome!r}")
