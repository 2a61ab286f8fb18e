"""One scenario fuzz input through the loader: bytes as a scenario file's contents.

The loader must answer any file with a checked `Scenario` or a `ScenarioError` that names at least one
problem (its field, its message). Any other exception is a crash, and so is an error with no problem in
it or a problem with no words. Text that is not UTF-8 goes through `load` on a file, as a user's file
would; text that is goes through `loads`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from experiments.scenario import Scenario, ScenarioError, load, loads


class ScenarioFailure(AssertionError):
    """The loader answered in a way no input may make it answer."""


class ScenarioHarness:
    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="fuzz-scenario-")
        self._file = Path(self._folder.name) / "input.toml"

    def run(self, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self._file.write_bytes(data)
            self._check(lambda: load(self._file))
        else:
            self._check(lambda: loads(text))

    @staticmethod
    def _check(call) -> None:
        try:
            scenario = call()
        except ScenarioError as error:
            if not error.problems:
                raise ScenarioFailure("a ScenarioError without a problem") from error
            blank = [problem for problem in error.problems if not problem.field or not problem.message]
            if blank:
                raise ScenarioFailure(f"a problem without its field or words: {blank[0]!r}") from error
            str(error)  # the message a user reads must be printable
            return
        if not isinstance(scenario, Scenario):
            raise ScenarioFailure(f"the loader returned {type(scenario).__name__}, not a Scenario")
