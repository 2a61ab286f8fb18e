"""Running a fuzz target under libFuzzer (atheris) in a child process, and reading what it did.

libFuzzer ends the process it runs in, so a target always runs in a child: `python -m
experiments.fuzz.target NAME`. It starts from the stored corpus (read, never written) and a fresh
working corpus in the output folder, where it keeps the inputs that reached new code. A failure stops
it: libFuzzer writes the input to `failures/` (crash-*, timeout-* for an input over one second, oom-*
past the memory limit), and replaying that file runs exactly that input again.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

CORPUS_ROOT = Path(__file__).resolve().parent / "corpus"
TARGETS = ("wire", "scenario")
INPUT_TIMEOUT_S = 1           # an input that takes longer is a hang
RSS_LIMIT_MB = 1024           # libFuzzer's memory limit for the whole process
MAX_LEN = {"wire": 16384, "scenario": 8192}

_DONE = re.compile(r"^Done (\d+) runs in (\d+) second", re.MULTILINE)
_STAT_RUNS = re.compile(r"^stat::number_of_executed_units: (\d+)", re.MULTILINE)
_PROGRESS = re.compile(r"^#(\d+)\s", re.MULTILINE)
_ARTIFACT = re.compile(r"Test unit written to (\S+)")


@dataclass(frozen=True)
class FuzzResult:
    target: str
    runs: int                   # inputs executed
    seconds: float
    exit_code: int
    failures: tuple[Path, ...]  # the inputs that failed (each replays its failure)
    log: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.failures


def stored_corpus(target: str) -> Path:
    return CORPUS_ROOT / target


def default_out(target: str, root: Path = Path("runs")) -> Path:
    return root / "fuzz" / f"{target}-{time.strftime('%Y%m%d-%H%M%S')}"


def command(target: str, out: Path, *, seconds: int | None = None, runs: int | None = None,
            replay: list[Path] | None = None, input_timeout_s: int = INPUT_TIMEOUT_S) -> list[str]:
    """The child's command line: a timed or counted run over the corpora, or one pass over given files."""
    if target not in TARGETS:
        raise ValueError(f"unknown fuzz target {target!r} (one of {', '.join(TARGETS)})")
    argv = [sys.executable, "-m", "experiments.fuzz.target", target, f"-timeout={input_timeout_s}",
            f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={MAX_LEN[target]}", "-print_final_stats=1",
            f"-artifact_prefix={out / 'failures'}/"]
    if replay is not None:
        return argv + [str(path) for path in replay]
    if seconds is not None:
        argv.append(f"-max_total_time={seconds}")
    if runs is not None:
        argv.append(f"-runs={runs}")
    if target == "scenario":
        argv.append(f"-dict={write_scenario_dictionary(out / 'scenario.dict')}")
    return argv + [str(out / "corpus"), str(stored_corpus(target))]


def run(target: str, out: Path, *, seconds: int | None = None, runs: int | None = None,
        replay: list[Path] | None = None, input_timeout_s: int = INPUT_TIMEOUT_S) -> FuzzResult:
    """Run the target to its end (time, count, or first failure) and read the outcome from its log."""
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    (out / "failures").mkdir(exist_ok=True)
    log_path = out / ("replay.log" if replay is not None else "fuzz.log")
    started = time.monotonic()
    with log_path.open("w") as log_file:
        completed = subprocess.run(command(target, out, seconds=seconds, runs=runs, replay=replay,
                                           input_timeout_s=input_timeout_s),
                                   stdout=log_file, stderr=subprocess.STDOUT, check=False)
    return read_result(target, log_path, completed.returncode, time.monotonic() - started)


def read_result(target: str, log_path: Path, exit_code: int, seconds: float) -> FuzzResult:
    text = log_path.read_text(errors="replace")
    failures = tuple(Path(found) for found in _ARTIFACT.findall(text))
    return FuzzResult(target=target, runs=_runs_in(text), seconds=seconds, exit_code=exit_code, failures=failures,
                      log=log_path)


def _runs_in(text: str) -> int:
    """Inputs executed: the final statistics when libFuzzer printed them, else its last progress line."""
    for pattern in (_STAT_RUNS, _DONE, _PROGRESS):
        found = pattern.findall(text)
        if found:
            last = found[-1]
            return int(last[0] if isinstance(last, tuple) else last)
    return 0


def write_scenario_dictionary(path: Path) -> Path:
    """libFuzzer's dictionary for TOML scenarios: every key and table name the shipped scenarios use,
    so mutations make files the loader reads further than its first unknown key."""
    words: set[str] = set()

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                words.add(key)
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, str) and len(value) < 40:
            words.add(value)

    for scenario in sorted(stored_corpus("scenario").glob("*.toml")):
        collect(tomllib.loads(scenario.read_text()))
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f'"{_escaped(word)}"' for word in sorted(words)] + ['"[["', '"]]"', '" = "', '"\\x0a"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _escaped(word: str) -> str:
    return "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_. " else f"\\x{ord(ch):02x}" for ch in word)
