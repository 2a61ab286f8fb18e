"""`rebalance-lab demo`: what it plans, the scenarios it runs, what it prints and publishes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.cli.demo import HERD_SCENARIO, SPLIT_BRAIN_SCENARIO, plan_runs
from experiments.cli.run import find_scenario
from experiments.report.demo_page import BEGIN, END, demo_markdown, replace_block
from experiments.scenario import load, resolve
from experiments.summary.checker import CheckResult, Verdict
from rebalance.backends import backend_names


def test_the_plan_runs_both_backends_of_each_scenario_side_by_side_longest_first(tmp_path):
    runs = plan_runs(tmp_path, [4, 8, 16], ("legacy", "modern"))
    assert [(run.label, run.backend) for run in runs] == [
        ("split-brain", "legacy"), ("split-brain", "modern"), ("herd-16", "legacy"), ("herd-16", "modern"),
        ("herd-8", "legacy"), ("herd-8", "modern"), ("herd-4", "legacy"), ("herd-4", "modern")]
    assert runs[2].overrides == ("group.members=16",) and runs[2].run_dir == tmp_path / "herd-16" / "legacy"
    argv = runs[2].argv("local")
    assert argv[argv.index("--backend") + 1] == "legacy" and argv[argv.index("--set") + 1] == "group.members=16"


def test_without_a_choice_each_scenario_runs_on_the_backends_its_file_names(tmp_path):
    runs = plan_runs(tmp_path, [4, 8])
    herd = load(find_scenario(HERD_SCENARIO)).backends
    assert herd == backend_names()                    # demo-herd names none: every registered backend
    assert [run.backend for run in runs if run.label == "herd-8"] == list(herd)
    assert [run.backend for run in runs if run.label == "split-brain"] == list(load(find_scenario(
        SPLIT_BRAIN_SCENARIO)).backends)
    assert [run.label for run in runs][-len(herd):] == ["herd-4"] * len(herd)


def test_the_demo_scenarios_give_both_backends_one_schedule_at_every_size():
    for size in (4, 8, 16):
        scenario = load(find_scenario(HERD_SCENARIO), overrides=[f"group.members={size}"])
        assert scenario.group.members == size and set(scenario.backends) >= {"legacy", "modern"}
        assert resolve(scenario).to_json() == resolve(load(find_scenario(HERD_SCENARIO),
                                                           overrides=[f"group.members={size}"])).to_json()
    split = load(find_scenario(SPLIT_BRAIN_SCENARIO))
    link = [step for step in split.timeline if step.action.value == "link"][0]
    assert link.duration * 1000 > split.group.session_timeout_ms   # the cut outlives the session: a zombie


class _Summary:
    def __init__(self, backend: str, checks: list[CheckResult]) -> None:
        self.info = type("Info", (), {"backend": backend})()
        self.checks = checks


def test_the_published_markdown_has_the_plot_the_table_and_the_verdicts_in_words(tmp_path):
    points = pd.DataFrame([{"backend": b, "strategy": "range", "N": n, "requests_per_change": r,
                            "notifications_per_change": 0.0,
                            "stable_s": 1.0} for b, n, r in (("legacy", 4, 30.0), ("legacy", 16, 480.0),
                                                             ("modern", 4, 8.0), ("modern", 16, 32.0))])
    split = [_Summary("legacy", [CheckResult("double-ownership", Verdict.FALSE, 2, "2 windows, 9.00 s in total")]),
             _Summary("modern", [CheckResult("double-ownership", Verdict.TRUE, 0, "every partition had at most one owner")])]
    text = demo_markdown(points=points, split=split, image="docs/demo/herd.png")
    assert "](docs/demo/herd.png)" in text and "| legacy | range | 16 | 480.0 |" in text
    assert "slope" not in text         # the fitted model, in the findings, replaces the log-log slope
    assert "| double-ownership | **VIOLATED (2)** | ok |" in text           # compact words, a column per backend
    assert "- `double-ownership`: two or more members owning one partition at once" in text   # said once, below
    short = demo_markdown(points=points, split=split, image="docs/demo/herd.png", herd_table=False)
    assert short.startswith('<img src="docs/demo/herd.png" width="560"') and "| legacy | 16 |" not in short
    readme = tmp_path / "README.md"
    readme.write_text(f"# T\n{BEGIN}\nold\n{END}\nrest\n")
    assert replace_block(readme, text)
    written = readme.read_text()
    assert "old" not in written and written.startswith(f"# T\n{BEGIN}\n![") and written.endswith(f"{END}\nrest\n")
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    assert not replace_block(plain, text) and plain.read_text() == "no markers\n"


def test_a_pipe_gets_the_herd_table_as_whole_plain_lines_then_the_fitted_model():
    import io

    from rich.console import Console

    from experiments.cli.demo import _print_herd
    from experiments.summary.rundata import RunData

    def run(backend: str, n: int, join: int, leave: int, strategy: str = "range") -> RunData:
        herd = pd.DataFrame([
            {"t": 1.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": join, "members_moved": 3,
             "stable_s": 0.5, "stop_the_world_s": 0.2, "unowned_partition_s": 1.0},
            {"t": 5.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": leave, "members_moved": 2,
             "stable_s": 0.4, "stop_the_world_s": 0.2, "unowned_partition_s": 1.0}])
        empty = pd.DataFrame()
        return RunData(run_dir=Path(f"/runs/{backend}-{strategy}-{n}"), info={"backend": backend, "members": n,
                       "strategy": strategy, "topics": {"t0": 2 * n}}, facts={"partitions": 2 * n}, verdicts=empty,
                       phases=empty,
                       throughput=empty, ownership=empty, faults=empty, herd=herd, metrics=empty, evidence={})

    runs = [run("legacy", n, n * n + 20 * n + 7, n * n) for n in (4, 8, 16, 32)] + [run("modern", 8, 28, 20)]
    out = io.StringIO()
    _print_herd(Console(file=out, width=40, force_terminal=False), runs)
    lines = out.getvalue().splitlines()
    assert lines[2].split() == ["backend", "strategy", "N", "P", "requests", "/", "join", "requests", "/", "leave",
                                "members", "moved", "(join)", "stable", "after", "join", "(s)"]
    assert [line.split() for line in lines[3:5]] == [["legacy", "range", "4", "8", "103", "16", "3", "0.5"],
                                                     ["legacy", "range", "8", "16", "231", "64", "3", "0.5"]]
    assert lines[8].startswith("Fitted cost of a join, one per backend and strategy")
    assert lines[9].startswith("  legacy (range): requests per join ≈ 1.00·N² + 20.0·N + 7.00 (4 sizes N = 4, 8, "
                               "16, 32")
    assert "P = 2N in every run" in lines[9]
    assert lines[10] == "  modern (range): no model for the join (1 group sizes; a fit needs at least 4)"


def test_only_a_swept_scenario_makes_points_of_the_herd_curve():
    from experiments.report.run_report import swept_runs
    from experiments.summary.rundata import RunData

    def run(name: str, n: int) -> RunData:
        empty = pd.DataFrame()
        return RunData(run_dir=Path("/runs") / f"{name}-{n}", info={"name": name, "backend": "legacy", "members": n},
                       facts={}, verdicts=empty, phases=empty, throughput=empty, ownership=empty, faults=empty,
                       herd=empty, metrics=empty, evidence={})

    herd = [run("demo-herd", 8), run("demo-herd", 16)]
    split = run("demo-split-brain", 3)
    assert swept_runs([split, *herd]) == herd
    assert swept_runs([split]) == [split]


def test_the_published_markdown_has_a_column_and_a_line_per_backend():
    points = pd.DataFrame([{"backend": b, "strategy": s, "N": n, "requests_per_change": r,
                            "notifications_per_change": 0.0, "stable_s": 1.0}
                           for b, s in (("legacy", "range"), ("modern", "range"), ("kip848", "uniform"))
                           for n, r in ((8, 9.0), (16, 9.0))])
    split = [_Summary(backend, [CheckResult("double-ownership", Verdict.TRUE, 0, "every partition had at most one owner")])
             for backend in ("legacy", "modern", "kip848")]
    text = demo_markdown(points=points, split=split, image="herd.png")
    assert "| kip848 | uniform | 16 | 9.0 |" in text and "kip848 (uniform), legacy (range) and modern (range)" in text
    assert "| check |" not in text and "Ok on every backend: `double-ownership`." in text   # all ok: one line


def test_the_published_markdown_opens_with_what_the_runs_show():
    from experiments.report.findings import Finding

    points = pd.DataFrame([{"backend": "legacy", "N": n, "requests_per_change": 9.0, "notifications_per_change": 0.0,
                            "stable_s": 1.0} for n in (8, 16)])
    split = [_Summary("legacy", [CheckResult("offset-regressions", Verdict.FALSE, 3, "3 commits moved back")]),
             _Summary("modern", [CheckResult("offset-regressions", Verdict.TRUE, 0, "never went back")])]
    finding = Finding(scenario="demo-split-brain", ran="legacy and modern; one run each, n = 1",
                      text="Offset regressions (3) only on legacy.")
    text = demo_markdown(points=points, split=split, image="herd.png", findings=[finding])
    assert text.startswith("**What these runs show**")
    assert text.index("Offset regressions (3) only on legacy.") < text.index("![") < text.index(
        "| offset-regressions | **VIOLATED (3)** | ok |")
