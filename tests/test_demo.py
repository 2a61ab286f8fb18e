"""`rebalance-lab demo`: what it plans, the scenarios it runs, what it prints and publishes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.cli import demo as demo_module
from experiments.cli.demo import SPLIT_BRAIN_SCENARIO, demo_campaign
from experiments.cli.run import find_scenario
from experiments.report.demo_page import BEGIN, END, demo_markdown, replace_block
from experiments.scenario import load, resolve
from experiments.summary.check_queries import CheckResult, Verdict
from experiments.summary.verdict_words import read_result
from rebalance.backends import backend_names
from tests.fixtures.run_record import run_data

HERD_SWEEP = "demo-herd-sweep"


def test_the_demo_is_a_campaign_the_herd_sweep_first_on_every_backend_then_split_brain():
    campaign = demo_campaign()
    cells = [(cell.scenario, cell.backend) for cell in campaign.cells]
    sweep = [backend for scenario, backend in cells if scenario == HERD_SWEEP]
    assert sorted(sweep) == sorted(backend_names())   # the sweep names no backends: every registered one
    assert [scenario for scenario, _ in cells] == [HERD_SWEEP] * len(sweep) + [SPLIT_BRAIN_SCENARIO] * (
        len(cells) - len(sweep))                      # the longest runs start first
    assert sorted(backend for scenario, backend in cells if scenario == SPLIT_BRAIN_SCENARIO) == sorted(
        load(find_scenario(SPLIT_BRAIN_SCENARIO)).backends)
    assert {cell.strategy for cell in campaign.cells if cell.scenario == HERD_SWEEP} >= {"uniform", "range"}
    assert len(campaign.plan()) == len(cells)          # one run each
    narrowed = demo_campaign(("legacy",))
    assert {cell.backend for cell in narrowed.cells} == {"legacy"} and len(narrowed.cells) == 2


def test_the_sweep_grows_the_group_and_marks_each_size_once_it_is_stable():
    from experiments.scenario.actions import herd_mark_size

    scenario = load(find_scenario(HERD_SWEEP))
    steps = resolve(scenario).steps
    marks = [(index, herd_mark_size(step.params["name"])) for index, step in enumerate(steps)
             if step.action == "phase" and herd_mark_size(step.params["name"])]
    assert [size for _, size in marks] == [4, 8, 16, 32]
    assert scenario.topics[0].partitions == 2 * 32    # P fixed at the largest size's 2N
    for index, _ in marks:   # a mark waits for a stable group; then one join, and its leave once stable
        join, leave = steps[index + 1], steps[index + 2]
        assert steps[index].params["after"] == "stable"
        assert join.action == "join" and len(join.targets) == 1
        assert leave.action == "leave" and leave.targets == join.targets and leave.params["after"] == "stable"
    scales = [step for step in steps if step.action == "scale"]
    assert [step.params["to"] for step in scales] == [8, 16, 32] and all(s.params["after"] == "stable" for s in scales)
    assert resolve(scenario).to_json() == resolve(load(find_scenario(HERD_SWEEP))).to_json()


def test_the_split_brain_cut_outlives_the_session():
    split = load(find_scenario(SPLIT_BRAIN_SCENARIO))
    link = [step for step in split.timeline if step.action.value == "link"][0]
    assert link.duration * 1000 > split.group.session_timeout_ms   # the cut outlives the session: a zombie


def test_the_demo_command_has_no_executor_of_its_own():
    source = Path(demo_module.__file__).read_text()
    for word in ("subprocess", "Popen", "ThreadPoolExecutor", "signal", "import _", " _die_with_parent",
                 "cli.report import", "cli.run import"):
        assert word not in source, word


def _split(*columns: tuple[str, list[CheckResult]]) -> dict:
    """The split-brain readings as the demo hands them over: per backend, each check's reading."""
    return {backend: {check.check: read_result(check) for check in checks} for backend, checks in columns}


def test_the_published_markdown_has_the_plot_the_table_and_the_verdicts_in_words(tmp_path):
    points = pd.DataFrame([{"backend": b, "strategy": "range", "N": n, "requests_per_change": r,
                            "notifications_per_change": 0.0,
                            "last_assignment_s": 1.0} for b, n, r in (("legacy", 4, 30.0), ("legacy", 16, 480.0),
                                                             ("classic", 4, 8.0), ("classic", 16, 32.0))])
    split = _split(("legacy", [CheckResult("double-ownership", Verdict.FALSE, 2, "2 windows, 9.00 s in total")]),
                   ("classic", [CheckResult("double-ownership", Verdict.TRUE, 0, "every partition had at most one owner")]))
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
    from experiments.summary.read_back import RunData

    def run(backend: str, n: int, join: int, leave: int, strategy: str = "range") -> RunData:
        herd = pd.DataFrame([
            {"t": 1.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": join, "members_moved": 3,
             "stable_s": 0.5, "stop_the_world_s": 0.2, "unowned_partition_s": 1.0},
            {"t": 5.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": leave, "members_moved": 2,
             "stable_s": 0.4, "stop_the_world_s": 0.2, "unowned_partition_s": 1.0}])
        empty = pd.DataFrame()
        return run_data(run_dir=Path(f"/runs/{backend}-{strategy}-{n}"), info={"backend": backend, "members": n,
                       "strategy": strategy, "topics": {"t0": 2 * n}}, facts={"partitions": 2 * n}, verdicts=empty,
                       phases=empty,
                       throughput=empty, ownership=empty, faults=empty, herd=herd, metrics=empty, evidence={})

    runs = [run("legacy", n, n * n + 20 * n + 7, n * n) for n in (4, 8, 16, 32)] + [run("classic", 8, 28, 20)]
    out = io.StringIO()
    _print_herd(Console(file=out, width=40, force_terminal=False), runs)
    lines = out.getvalue().splitlines()
    assert lines[2].split() == ["backend", "strategy", "N", "P", "requests", "/", "join", "requests", "/", "leave",
                                "members", "moved", "(join)", "last", "assignment", "after", "join", "(s)"]
    assert [line.split() for line in lines[3:6]] == [["classic", "range", "8", "16", "28", "20", "3", "0.5"],
                                                     ["legacy", "range", "4", "8", "103", "16", "3", "0.5"],
                                                     ["legacy", "range", "8", "16", "231", "64", "3", "0.5"]]
    assert lines[8].startswith("Fitted cost of a join, one per backend and strategy")
    assert lines[9] == "  classic (range): no model for the join (1 group sizes; a fit needs at least 4)"
    assert lines[10].startswith("  legacy (range): requests per join ≈ 1.00·N² + 20.0·N + 7.00 (4 sizes N = 4, 8, "
                                "16, 32")
    assert "P = 2N in every run" in lines[10]


def test_only_a_swept_scenario_makes_points_of_the_herd_curve():
    from experiments.report.run_tables import swept_runs
    from experiments.summary.read_back import RunData

    def run(name: str, n: int) -> RunData:
        empty = pd.DataFrame()
        return run_data(run_dir=Path("/runs") / f"{name}-{n}", info={"name": name, "backend": "legacy", "members": n},
                       facts={}, verdicts=empty, phases=empty, throughput=empty, ownership=empty, faults=empty,
                       herd=empty, metrics=empty, evidence={})

    herd = [run("demo-herd", 8), run("demo-herd", 16)]
    split = run("demo-split-brain", 3)
    assert swept_runs([split, *herd]) == herd
    assert swept_runs([split]) == [split]


def test_the_published_markdown_has_a_column_and_a_line_per_backend():
    points = pd.DataFrame([{"backend": b, "strategy": s, "N": n, "requests_per_change": r,
                            "notifications_per_change": 0.0, "last_assignment_s": 1.0}
                           for b, s in (("legacy", "range"), ("classic", "range"), ("kip848", "uniform"))
                           for n, r in ((8, 9.0), (16, 9.0))])
    ok = CheckResult("double-ownership", Verdict.TRUE, 0, "every partition had at most one owner")
    split = _split(*[(backend, [ok]) for backend in ("legacy", "classic", "kip848")])
    text = demo_markdown(points=points, split=split, image="herd.png")
    assert "| kip848 | uniform | 16 | 9.0 |" in text and "classic (range), kip848 (uniform) and legacy (range)" in text
    assert "| check |" not in text and "Ok on every backend: `double-ownership`." in text   # all ok: one line


def test_the_published_markdown_opens_with_what_the_runs_show():
    from experiments.report.findings import Finding

    points = pd.DataFrame([{"backend": "legacy", "N": n, "requests_per_change": 9.0, "notifications_per_change": 0.0,
                            "last_assignment_s": 1.0} for n in (8, 16)])
    split = _split(("legacy", [CheckResult("offset-regressions", Verdict.FALSE, 3, "3 commits moved back")]),
                   ("classic", [CheckResult("offset-regressions", Verdict.TRUE, 0, "never went back")]))
    finding = Finding(scenario="demo-split-brain", ran="legacy and classic; one run each, n = 1",
                      text="Offset regressions (3) only on legacy.")
    text = demo_markdown(points=points, split=split, image="herd.png", findings=[finding])
    assert text.startswith("**What these runs show**")
    assert text.index("Offset regressions (3) only on legacy.") < text.index("![") < text.index(
        "| offset-regressions | **VIOLATED (3)** | ok |")


# -- the herd swept inside one run --------------------------------------------------------------

def _sweep_run(backend: str = "legacy", *, cost=lambda n: n * n + 20 * n + 7, name: str = "demo-herd-sweep"):
    """A summarised sweep run as the report reads it: growth in bulk (unmeasured), a `herd-N` mark at each
    size, then the measured join and leave; P fixed at 64."""

    phases, herd, t = [("timeline", 0.0)], [], 0.0
    for index, n in enumerate((4, 8, 16, 32)):
        if index:
            phases.append((f"scale-to-{n}", t))
            herd += [{"t": t + 0.1 + i / 100, "kind": "join", "live_before": n // 2 + i, "live_after": n // 2 + i + 1,
                      "requests": 999, "members_moved": 9} for i in range(n // 2)]
            t += 5
        phases += [(f"herd-{n}", t), ("join-1", t + 0.5)]
        herd += [{"t": t + 0.6, "kind": "join", "live_before": n, "live_after": n + 1, "requests": cost(n),
                  "members_moved": 3},
                 {"t": t + 3.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": n * n,
                  "members_moved": 2}]
        t += 5
    phases += [("swept", t), ("teardown", t + 1)]
    frame = pd.DataFrame(herd).assign(stable_s=0.5, stop_the_world_s=0.1, unowned_partition_s=1.0, overlapped=False,
                                      notifications=0, failed_attempts=0, server_requests=None)
    empty = pd.DataFrame()
    return run_data(run_dir=Path(f"/runs/{name}-{backend}"), info={"name": name, "backend": backend, "members": 4,
                   "strategy": "range", "topics": {"t0": 64}}, facts={"partitions": 64}, verdicts=empty,
                   phases=pd.DataFrame(phases, columns=["phase", "start_s"]), throughput=empty, ownership=empty,
                   faults=empty, herd=frame, metrics=empty, evidence={})


def test_a_sweep_run_gives_the_herd_at_each_marked_size_and_not_its_growth():
    from experiments.summary.herd_sizes import at_sizes, size_text
    from experiments.summary.read_back import herd_points

    run = _sweep_run()
    views = at_sizes(run)
    assert [view.group_size for view in views] == [4, 8, 16, 32]
    for view in views:   # the join and the leave at that size, never the bulk growth before the mark
        changes = view.herd_changes()
        assert list(changes["kind"]) == ["join", "leave"] and 999 not in set(changes["requests"])
    points = herd_points([run])
    assert list(points["N"]) == [4, 8, 16, 32] and list(points["changes"]) == [2, 2, 2, 2]
    assert size_text(run) == "N = 4 to 32"
    plain = views[0].__class__(**{**vars(run), "phases": pd.DataFrame()})
    assert at_sizes(plain) == [plain]   # no marks: the run is its own single view


def test_the_cost_model_fits_one_sweep_run_at_a_fixed_p():
    from experiments.summary.herd_model import change_rows, fit_models

    rows = change_rows([_sweep_run()])
    assert sorted(set(rows["N"])) == [4, 8, 16, 32] and set(rows["P"]) == {64}
    (model,) = fit_models(rows, kinds=("join",))
    assert model.terms == ("N2", "N", "1") and "P = 64 in every run" in model.folded
    assert [round(c.median, 6) for c in model.coefficients] == [1.0, 20.0, 7.0]


def test_a_report_takes_one_sweep_run_per_backend_as_a_swept_scenario():
    import io

    from rich.console import Console

    from experiments.cli.demo import _print_herd
    from experiments.report.findings import herd_costs
    from experiments.report.run_tables import swept_runs
    from experiments.report.scenario_runs import scenarios

    runs = [_sweep_run("legacy"), _sweep_run("classic", cost=lambda n: 3 * n + 4)]
    (scenario,) = scenarios(runs)
    assert scenario.swept and scenario.sizes == [4, 8, 16, 32] and swept_runs(runs) == runs
    costs = herd_costs(runs)
    assert len(costs[costs["kind"] == "join"]) == 8
    out = io.StringIO()
    _print_herd(Console(file=out, width=40, force_terminal=False), runs)
    lines = out.getvalue().splitlines()
    assert [line.split()[:5] for line in lines[3:7]] == [["classic", "range", "4", "64", "16"],
                                                         ["classic", "range", "8", "64", "28"],
                                                         ["classic", "range", "16", "64", "52"],
                                                         ["classic", "range", "32", "64", "100"]]
    assert any(line.startswith("  legacy (range): requests per join ≈ 1.00·N² + 20.0·N + 7.00") for line in lines)


def test_a_herd_mark_must_name_the_size_the_group_has():
    import pytest

    from experiments.scenario import ScenarioError

    path = find_scenario(HERD_SWEEP)
    text = path.read_text().replace('name = "herd-8"', 'name = "herd-9"')
    with pytest.raises(ScenarioError, match="herd-9 marks the herd at N = 9, but .* the group has 8 members"):
        _resolve_text(text)
    assert _resolve_text(path.read_text()).steps   # as shipped, every mark names the group's size


def _resolve_text(text: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".toml") as file:
        file.write(text)
        file.flush()
        return resolve(load(file.name))
