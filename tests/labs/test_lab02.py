"""Lab 2 (the herd effect), walked: the herd sweep on the three rebalancers at four group sizes, its report and
the events it points at; the claims checked against the same change table and cost model the report prints
(`experiments.summary.read_back`, `experiments.summary.herd_model`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import RunFolder
from tests.labs.runs import events, runs_of
from tests.labs.walk import Claim, Lab, Walk

pytestmark = [pytest.mark.labs, pytest.mark.timeout(3600)]

LAB = Lab("02-herd-effect.md")


def test_every_command_runs_clean(walked: Walk) -> None:
    assert [outcome.block.index for outcome in walked.outcomes] == [block.index for block in walked.text.blocks]
    assert not walked.problems, "\n".join(walked.problems)


def test_claim(walked: Walk, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


def _sizes(walked: Walk) -> list[int]:
    return sorted(int(path.name.removeprefix("herd-")) for path in (walked.folder / RUNS_DIR).glob("herd-[0-9]*"))


def _run(walked: Walk, n: int, backend: str) -> Path:
    return runs_of(walked.folder / RUNS_DIR / f"herd-{n}")[backend]


def _rows(walked: Walk):
    """The report's change table: one row per join or leave of a group of N, every run of the sweep."""
    from experiments.summary.herd_model import change_rows
    from experiments.summary.read_back import load_run

    runs = [load_run(run) for n in _sizes(walked) for run in runs_of(walked.folder / RUNS_DIR / f"herd-{n}").values()]
    return change_rows(runs)


def _change(walked: Walk, backend: str, n: int, kind: str):
    """The scheduled join (N -> N + 1) or leave (N + 1 -> N) of one run, from its summary's change table."""
    import pandas as pd

    herd = pd.read_parquet(RunFolder(_run(walked, n, backend)).summary_table("herd"))
    before, after = (n, n + 1) if kind == "join" else (n + 1, n)
    rows = herd[(herd["kind"] == kind) & (herd["live_before"] == before) & (herd["live_after"] == after)]
    assert len(rows) == 1, f"{backend} N = {n}: expected one {kind} {before} -> {after}, found\n{herd}"
    return rows.iloc[0]


def _most(walked: Walk, claim: Claim, kind: str) -> None:
    sizes = [int(n) for n in claim.args["sizes"].split(",")]
    assert _sizes(walked) == sizes, f"the sweep ran N = {_sizes(walked)}"
    leader, factor = claim.args["backend"], float(claim.args["times"])
    ratios = []
    for n in sizes:
        costs = {backend: int(_change(walked, backend, n, kind)["requests"]) for backend in ("legacy", "classic", "kip848")}
        others = max(cost for backend, cost in costs.items() if backend != leader)
        assert costs[leader] >= factor * others, f"{claim.sentence}\nN = {n}: requests per {kind} {costs}"
        ratios.append(costs[leader] / others)
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[f"N={n}"] = costs
    if claim.args.get("widens") == "yes":
        assert ratios[-1] > ratios[0], f"the gap did not widen from N = {sizes[0]} to {sizes[-1]}: {ratios}"


@LAB.check("join-costs-most")
def _join_costs(walked: Walk, claim: Claim) -> None:
    _most(walked, claim, "join")


@LAB.check("quick-join-costs-most")
def _quick_join_costs(walked: Walk, claim: Claim) -> None:
    """Step 0's sweep inside one run per rebalancer: each size's join, as the report's herd table reads it."""
    from experiments.summary.herd_sizes import by_size
    from experiments.summary.read_back import load_run

    runs = [load_run(run) for run in runs_of(walked.folder / RUNS_DIR / "herd-quick").values()]
    costs: dict[int, dict[str, float]] = {}
    for view in by_size(runs):
        changes = view.herd_changes()
        joins = changes[changes["kind"] == "join"]["requests"] if "kind" in changes else changes
        if view.group_size is not None and len(joins):
            costs.setdefault(int(view.group_size), {})[view.backend] = float(joins.median())
    sizes = [int(n) for n in claim.args["sizes"].split(",")]
    assert sorted(costs) == sizes, f"the sweep measured N = {sorted(costs)}"
    leader, factor = claim.args["backend"], float(claim.args["times"])
    for n in sizes:
        others = max(cost for backend, cost in costs[n].items() if backend != leader)
        assert costs[n][leader] >= factor * others, f"{claim.sentence}\nN = {n}: requests per join {costs[n]}"
    walked.measured[f"line {claim.line}: {claim.id}"] = costs


@LAB.check("leave-costs-most")
def _leave_costs(walked: Walk, claim: Claim) -> None:
    _most(walked, claim, "leave")


@LAB.check("model")
def _model(walked: Walk, claim: Claim) -> None:
    """The fitted model of the join (the report's), its coefficient of that term within [low, high]."""
    from experiments.summary.herd_model import HerdModel, fit_models

    models = {model.backend: model for model in fit_models(_rows(walked), kinds=("join",))}
    model = models[claim.args["backend"]]
    assert isinstance(model, HerdModel), f"no model: {model.sentence()}"
    (value,) = [c.median for c in model.coefficients if c.term == claim.args["term"]]
    walked.note(claim, model.sentence())
    low, high = float(claim.args["low"]), float(claim.args["high"])
    assert low <= value <= high, f"{claim.sentence}\n{model.sentence()}"


@LAB.check("moved-at-join")
def _moved(walked: Walk, claim: Claim) -> None:
    assert claim.args == {"classic": "all", "kip848": "at-most-all"}
    for n in _sizes(walked):
        classic = int(_change(walked, "classic", n, "join")["members_moved"])
        kip848 = int(_change(walked, "kip848", n, "join")["members_moved"])
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[f"N={n}"] = \
            {"classic": classic, "kip848": kip848}
        assert classic == n + 1, f"N = {n}: classic's join changed {classic} members of {n + 1}"
        assert 1 <= kip848 <= n + 1, f"N = {n}: kip848's join changed {kip848} members of {n + 1}"


def _member(event: dict) -> str:
    return event["member"]


@LAB.check("notified-all")
def _notified(walked: Walk, claim: Claim) -> None:
    """At the join every member already there got a notification within a second, and at the leave every
    member that stayed."""
    n = int(claim.args["n"])
    run = _run(walked, n, claim.args["backend"])
    started = events(run, "member_started")
    stopped = events(run, "member_stopped")
    notifications = events(run, "watch_notification")
    newcomer = started[-1]     # the members of the group started during the warm-up, the newcomer at the join
    leave = next(e for e in stopped if e["ts_ns"] > newcomer["ts_ns"])
    old = {_member(e) for e in started[:-1]}
    assert len(old) == n, f"{len(old)} members before the join"
    for change, expected in ((newcomer, old), (leave, old | {_member(newcomer)} - {_member(leave)})):
        # a leaving member deletes its registration just before it logs member_stopped
        told = {_member(e) for e in notifications if abs(e["ts_ns"] - change["ts_ns"]) < 1e9}
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[change["type"]] = \
            f"{len(told & expected)} of {len(expected)} notified within 1 s"
        assert told >= expected, f"{claim.sentence}\nnot notified within 1 s of {change['type']}: {sorted(expected - told)}"


@LAB.check("classic-join-requests")
def _classic_join(walked: Walk, claim: Claim) -> None:
    """The newcomer's FindCoordinator and MEMBER_ID_REQUIRED, then each of the N + 1 members' one JoinGroup,
    one SyncGroup and one OffsetFetch, until the leave."""
    n = int(claim.args["n"])
    run = _run(walked, n, "classic")
    newcomer = events(run, "member_started")[-1]
    leave = next(e for e in events(run, "member_stopped") if e["ts_ns"] > newcomer["ts_ns"])
    requests = [e for e in events(run, "coordination_request") if newcomer["ts_ns"] <= e["ts_ns"] < leave["ts_ns"]]
    first = [e for e in requests if _member(e) == _member(newcomer)][:2]
    assert [(e["op"], e.get("error") or "") for e in first] == [("FindCoordinator", ""), ("JoinGroup", "MEMBER_ID_REQUIRED")], \
        f"the newcomer began with {[(e['op'], e.get('error')) for e in first]}"
    members = {_member(e) for e in events(run, "member_started")}
    assert len(members) == n + 1
    for op in claim.args["per_member"].split(","):
        sent = [_member(e) for e in requests if e["op"] == op and not e.get("error")]
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[op] = f"{len(sent)} from {len(set(sent))} members"
        assert sorted(sent) == sorted(members), f"{op}: sent by {sorted(sent)}, expected each of {sorted(members)} once"


@LAB.check("witness")
def _witness(walked: Walk, claim: Claim) -> None:
    """The servers' count of each scheduled join and leave beside the members': the broker's within `within`,
    ZooKeeper's above."""
    within = float(claim.args["within"])
    for n in _sizes(walked):
        for kind in ("join", "leave"):
            for backend in claim.args["exact"].split(","):
                change = _change(walked, backend, n, kind)
                walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[f"{backend} N={n} {kind}"] = \
                    f"servers {change['server_requests']:.0f}, members {change['requests']:.0f}"
                assert abs(change["server_requests"] - change["requests"]) <= within, \
                    f"{backend} N = {n} {kind}: servers {change['server_requests']}, members {change['requests']}"
            change = _change(walked, claim.args["more"], n, kind)
            walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[f"{claim.args['more']} N={n} {kind}"] = \
                f"servers {change['server_requests']:.0f}, members {change['requests']:.0f}"
            assert change["server_requests"] > change["requests"], \
                f"{claim.args['more']} N = {n} {kind}: servers {change['server_requests']}, members {change['requests']}"


def test_the_sizes_are_the_lab_s(walked: Walk) -> None:
    """The sweep's sizes in the text's loop are the sizes the claims speak of."""
    (loop,) = [c for b in walked.text.blocks for c in walked.commands(b) if c.startswith("for n in")]
    assert [int(n) for n in re.findall(r"\d+", loop.split(";")[0])] == _sizes(walked)
