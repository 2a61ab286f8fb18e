"""The report: side-by-side tables, charts a person can read, a self-contained HTML page."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.folders.report_folder import ReportFolder, report_dir
from experiments.report import plots
from experiments.report.run_report import write_report
from experiments.report.run_tables import strategy_table, verdict_table
from experiments.summary.read_back import RunData, herd_points, herd_slopes, load_run
from tests.fixtures.run_record import run_data

PNG = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.timeout(900)  # the first Spark test pays for the shared runs


def _herd_run(backend: str, n: int, requests: int, strategy: str = "range") -> RunData:
    herd = pd.DataFrame([
        {"t": 1.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": requests, "notifications": n,
         "failed_attempts": 0, "stable_s": 0.5, "stop_the_world_s": 0.2},
        {"t": 5.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": requests, "notifications": n,
         "failed_attempts": 0, "stable_s": 0.5, "stop_the_world_s": 0.2},
        {"t": 9.0, "kind": "leave", "live_before": n, "live_after": 0, "requests": 0, "notifications": 0,
         "failed_attempts": 0, "stable_s": None, "stop_the_world_s": 0.0},
    ])
    empty = pd.DataFrame()
    return run_data(run_dir=Path(f"/runs/{backend}-{strategy}-{n}"), info={"name": f"herd-{n}", "backend": backend,
                   "strategy": strategy, "members": n}, facts={}, verdicts=empty, phases=empty, throughput=empty,
                   ownership=empty, faults=empty, herd=herd, metrics=empty, evidence={})


def test_herd_points_use_changes_to_a_group_of_n(tmp_path):
    runs = [_herd_run("legacy", n, n * (n + 2)) for n in (5, 10, 20)] + [_herd_run("classic", n, 2 * n)
                                                                          for n in (5, 10, 20)]
    points = herd_points(runs)
    assert len(points) == 6 and (points["changes"] == 2).all()   # the shutdown is not a change to N
    legacy = points[points["backend"] == "legacy"].set_index("N")["requests_per_change"]
    assert legacy[20] / legacy[10] > 3.5                           # about N squared
    slopes = herd_slopes(points)                                   # on log-log axes: N squared and N
    assert slopes["legacy"] > 1.8 and 0.9 < slopes["classic"] < 1.1
    path = plots.herd(points, tmp_path / "herd.png")
    assert path.read_bytes().startswith(PNG)


def test_the_herd_plot_draws_each_backends_joins_and_its_fitted_model_in_its_own_style(tmp_path):
    costs = {"legacy": lambda n: n * (n + 2), "classic": lambda n: 2 * n, "kip848": lambda n: 7}
    runs = [_herd_run(backend, n, cost(n)) for backend, cost in costs.items() for n in (4, 8, 16, 32)]
    figure = plots.herd_figure(herd_points(runs), runs)
    labels = {line.get_label(): line for line in figure.axes[0].get_lines()}
    joins = {label.split(":")[0]: line for label, line in labels.items() if label.endswith("join, measured")}
    assert sorted(joins) == ["classic (range)", "kip848 (range)", "legacy (range)"]   # each line names its strategy
    assert len({(line.get_color(), line.get_marker()) for line in joins.values()}) == 3
    assert list(joins["classic (range)"].get_ydata()) == [8, 16, 32, 64]
    models = [label for label in labels if " model: " in label]
    assert any(label.startswith("legacy (range) model: 1.00·N² + 2.00·N") for label in models), models
    assert any(label.startswith("classic (range) model: 2.00·N") for label in models), models
    assert not any("guide" in label for label in labels)     # the model replaces the guide lines
    assert plots.backend_style("kip848") != plots.backend_style("legacy")
    assert plots.backend_style("new", ["kip848", "new", "other"]) != plots.backend_style("other", ["new", "other"])


def test_a_report_of_several_runs_gets_a_folder_of_its_own_named_for_them():
    assert report_dir([Path("/r/cmp/legacy"), Path("/r/cmp/classic")]) == Path("/r/cmp/report-legacy+classic")
    assert report_dir([Path("/r/herd-5"), Path("/r/herd-10")]) == Path("/r/report-herd-5+herd-10")
    many = report_dir([Path(f"/r/demo/herd-{n}/{b}") for n in (8, 16, 32) for b in ("legacy", "classic")])
    assert many == Path("/r/demo/report-herd-8-legacy+5-more")
    assert report_dir([Path("/r/one")]) == Path("/r/one")


@pytest.mark.spark
def test_report_puts_runs_side_by_side(synthetic_runs, tmp_path):
    runs = [synthetic_runs["clean"].folder.path, synthetic_runs["planted"].folder.path]
    report = write_report(runs, tmp_path / "cmp")
    markdown, page = report.markdown.read_text(), report.html.read_text()
    assert "## clean" in markdown and "## planted" in markdown       # a section per scenario
    assert markdown.index("## What these runs show") < markdown.index("## clean") < markdown.index("## planted")
    assert "records over 3 s or never handled" in markdown and "max latency, s" in markdown and "rebalancing, s" in markdown
    assert "VIOLATED (1)" in markdown                    # e.g. the planted duplicate
    assert page.count("data:image/png;base64,") == len(report.images) >= 3
    assert {p.name for p in report.images} >= {"throughput-clean.png", "ownership-1-classic.png",
                                               "ownership-2-legacy.png"}
    assert all(p.read_bytes().startswith(PNG) for p in report.images)
    table = strategy_table([load_run(r) for r in runs])
    assert list(table.columns[:2]) == ["phase", "measure"] and len(table.columns) == 4
    assert not any(cell.endswith(".000") for cell in table.iloc[:, 2:].to_numpy().ravel())   # 0.1 s, whole ms


@pytest.mark.spark
def test_a_report_of_three_backends_has_a_column_for_each(synthetic_runs, tmp_path):
    runs = [synthetic_runs[name].folder.path for name in ("planted", "clean", "kip848-8")]
    loaded = [load_run(run) for run in runs]
    verdicts = verdict_table(loaded)
    assert list(verdicts.columns) == ["check", "planted legacy", "clean classic", "kip848-8 kip848"]
    witness = {str(row["check"]): row for _, row in verdicts.iterrows()}["server-witness"]
    assert str(witness["kip848-8 kip848"]) == "ok"
    points = herd_points(loaded)
    assert set(points["backend"]) == {"legacy", "classic", "kip848"}
    report = write_report(runs, tmp_path / "three")
    assert "## kip848-8" in report.markdown.read_text() and "ownership-3-kip848.png" in {
        p.name for p in report.images}


@pytest.mark.spark
def test_one_scenario_at_several_group_sizes_is_a_sweep_with_the_herd_in_its_finding(synthetic_runs):
    """The kip848 runs at N = 8 and 16, as one scenario: a column for the backend, the herd cost by N."""
    from experiments.report.findings import scenario_finding
    from experiments.report.scenario_runs import scenarios

    loaded = [replace(run, record=replace(run.record, name="herd"))
              for run in (load_run(synthetic_runs[name].folder.path) for name in ("kip848-16", "kip848-8"))]
    (scenario,) = scenarios(loaded)
    assert scenario.columns == ["kip848"] and scenario.swept and scenario.sizes == [8, 16]
    assert [run.group_size for run in scenario.runs] == [8, 16]
    finding = scenario_finding(scenario)
    assert finding.ran == "kip848 at N = 8, 16; one run each, n = 1"
    strategy = loaded[0].strategy
    conditions, herd = finding.text.split(". ", 1)
    assert conditions == "Run conditions ok on every run"   # always first
    assert herd.startswith(f"Requests per join at N = 8 / 16: kip848 ({strategy}) 7 / 7. Requests per leave "
                           f"at N = 8 / 16: kip848 ({strategy}) 4 / 4. No fitted cost model (2 group sizes; "
                           "a fit needs at least 4).")


def test_the_herd_finding_gives_the_join_and_the_leave_by_n_then_the_fitted_model():
    from experiments.report.findings import herd_sentence

    runs = [_herd_run("legacy", n, n * n + 2 * n) for n in (4, 8, 16, 32)] + [
        _herd_run("classic", n, 2 * n + 3) for n in (4, 8, 16, 32)]
    text = herd_sentence(herd_points(runs), runs=runs)
    assert text.startswith("Requests per join at N = 4 / 8 / 16 / 32: legacy (range) 24 / 80 / 288 / 1,088; "
                           "classic (range) 11 / 19 / 35 / 67. Requests per leave at N = 4 / 8 / 16 / 32:"), text
    assert "Fitted cost of a join: legacy (range) ≈ 1.00·N² + 2.00·N" in text, text
    assert "classic (range) ≈ 2.00·N + 3.00" in text, text


@pytest.mark.spark
def test_report_command_on_a_folder_of_runs(synthetic_runs, tmp_path):
    folder = tmp_path / "compare"
    folder.mkdir()
    for name in ("clean", "planted"):
        (folder / name).symlink_to(synthetic_runs[name].folder.path)
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert ReportFolder(folder).html.exists() and ReportFolder(folder).markdown.exists()


@pytest.mark.spark
def test_a_report_of_several_runs_never_writes_into_their_parent(synthetic_runs, tmp_path, monkeypatch):
    parent = tmp_path / "several"
    parent.mkdir()
    for name in ("clean", "planted"):
        (parent / name).symlink_to(synthetic_runs[name].folder.path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "several/clean", "several/planted"])
    assert result.exit_code == 0, result.output
    assert ReportFolder(parent / "report-clean+planted").html.exists()
    assert not ReportFolder(parent).html.exists() and not list(parent.glob("*.png"))
    chosen = CliRunner().invoke(app, ["report", "several/clean", "several/planted", "--out", "mine"])
    assert chosen.exit_code == 0, chosen.output
    assert ReportFolder(tmp_path / "mine").markdown.exists()


def test_report_rejects_a_missing_directory(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such directory" in result.output


def test_key_numbers_give_joins_and_leaves_apart_and_name_the_groups_rebalances():
    from experiments.report.run_tables import key_numbers
    from experiments.report.scenario_runs import scenarios

    run = _herd_run("classic", 10, 36)
    run.herd.loc[1, "requests"] = 30                  # the leave costs less than the join
    numbers = key_numbers(scenarios([run])[0]).set_index("measure")["classic"]
    assert (numbers["requests per join (median)"], numbers["requests per leave (median)"]) == ("36", "30")
    assert numbers["requests per change, joins and leaves together (median)"] == "33"
    assert "group rebalance episodes (overlapping member rebalances merged)" in numbers.index
    assert "rebalances" not in numbers.index
