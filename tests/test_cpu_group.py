"""Member hosts yield the CPU to the servers: nice 19, and a CPU group of small weight where the machine has one."""

from __future__ import annotations

import asyncio
import os
import sys

from experiments.faults import cpu_group
from experiments.faults.process import ChildProcess


def _cgroup_lines(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cgroup") as cgroups:
        return cgroups.read().splitlines()


def _started(tmp_path, *, yields_cpu: bool) -> tuple[int, list[str], int]:
    """A child's nice value and control groups, read while it runs."""
    async def main():
        child = ChildProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"],
                             log_path=tmp_path / "sleeper.log", yields_cpu=yields_cpu)
        await child.start()
        try:
            pid = child.process.pid
            return os.getpriority(os.PRIO_PROCESS, pid), _cgroup_lines(pid), pid
        finally:
            child.kill_now()
            await child.process.wait()
    return asyncio.run(main())


def test_a_yielding_child_runs_at_nice_19_in_the_members_cpu_group_where_the_machine_has_one(tmp_path):
    nice, cgroups, _ = _started(tmp_path, yields_cpu=True)
    assert nice == 19
    in_group = [line for line in cgroups if line.endswith("/" + cpu_group.GROUP_NAME)]
    if cpu_group.yielding_group() is None:    # not root, or no cpu controller: nice alone
        assert not in_group
    else:
        assert in_group, cgroups
        weight_file = "cpu.shares" if cpu_group.yielding_group().parent.parent == cpu_group.V1_CPU else "cpu.weight"
        weight = int((cpu_group.yielding_group().parent / weight_file).read_text())
        assert weight == (cpu_group.V1_SHARES if weight_file == "cpu.shares" else cpu_group.V2_WEIGHT)


def test_a_server_child_keeps_the_runners_priority_and_group(tmp_path):
    nice, cgroups, _ = _started(tmp_path, yields_cpu=False)
    assert nice == os.getpriority(os.PRIO_PROCESS, 0)
    assert not any(line.endswith("/" + cpu_group.GROUP_NAME) for line in cgroups)
    assert sorted(cgroups) == sorted(_cgroup_lines(os.getpid()))


def test_joining_without_a_group_does_nothing():
    before = _cgroup_lines(os.getpid())
    cpu_group.join(None)
    assert _cgroup_lines(os.getpid()) == before
