"""The suite's own clock: at the end of a run, its wall time and its CPU seconds, this process's and those of
every process it started and waited for (the xdist workers and what they ran; a docker container's ZooKeeper
is not among them). Quote them beside the machine index (`python3 ../shared/tools/machine_index.py`).

`--cpu-per-file` also lists the test files that cost the most CPU: each worker charges a test with the CPU its
own process tree spent while the test ran (itself, the children it waited for, and the live ones, such as a
session's Spark JVM, read from /proc). A session-wide fixture is charged to the file that first needs it.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

_started: dict[str, float] = {}
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
SHOWN_FILES = 20     # LAB_CPU_FILES=N lists N instead


def _cpu_s() -> float:
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def _children_of() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue   # gone since the listing
            tree[int(fields[1])].append(int(entry.name))
    return tree


def _live_descendants_cpu_s(root: int) -> float:
    """CPU of `root`'s live descendants, with what each has reaped of its own children."""
    tree, total = _children_of(), 0.0
    waiting = list(tree.get(root, ()))
    while waiting:
        pid = waiting.pop()
        waiting.extend(tree.get(pid, ()))
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15]) * _TICK_S   # utime stime cutime cstime
    return total


def _tree_cpu_s() -> float:
    return _cpu_s() + _live_descendants_cpu_s(os.getpid())


class CpuPerFile:
    """In a worker (or a run without workers): CPU seconds per test file."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        before = _tree_cpu_s()
        yield
        self.seconds[item.nodeid.split("::", 1)[0]] += _tree_cpu_s() - before


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-per-file", action="store_true",
                     help="list the test files that cost the most CPU seconds (process trees, from /proc)")


_gathered = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_gathered] = defaultdict(float)
    runs_tests_here = hasattr(config, "workerinput") or not config.getoption("numprocesses", None)
    if config.getoption("--cpu-per-file") and runs_tests_here:
        config.pluginmanager.register(CpuPerFile(), "cpu-per-file")


def pytest_sessionstart(session: pytest.Session) -> None:
    _started.update(wall=time.monotonic(), cpu=_cpu_s())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.pluginmanager.get_plugin("cpu-per-file")
    if recorder is None:
        return
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["cpu_per_file"] = dict(recorder.seconds)
    else:
        _gather(session.config, recorder.seconds)


def _gather(config: pytest.Config, seconds: dict[str, float]) -> None:
    for name, value in seconds.items():
        config.stash[_gathered][name] += value


@pytest.hookimpl(optionalhook=True)    # an xdist hook
def pytest_testnodedown(node, error) -> None:
    _gather(node.config, getattr(node, "workeroutput", {}).get("cpu_per_file", {}))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _started:
        return   # an xdist worker: the controller reports for the whole run
    wall, cpu = time.monotonic() - _started["wall"], _cpu_s() - _started["cpu"]
    terminalreporter.write_line(f"suite clock: wall {wall:.0f} s, CPU {cpu:.0f} s (this process and the processes it "
                                "started and waited for)")
    per_file = config.stash.get(_gathered, {})
    if per_file:
        total = sum(per_file.values())
        shown = int(os.environ.get("LAB_CPU_FILES", SHOWN_FILES))
        terminalreporter.write_line(f"CPU per test file (process trees, {total:.0f} s in all), the "
                                    f"{min(shown, len(per_file))} costliest:")
        for name, seconds in sorted(per_file.items(), key=lambda item: -item[1])[:shown]:
            terminalreporter.write_line(f"  {seconds:7.1f} s  {seconds / total:4.0%}  {name}")
