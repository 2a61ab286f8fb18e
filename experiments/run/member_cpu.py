"""How much CPU the member hosts got, and how long their threads waited for it (the kernel's schedstat).

On two cores a large group's members queue for the CPU, and they queue behind the servers on purpose (their
CPU group's small weight, experiments.faults.cpu_group). A member's request then takes seconds while the broker
answers it in milliseconds: the time went to the member's own threads waiting to run, before the request was
sent and after its answer came. /proc/PID/task/TID/schedstat gives each thread's time on a CPU and its time
runnable but waiting for one (nanoseconds, cumulative); summed over every thread of every member host, their
growth over a sample's interval says how many member threads were running, and how many waiting, on average.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Schedstat:
    run_ns: int
    wait_ns: int
    threads: int


def read(pids: Iterable[int], proc: Path = PROC) -> Schedstat:
    """The summed schedstat of every thread of these processes (a process gone meanwhile counts nothing)."""
    run = wait = threads = 0
    for pid in pids:
        try:
            tasks = os.listdir(proc / str(pid) / "task")
        except OSError:
            continue
        for tid in tasks:
            try:
                fields = (proc / str(pid) / "task" / tid / "schedstat").read_text().split()
            except OSError:
                continue
            run, wait, threads = run + int(fields[0]), wait + int(fields[1]), threads + 1
    return Schedstat(run, wait, threads)


def sample(before: Schedstat, after: Schedstat, interval_ns: int) -> dict[str, float | int]:
    """The `host_sample` fields for the member hosts: CPU they got and time their threads waited for one, each
    as threads on average over the interval (1.0: one thread's worth the whole time)."""
    if interval_ns <= 0:
        return {}
    return {"member_threads": after.threads,
            "member_running": round(max(0, after.run_ns - before.run_ns) / interval_ns, 3),
            "member_waiting": round(max(0, after.wait_ns - before.wait_ns) / interval_ns, 3)}
