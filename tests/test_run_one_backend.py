"""`run --backend X` checks a scenario's group against X alone, and refuses a backend the file does not list."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.cli.run import _listed_backends, _load


def test_the_backends_a_file_lists_by_their_own_names():
    assert _listed_backends("seed002", []) == ["legacy", "classic", "kip848"]
    assert _listed_backends("seed002", ['backends=["modern"]']) == ["classic"]   # the alias, by its own name


def test_a_strategy_legacy_never_had_runs_on_classic_alone():
    overrides = ["group.strategy=cooperative-sticky"]
    with pytest.raises(typer.Exit):          # checked against every backend the file lists
        _load("seed002", overrides)
    scenario = _load("seed002", [*overrides, 'backends=["classic"]'], ("classic",))
    assert scenario.group.strategy == "cooperative-sticky" and scenario.backends == ("classic",)


def test_a_backend_the_scenario_does_not_list_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["run", "split-brain-a", "--backend", "kip848", "--set", 'backends=["legacy"]',
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "is for legacy only" in result.output
    assert not (tmp_path / "out").exists()


def test_run_checks_the_group_against_the_chosen_backend_only(tmp_path, monkeypatch):
    """seed002 lists legacy too, which has no cooperative-sticky: the run on classic takes it all the same."""
    ran = []

    def run(scenario, options):
        ran.append((scenario, options.backend))
        raise SystemExit(0)     # stop before any server starts

    monkeypatch.setattr("experiments.cli.run.runner.run", run)
    result = CliRunner().invoke(app, ["run", "seed002", "--backend", "classic", "--set",
                                      "group.strategy=cooperative-sticky", "--out", str(tmp_path / "out")])
    assert "unknown strategy" not in result.output
    [(scenario, backend)] = ran
    assert backend == "classic" and scenario.group.strategy == "cooperative-sticky"
