"""The herd by line (a backend and the strategy its runs used) and changes that overlap.

- the plot, the tables, the findings and the cost model name each line `backend (strategy)`, so kip848 with
  its default `uniform` and kip848 with `range` are two labelled lines;
- a change the next one began before it was stable is marked `overlapped` in the herd table (from the
  runner's record of a step taken on its timeout, or from the events), starred in the report's tables, and
  left out of the cost model, which says how many it left out;
- every join moving the same number of members gives the constant, not a per-member slope.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from experiments.folders.run_folder import RunFolder
from experiments.report import plots
from experiments.report.findings import herd_sentence
from experiments.report.run_tables import herd_tables
from experiments.report.scenario_runs import scenarios
from experiments.summary.herd import herd_table, overlapping
from experiments.summary.herd_model import HerdModel, change_rows, fit_models, fit_one
from experiments.summary.read_back import RunData, herd_points
from tests.fixtures.run_record import run_data, write_record
from tests.fixtures.spark import summarised_with_the_suite

pytestmark = pytest.mark.timeout(900)


def _run(backend: str, strategy: str, n: int, join: float, leave: float, moved: int = 2,
         overlapped: tuple[bool, bool] = (False, False)) -> RunData:
    herd = pd.DataFrame([
        {"t": 1.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": join, "notifications": 0,
         "failed_attempts": 0, "members_moved": moved, "stable_s": 0.5, "stop_the_world_s": 0.0,
         "unowned_partition_s": 0.1, "overlapped": overlapped[0]},
        {"t": 5.0, "kind": "leave", "live_before": n + 1, "live_after": n, "requests": leave, "notifications": 0,
         "failed_attempts": 0, "members_moved": moved, "stable_s": 0.5, "stop_the_world_s": 0.0,
         "unowned_partition_s": 0.1, "overlapped": overlapped[1]}])
    empty = pd.DataFrame()
    return run_data(run_dir=Path(f"/runs/{backend}-{strategy}-{n}"), info={"name": "herd", "backend": backend,
                   "strategy": strategy, "members": n, "topics": {"t0": 2 * n}}, facts={"partitions": 2 * n},
                   verdicts=empty, phases=empty, throughput=empty, ownership=empty, faults=empty, herd=herd,
                   metrics=empty, evidence={})


SIZES = (4, 8, 16, 32)


def _sweep() -> list[RunData]:
    """classic/range; kip848 with uniform (two members move at every N) and with range (about half move)."""
    return ([_run("classic", "range", n, 3 * n + 6, 3 * n + 1, moved=n + 1) for n in SIZES]
            + [_run("kip848", "uniform", n, 9, 6, moved=2) for n in SIZES]
            + [_run("kip848", "range", n, 4.5 * (n // 2 + 1), 4.0 * (n // 2), moved=n // 2 + 1) for n in SIZES])


def test_kip848_with_uniform_and_with_range_are_two_labelled_lines_of_the_plot():
    runs = _sweep()
    figure = plots.herd_figure(herd_points(runs), runs)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    joins = {label.split(":")[0]: line for label, line in lines.items() if label.endswith("join, measured")}
    assert sorted(joins) == ["classic (range)", "kip848 (range)", "kip848 (uniform)"]
    uniform, ranged = joins["kip848 (uniform)"], joins["kip848 (range)"]
    assert uniform.get_color() == ranged.get_color() and uniform.get_marker() != ranged.get_marker()
    models = sorted(label for label in lines if " model: " in label)
    assert [label.split(" model: ")[0] for label in models] == ["classic (range)", "kip848 (range)", "kip848 (uniform)"]
    assert lines[next(label for label in models if label.startswith("kip848 (range)"))].get_linestyle() == "--"


def test_the_cost_model_is_fitted_per_line_and_a_constant_where_every_join_moves_as_many():
    models = {model.label: model for model in fit_models(change_rows(_sweep()), kinds=("join",))}
    assert sorted(models) == ["classic (range)", "kip848 (range)", "kip848 (uniform)"]
    assert all(isinstance(model, HerdModel) for model in models.values())
    assert {c.term: round(c.median, 6) for c in models["kip848 (range)"].coefficients} == {"moved": 4.5, "1": 0.0}
    uniform = models["kip848 (uniform)"]
    assert uniform.terms == ("1",) and uniform.formula == "9.00" and "M = 2 in every join" in uniform.folded
    assert uniform.sentence().startswith("kip848 (uniform): requests per join ≈ 9.00")


def test_overlapped_changes_are_left_out_of_the_model_which_says_how_many():
    runs = [_run("classic", "range", n, 3 * n + 6, 3 * n + 1) for n in (4, 8, 16, 32, 64)]
    runs[2] = _run("classic", "range", 16, 37, 101, overlapped=(True, True))   # the join and leave merged
    model = fit_one("classic", "join", change_rows(runs)[lambda rows: rows["kind"] == "join"], strategy="range")
    assert {c.term: round(c.median, 6) for c in model.coefficients} == {"N": 3.0, "1": 6.0}   # 37 not fitted
    assert model.left_out == 1 and model.sizes == (4, 8, 32, 64)
    assert "1 overlapped change left out" in model.sentence()
    text = herd_sentence(herd_points(runs), runs=runs)
    assert "classic (range) 18 / 30 / 37* / 102 / 198" in text and "*: the change overlapped another" in text
    assert "1 overlapped change left out" in text


def test_the_report_tables_name_each_line_s_strategy_and_star_an_overlapped_change():
    runs = [_run("kip848", "uniform", n, 9, 6) for n in (8, 16)] + [
        _run("classic", "range", n, 3 * n + 6, 3 * n + 1, overlapped=(n == 16, False)) for n in (8, 16)]
    (scenario,) = scenarios(runs)
    joins = herd_tables(scenario)[0]
    assert list(joins.frame.columns) == ["group size N", "classic (range)", "kip848 (uniform)"]
    assert joins.frame.iloc[1].tolist() == ["N = 16", "54*", "9"]
    assert "*: the change overlapped another" in joins.note
    both = runs + [_run("kip848", "range", n, 20, 18) for n in (8, 16)]
    (scenario,) = scenarios(both)    # kip848 ran two strategies: the columns say backend/strategy
    assert list(herd_tables(scenario)[0].frame.columns) == ["group size N", "classic/range", "kip848/range",
                                                            "kip848/uniform"]


# -- the summary's mark -------------------------------------------------------------------------

def _changes(stable: list[float | None], went_ahead: list[int] | None = None) -> pd.DataFrame:
    rows = [{"run": 0, "change": index, "t": float(4 * index), "kind": "join" if index % 2 == 0 else "leave",
             "members_changed": 1, "live_before": 8, "live_after": 9, "requests": 10, "notifications": 0,
             "failed_attempts": 0, "stable_t": value, "members_moved": 2,
             "next_went_ahead": (went_ahead or [0] * len(stable))[index]} for index, value in enumerate(stable)]
    return pd.DataFrame(rows)


def test_a_change_not_stable_when_the_next_began_overlaps_it_and_both_are_marked():
    assert overlapping(_changes([1.0, 5.0, 9.0])).tolist() == [False, False, False]
    assert overlapping(_changes([None, 5.0, 9.0])).tolist() == [True, True, False]    # nothing settled the first
    assert overlapping(_changes([1.0, 5.0, None])).tolist() == [False, False, False]  # the last: nothing follows
    assert overlapping(_changes([1.0, 5.0, 9.0], went_ahead=[0, 1, 0])).tolist() == [False, True, True]
    owned = pd.DataFrame({"tp": ["t0-0"], "member": ["a"], "start": [0.0], "end": [20.0]})
    table = herd_table(_changes([None, 5.0]), owned, partitions=1)
    assert table["overlapped"].tolist() == [True, True] and "next_went_ahead" not in table


def _line(t_s: float, **fields) -> str:
    return json.dumps({"run_id": "r", "backend": "classic", "ts_ns": int(t_s * 1e9), "ts_ms": int(t_s * 1e3),
                       "process": fields.get("member") or "runner", **fields}) + "\n"


def _join_then_leave(root: Path, *, leave_params: dict) -> None:
    """a and b own t0-0..3; c joins at 2 s and takes t0-3 at 3.5 s (every member done), then leaves: the
    runner's leave event at 5 s carries `leave_params`, c stops at 5.1 s and b takes t0-3 back."""
    events = RunFolder(root).events
    events.mkdir(parents=True)
    members = [
        *(_line(0.5, member=m, type="member_started") for m in "ab"),
        _line(0.6, member="a", type="partitions_assigned", partitions=["t0-0", "t0-1"]),
        _line(0.6, member="b", type="partitions_assigned", partitions=["t0-2", "t0-3"]),
        *(_line(0.6, member=m, type="rebalance_completed", generation=1) for m in "ab"),
        _line(2.0, member="c", type="member_started"),
        _line(2.0, member="c", type="rebalance_started", trigger="join"),
        *(_line(2.1, member=m, type="coordination_request", op="JoinGroup", group="g", latency_ms=1.0) for m in "abc"),
        _line(3.4, member="b", type="partitions_revoked", partitions=["t0-3"]),
        _line(3.5, member="c", type="partitions_assigned", partitions=["t0-3"]),
        *(_line(3.5, member=m, type="rebalance_completed", generation=2) for m in "abc"),
        _line(5.1, member="c", type="partitions_revoked", partitions=["t0-3"]),
        _line(5.1, member="c", type="member_stopped", reason="close"),
        *(_line(5.5, member=m, type="coordination_request", op="JoinGroup", group="g", latency_ms=1.0) for m in "ab"),
        _line(5.6, member="b", type="partitions_assigned", partitions=["t0-3"]),
        *(_line(5.6, member=m, type="rebalance_completed", generation=3) for m in "ab"),
        *(_line(9.0, member=m, type="member_stopped", reason="close") for m in "ab"),
    ]
    (events / "members.jsonl").write_text("".join(members))
    write_record(root, topics={"t0": 4}, members=2)
    (events / "runner.jsonl").write_text("".join([
        _line(0.0, member="", type="phase", name="timeline"),
        _line(2.0, member="", type="phase", name="join-1", fault_id="f1", targets=["c"]),
        _line(5.0, member="", type="fault_started", fault_id="f2", kind="leave", action="leave", target="c",
              member_ids=["c"], params=leave_params),
        _line(8.5, member="", type="phase", name="teardown"),
    ]))


WAITED = {"after": "stable", "timeout": 3, "waited_s": 3.0, "stable": False}
summarised_with_the_suite("leave-timed-out", partial(_join_then_leave, leave_params=WAITED))
summarised_with_the_suite("leave-stable", partial(_join_then_leave, leave_params={**WAITED, "waited_s": 0.0,
                                                                                 "stable": True}))


@pytest.mark.spark
def test_a_leave_the_runner_took_on_its_timeout_marks_the_join_and_the_leave_overlapped(synthetic_runs):
    """What the runner saw counts even where the events look settled (a kip848 newcomer can hold part of its
    target and be done while others have yet to give it the rest)."""
    timed_out, stable = (synthetic_runs[name].tables["herd"].set_index("t") for name in ("leave-timed-out", "leave-stable"))
    assert timed_out.loc[[2.0, 5.1], "overlapped"].tolist() == [True, True]
    assert stable.loc[[2.0, 5.1], "overlapped"].tolist() == [False, False]
    assert stable.at[2.0, "requests"] == 3
