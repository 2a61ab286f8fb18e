"""The report: side-by-side tables, charts a person can read, a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments import plots
from experiments.cli import app
from experiments.report import report_dir, strategy_table, verdict_table, write_report
from experiments.rundata import RunData, herd_points, herd_slopes, load_run

PNG = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.timeout(900)  # the first Spark test pays for the shared runs


def _herd_run(backend: str, n: int, requests: int) -> RunData:
    herd = pd.DataFrame([
        {"t": 1.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": requests, "notifications": n,
         "failed_attempts": 0, "stable_s": 0.5, "stop_the_world_s": 0.2},
        {"t": 5.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": requests, "notifications": n,
         "failed_attempts": 0, "stable_s": 0.5, "stop_the_world_s": 0.2},
        {"t": 9.0, "kind": "leave", "live_before": n, "live_after": 0, "requests": 0, "notifications": 0,
         "failed_attempts": 0, "stable_s": None, "stop_the_world_s": 0.0},
    ])
    empty = pd.DataFrame()
    return RunData(run_dir=Path(f"/runs/{backend}-{n}"), info={"name": f"herd-{n}", "backend": backend,
                   "strategy": "range", "members": n}, facts={}, verdicts=empty, phases=empty, throughput=empty,
                   ownership=empty, faults=empty, herd=herd, metrics=empty, evidence={})


def test_herd_points_use_changes_to_a_group_of_n(tmp_path):
    runs = [_herd_run("legacy", n, n * (n + 2)) for n in (5, 10, 20)] + [_herd_run("modern", n, 2 * n)
                                                                          for n in (5, 10, 20)]
    points = herd_points(runs)
    assert len(points) == 6 and (points["changes"] == 2).all()   # the shutdown is not a change to N
    legacy = points[points["backend"] == "legacy"].set_index("N")["requests_per_change"]
    assert legacy[20] / legacy[10] > 3.5                           # about N squared
    slopes = herd_slopes(points)                                   # on log-log axes: N squared and N
    assert slopes["legacy"] > 1.8 and 0.9 < slopes["modern"] < 1.1
    path = plots.herd(points, tmp_path / "herd.png")
    assert path.read_bytes().startswith(PNG)


def test_the_herd_plot_draws_each_backends_joins_and_its_fitted_model_in_its_own_style(tmp_path):
    costs = {"legacy": lambda n: n * (n + 2), "modern": lambda n: 2 * n, "kip848": lambda n: 7}
    runs = [_herd_run(backend, n, cost(n)) for backend, cost in costs.items() for n in (4, 8, 16, 32)]
    figure = plots.herd_figure(herd_points(runs), runs)
    labels = {line.get_label(): line for line in figure.axes[0].get_lines()}
    joins = {label.split(":")[0]: line for label, line in labels.items() if label.endswith("join, measured")}
    assert sorted(joins) == ["kip848", "legacy", "modern"]
    assert len({(line.get_color(), line.get_marker()) for line in joins.values()}) == 3
    assert list(joins["modern"].get_ydata()) == [8, 16, 32, 64]
    models = [label for label in labels if " model: " in label]
    assert any(label.startswith("legacy model: 1.00·N² + 2.00·N") for label in models), models
    assert any(label.startswith("modern model: 2.00·N") for label in models), models
    assert not any("guide" in label for label in labels)     # the model replaces the guide lines
    assert plots.backend_style("kip848") != plots.backend_style("legacy")
    assert plots.backend_style("new", ["kip848", "new", "other"]) != plots.backend_style("other", ["new", "other"])


def test_report_dir_is_the_common_folder_of_several_runs():
    assert report_dir([Path("/r/cmp/legacy"), Path("/r/cmp/modern")]) == Path("/r/cmp")
    assert report_dir([Path("/r/one")]) == Path("/r/one")


@pytest.mark.spark
def test_report_puts_runs_side_by_side(synthetic_runs, tmp_path):
    runs = [synthetic_runs["clean"].info.run_dir, synthetic_runs["planted"].info.run_dir]
    report = write_report(runs, tmp_path / "cmp")
    markdown, page = report.markdown.read_text(), report.html.read_text()
    assert "modern/range" in markdown and "legacy/range" in markdown
    assert "records lost" in markdown and "max latency, ms" in markdown and "time rebalancing, ms" in markdown
    assert "VIOLATED (1)" in markdown                    # e.g. the planted duplicate
    assert page.count("data:image/png;base64,") == len(report.images) >= 3
    assert {p.name for p in report.images} >= {"throughput.png", "ownership-1-modern.png", "ownership-2-legacy.png"}
    assert all(p.read_bytes().startswith(PNG) for p in report.images)
    table = strategy_table([load_run(r) for r in runs])
    assert list(table.columns[:2]) == ["phase", "measure"] and len(table.columns) == 4


@pytest.mark.spark
def test_a_report_of_three_backends_has_a_column_for_each(synthetic_runs, tmp_path):
    runs = [synthetic_runs[name].info.run_dir for name in ("planted", "clean", "kip848-8")]
    loaded = [load_run(run) for run in runs]
    verdicts = verdict_table(loaded)
    assert list(verdicts.columns) == ["check", "legacy/range", "modern/range", "kip848/uniform"]
    assert verdicts.set_index("check").loc["server-witness", "kip848/uniform"].startswith("ok")
    points = herd_points(loaded)
    assert set(points["backend"]) == {"legacy", "modern", "kip848"}
    report = write_report(runs, tmp_path / "three")
    assert "kip848/uniform" in report.markdown.read_text() and "ownership-3-kip848.png" in {
        p.name for p in report.images}


@pytest.mark.spark
def test_report_command_on_a_folder_of_runs(synthetic_runs, tmp_path):
    folder = tmp_path / "compare"
    folder.mkdir()
    for name in ("clean", "planted"):
        (folder / name).symlink_to(synthetic_runs[name].info.run_dir)
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / "report.html").exists() and (folder / "report.md").exists()


def test_report_rejects_a_missing_directory(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such directory" in result.output
