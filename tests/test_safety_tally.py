"""The safety sweep's tally judges lost records, offset regressions and convergence as the Spark summary does: on
the planted logs (every anomaly, a crash, a torn last line, KIP-848 groups) its verdicts and counts are the
summary's, and a seed it finds broken is confirmed by the summary before it is called a violation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.statistics.safety import SAFETY
from experiments.statistics.safety_tally import SafetyTally, broken
from experiments.summary.check_queries import CheckConfig, Verdict

pytestmark = pytest.mark.spark

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def _tallied(folder: Path, config: CheckConfig) -> dict[str, tuple[Verdict, int]]:
    tally = SafetyTally(config)
    for path in sorted(RunFolder(folder).event_files()):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue   # a torn last line: the summary skips it too
            if event.get("type"):
                tally.feed(event)
    return {check.check: (check.verdict, check.count) for check in tally.safety(RunFolder(folder).record())}


@pytest.mark.parametrize("name", ["clean", "planted", "unsampled", "kip848-8", "kip848-16"])
def test_the_tally_gives_the_summary_s_safety_verdicts_on_every_planted_log(synthetic_runs, name):
    summary = synthetic_runs[name]
    spark = {check.check: (check.verdict, check.count) for check in summary.checks if check.check in SAFETY}
    assert _tallied(summary.folder.path, CheckConfig()) == spark
    if name == "planted":   # every anomaly planted: the three are broken, so the test can tell them apart
        assert all(verdict is Verdict.FALSE for verdict, _ in spark.values()), spark


def test_a_seed_the_tally_finds_broken_is_confirmed_by_the_summary_before_it_is_kept(tmp_path, spark, monkeypatch):
    """A tally that called a clean seed broken is not believed: the seed is played again, summarised in Spark,
    found clean, and named as a disagreement; nothing is kept as a violation."""

    from experiments.statistics import safety
    from experiments.statistics.safety_tally import TalliedCheck

    real = safety.tally_seeds

    def one_called_broken(tasks, **kwargs):
        found, interrupted = real(tasks, **kwargs)
        seed = tasks[0].seed
        found[seed] = [TalliedCheck("offset-regressions", Verdict.FALSE, 1), *found[seed][1:]]
        return found, interrupted

    monkeypatch.setattr(safety, "tally_seeds", one_called_broken)
    out, output = _sweep(tmp_path, "classic", seeds=2)
    assert "0 of 2 seeds broke a safety check" in output
    assert "the tally found seed 12 broken where the Spark summary did not" in output
    kept = json.loads((out / "violations.json").read_text())
    assert kept["seeds"] == 2 and kept["first_seed"] == 11 and kept["violations"] == []
    assert not list(out.glob("seed-*")), "a seed the summary found clean is not kept"


def test_broken_names_only_the_checks_that_failed():
    from experiments.statistics.safety_tally import TalliedCheck

    checks = [TalliedCheck("lost-records", Verdict.TRUE, 0), TalliedCheck("offset-regressions", Verdict.FALSE, 2),
              TalliedCheck("convergence", Verdict.UNKNOWN, 0)]
    assert [check.check for check in broken(checks)] == ["offset-regressions"]


def test_beyond_the_seeds_confirmed_the_broken_ones_are_kept_as_the_tally_found_them(tmp_path, spark, monkeypatch):
    """0.8's split member moves offsets back in every seed: the first broken seeds are written and confirmed in
    Spark, the others listed with what the tally found and the command that replays each, none written."""

    from experiments.statistics import safety

    monkeypatch.setattr(safety, "CONFIRMED_AT_MOST", 1)
    out, output = _sweep(tmp_path, "legacy", seeds=3)
    assert "and 2 more seeds the tally found broken (offset-regressions)" in output
    assert "3 of 3 seeds broke a safety check" in output
    kept = json.loads((out / "violations.json").read_text())
    assert [(v["seed"], v["confirmed"]) for v in kept["violations"]] == [(11, True), (12, False), (13, False)]
    assert all(v["checks"]["offset-regressions"]["count"] == 2 for v in kept["violations"])
    assert [v["replay"].split("seed=")[1].split()[0] for v in kept["violations"]] == ["11", "12", "13"]
    assert sorted(path.name for path in out.glob("seed-*")) == ["seed-11"]


def _sweep(tmp_path, backend: str, *, seeds: int) -> tuple:
    """`./lab sim split-brain-a --records --safety` over `seeds` seeds: the sweep's folder and what it printed."""
    from typer.testing import CliRunner

    from experiments.cli.app import app

    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sim", str(SCENARIOS / "split-brain-a.toml"), "--backend", backend,
                                      "--records", "--seeds", str(seeds), "--safety", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_a_sweep_interrupted_from_the_terminal_keeps_the_seeds_it_tallied_and_leaves_no_process(tmp_path):
    """Ctrl-C, as a terminal sends it to the whole group: the command exits with 130, violations.json holds the
    seeds tallied until then (0.8 breaks every one of split brain a's: each listed, unconfirmed), and no worker is
    left running."""
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "experiments.cli.app", "sim", str(SCENARIOS / "split-brain-a.toml"), "--backend",
               "legacy", "--records", "--seeds", "1000", "--safety", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, cwd=SCENARIOS.parent.parent)
    deadline = time.monotonic() + 120
    time.sleep(10)
    os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 30))
    assert process.returncode == 130, output
    kept = json.loads((out / "violations.json").read_text())
    assert kept["interrupted"] is True and 1 <= kept["seeds"] < 1000
    seeds = [v["seed"] for v in kept["violations"]]
    assert len(seeds) == len(set(seeds)) == kept["seeds"] and min(seeds) == kept["first_seed"]
    assert not any(v["confirmed"] for v in kept["violations"])
    assert f"interrupted after {kept['seeds']} of 1000 seeds" in output
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)   # no worker of the group is left
