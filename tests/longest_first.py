"""Test files to workers longest first (`./lab test` runs files on 2 workers, `--dist loadfile`).

xdist hands out files in order of their number of tests, so a file of one test that runs for three minutes
(a real Spark cluster, a shared-host run) starts last and the run waits for it alone. Here every worker takes
the longest file still waiting, by the seconds each file took in the last recorded run
(`tests/file_seconds.json`); a file not recorded counts one second a test. The order changes no test's
outcome, only when it starts.

`./lab test --record-file-seconds` writes this run's seconds per file (setup, call and teardown of every
test) to that file; record on a run of the whole suite.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

SECONDS_FILE = Path(__file__).with_name("file_seconds.json")
UNRECORDED_S_PER_TEST = 1.0


def recorded_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    try:
        return {str(name): float(seconds) for name, seconds in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


class LongestFirst(LoadFileScheduling):
    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self.seconds = recorded_seconds()

    def cost(self, scope: str) -> float:
        return self.seconds.get(scope, UNRECORDED_S_PER_TEST * len(self.workqueue[scope]))

    def _assign_work_unit(self, node) -> None:
        longest = max(self.workqueue, key=self.cost)
        self.workqueue.move_to_end(longest, last=False)    # the base class hands out the first unit
        super()._assign_work_unit(node)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"write this run's seconds per test file to {SECONDS_FILE.name} (scheduling order)")


@pytest.hookimpl(optionalhook=True)    # an xdist hook: pytest -p no:xdist must still start
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "loadfile":
        return LongestFirst(config, log)
    return None


class FileSeconds:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def write(self, path: Path = SECONDS_FILE) -> None:
        ordered = dict(sorted(((name, round(seconds, 1)) for name, seconds in self.seconds.items()),
                              key=lambda item: -item[1]))
        path.write_text(json.dumps(ordered, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-file-seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileSeconds(), "file-seconds")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = session.config.pluginmanager.get_plugin("file-seconds")
    if recorder is not None:
        recorder.write()
