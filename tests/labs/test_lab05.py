"""Lab 5 (one join up close), walked: the herd at N = 8 on the three rebalancers and once more on kip848 with
`uniform`, their report, the join's row of each change table and the kip848 heartbeats; every claim checked
against the summaries' change tables and the events."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import RunFolder
from tests.labs.runs import events
from tests.labs.walk import Claim, Lab, Walk

pytestmark = [pytest.mark.labs, pytest.mark.timeout(2400)]

LAB = Lab("05-three-protocols.md")
N = 8


def test_every_command_runs_clean(walked: Walk) -> None:
    assert [outcome.block.index for outcome in walked.outcomes] == [block.index for block in walked.text.blocks]
    assert not walked.problems, "\n".join(walked.problems)


def test_claim(walked: Walk, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


def _run(walked: Walk, name: str) -> Path:
    return walked.folder / RUNS_DIR / name


def _change(walked: Walk, name: str, kind: str = "join") -> pd.Series:
    """The scheduled join (8 -> 9) or leave (9 -> 8) of a run, from its summary's change table."""
    herd = pd.read_parquet(RunFolder(_run(walked, name)).summary_table("herd"))
    before, after = (N, N + 1) if kind == "join" else (N + 1, N)
    rows = herd[(herd["kind"] == kind) & (herd["live_before"] == before) & (herd["live_after"] == after)]
    assert len(rows) == 1, f"{name}: expected one {kind} {before} -> {after}, found\n{herd}"
    return rows.iloc[0]


def _join_window(run: Path) -> tuple[dict, int]:
    """The newcomer's member_started and the time of the scheduled leave after it."""
    newcomer = events(run, "member_started")[-1]
    leave = next(e for e in events(run, "member_stopped") if e["ts_ns"] > newcomer["ts_ns"])
    return newcomer, leave["ts_ns"]


@LAB.check("moved")
def _moved(walked: Walk, claim: Claim) -> None:
    moved = int(_change(walked, claim.args["run"])["members_moved"])
    walked.note(claim, moved)
    if "members" in claim.args:
        assert moved == int(claim.args["members"]), f"{claim.sentence}\n{claim.args['run']}: {moved} moved"
    else:
        assert 1 <= moved <= int(claim.args["at_most"]), f"{claim.sentence}\n{claim.args['run']}: {moved} moved"


@LAB.check("cheaper")
def _cheaper(walked: Walk, claim: Claim) -> None:
    names = claim.args["runs"].split(",")
    costs = [int(_change(walked, name)["requests"]) for name in names]
    walked.note(claim, dict(zip(names, costs, strict=True)))
    assert costs == sorted(costs) and len(set(costs)) == len(costs), f"{claim.sentence}\n{dict(zip(names, costs, strict=True))}"


@LAB.check("stop-the-world")
def _stop_the_world(walked: Walk, claim: Claim) -> None:
    walked.note(claim, {name: float(_change(walked, name)["stop_the_world_s"]) for name in
                        ("three-8/legacy", "three-8/classic", "three-8/kip848", "kip848-uniform-8")})
    for name in claim.args["zero"].split(","):
        assert _change(walked, name)["stop_the_world_s"] == 0, f"{name}: {_change(walked, name)}"
    for name in ("three-8/legacy", "three-8/classic", "three-8/kip848", "kip848-uniform-8"):
        value = _change(walked, name)["stop_the_world_s"]
        assert value < float(claim.args["under_s"]), f"{name}: stop-the-world {value:.2f} s"


@LAB.check("busy-are-changed")
def _busy(walked: Walk, claim: Claim) -> None:
    """Between the join and the leave, the members that sent a heartbeat other than steady are the members
    whose partitions changed (revoked or assigned), the newcomer among them."""
    run = _run(walked, claim.args["run"])
    newcomer, leave = _join_window(run)
    within = [e for e in events(run) if newcomer["ts_ns"] <= e["ts_ns"] < leave]
    busy = {e["member"] for e in within if e["type"] == "coordination_request"
            and e["op"] == "ConsumerGroupHeartbeat" and e.get("detail") != "steady"}
    changed = {e["member"] for e in within if e["type"] in ("partitions_revoked", "partitions_assigned")}
    walked.note(claim, {"not steady": sorted(busy), "partitions changed": sorted(changed)})
    assert busy == changed, f"{claim.sentence}\nnot steady: {sorted(busy)}; partitions changed: {sorted(changed)}"
    assert newcomer["member"] in busy
    assert len(busy) == int(_change(walked, claim.args["run"])["members_moved"])


@LAB.check("steady-outnumber")
def _steady(walked: Walk, claim: Claim) -> None:
    run = _run(walked, claim.args["run"])
    steady = sum(1 for e in events(run, "coordination_request") if e.get("detail") == "steady")
    changes = int(_change(walked, claim.args["run"], "join")["requests"]) \
        + int(_change(walked, claim.args["run"], "leave")["requests"])
    walked.note(claim, {"steady": steady, "join + leave requests": changes})
    assert steady >= float(claim.args["times"]) * changes, f"{claim.sentence}\nsteady {steady}, changes {changes}"
