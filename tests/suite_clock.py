"""The suite's own clock: at the end of a run, its wall time and its CPU seconds, this process's and those of
every process it started and waited for (the xdist workers and what they ran; a docker container's ZooKeeper
is not among them). Quote them beside the machine index (`python3 ../shared/tools/machine_index.py`)."""

from __future__ import annotations

import resource
import time

import pytest

_started: dict[str, float] = {}


def _cpu_s() -> float:
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def pytest_sessionstart(session: pytest.Session) -> None:
    _started.update(wall=time.monotonic(), cpu=_cpu_s())


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _started:
        return   # an xdist worker: the controller reports for the whole run
    wall, cpu = time.monotonic() - _started["wall"], _cpu_s() - _started["cpu"]
    terminalreporter.write_line(f"suite clock: wall {wall:.0f} s, CPU {cpu:.0f} s (this process and the processes it "
                                "started and waited for)")
