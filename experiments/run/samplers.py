"""What the runner samples beside the members' own events, into its own event file: the servers' own
counters (`server_counters`, read by the witness of experiments.run.witness) at each moment the runner names,
and once a second the machine's load with the CPU the member hosts got (`host_sample`, experiments.run.
host_load and experiments.run.member_cpu). The runner makes one when its recorder opens and gives it the
servers' witness once they run; a witness that cannot answer is noted, never the end of the run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from experiments.faults.process import ChildProcess
from experiments.run import host_load, member_cpu
from experiments.run.witness import BrokerWitness, ZooKeeperWitness
from rebalance import events as ev
from rebalance.events import EventRecorder


class Samplers:
    """The run's samples; `hosts` is the runner's own table of member host processes, read at each sample."""

    def __init__(self, recorder: EventRecorder, hosts: dict[str, ChildProcess],
                 note: Callable[[str], None]) -> None:
        self.recorder = recorder
        self.hosts = hosts
        self.note = note
        self.witness: BrokerWitness | ZooKeeperWitness | None = None   # once the servers run

    async def server_counters(self, moment: str) -> None:
        """Record the servers' own counters now (nothing before the servers run)."""
        if self.witness is None:
            return
        try:
            sample = await asyncio.to_thread(self.witness.sample)
        except Exception as error:  # noqa: BLE001 - a witness that cannot answer must not end the run
            self.note(f"reading the servers' counters at {moment!r} failed: {error!r}")
            return
        self.recorder.emit(ev.SERVER_COUNTERS, moment=moment, **sample.fields())

    async def host_load(self) -> None:
        """The machine's CPU pressure, steal and load once a second, from setup to the end of the teardown, and
        how much CPU the member hosts got and how long their threads waited for one (read in a thread: a large
        group has thousands of them)."""
        before = host_load.read_counters(time.monotonic_ns())
        members = await asyncio.to_thread(member_cpu.read, self.host_pids())
        while True:
            await asyncio.sleep(host_load.SAMPLE_EVERY_S)
            after = host_load.read_counters(time.monotonic_ns())
            now = await asyncio.to_thread(member_cpu.read, self.host_pids())
            self.recorder.emit(ev.HOST_SAMPLE, **host_load.sample(before, after),
                               **member_cpu.sample(members, now, after.at_ns - before.at_ns))
            before, members = after, now

    def host_pids(self) -> list[int]:
        return [process.process.pid for process in list(self.hosts.values())
                if process.process is not None and process.running]
