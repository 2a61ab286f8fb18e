"""Lab 6 (the herd in virtual time), walked: a thousand members simulated on the coordinators, a hundred on 0.8,
summarised by Spark; a seed replayed; the validation table read back. Every claim checked against the summaries'
change tables, the run folders and what `sim-validate` printed."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import RunFolder
from tests.labs.walk import Claim, Lab, Walk

pytestmark = [pytest.mark.labs, pytest.mark.timeout(1800)]

LAB = Lab("06-virtual-time.md")


def test_every_command_runs_clean(walked: Walk) -> None:
    assert [outcome.block.index for outcome in walked.outcomes] == [block.index for block in walked.text.blocks]
    assert not walked.problems, "\n".join(walked.problems)


def test_claim(walked: Walk, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


def _join(walked: Walk, run: str) -> pd.Series:
    """The timeline's join (N -> N + 1) of a simulated run, from its summary's change table."""
    folder = RunFolder(walked.folder / RUNS_DIR / run)
    members = folder.record().members
    herd = pd.read_parquet(folder.summary_table("herd"))
    rows = herd[(herd["kind"] == "join") & (herd["live_before"] == members) & (herd["live_after"] == members + 1)]
    assert len(rows) == 1, f"{run}: expected one join {members} -> {members + 1}, found\n{herd}"
    return rows.iloc[0]


@LAB.check("join-cost")
def _join_cost(walked: Walk, claim: Claim) -> None:
    requests = int(_join(walked, claim.args["run"])["requests"])
    walked.note(claim, requests)
    members = int(claim.args["members"])
    assert requests == int(claim.args["per_member"]) * members + int(claim.args["plus"]), f"{claim.sentence}\n{requests}"


@LAB.check("join-few")
def _join_few(walked: Walk, claim: Claim) -> None:
    requests = int(_join(walked, claim.args["run"])["requests"])
    walked.note(claim, requests)
    assert requests <= int(claim.args["at_most"]), f"{claim.sentence}\n{requests}"


@LAB.check("join-more-than")
def _join_more_than(walked: Walk, claim: Claim) -> None:
    requests = int(_join(walked, claim.args["run"])["requests"])
    walked.note(claim, requests)
    assert requests > int(claim.args["requests"]), f"{claim.sentence}\n{requests}"


@LAB.check("same-events")
def _same_events(walked: Walk, claim: Claim) -> None:
    first, second = (RunFolder(walked.folder / RUNS_DIR / run) for run in claim.args["runs"].split(","))
    files = [path.name for path in first.event_files()]
    walked.note(claim, files)
    assert files and files == [path.name for path in second.event_files()]
    for path in first.event_files():
        assert path.read_bytes() == (second.events / path.name).read_bytes(), f"{claim.sentence}\n{path.name} differs"
    assert "same" in walked.output(claim).split()


def _validation_rows(walked: Walk, claim: Claim) -> list[list[str]]:
    """The rows `sim-validate` printed: | backend | change | N | P | real runs | simulated | verdict |."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in walked.output(claim).splitlines() if line.startswith("| ") and not line.startswith("| backend")]
    assert rows, f"sim-validate printed no table:\n{walked.output(claim)}"
    return rows


@LAB.check("validated")
def _validated(walked: Walk, claim: Claim) -> None:
    rows = [row for row in _validation_rows(walked, claim) if row[0] == claim.args["backend"]]
    walked.note(claim, [row[-1] for row in rows])
    assert rows and all(row[-1] == "inside" or row[-1].startswith("within 10%") for row in rows), \
        f"{claim.sentence}\n" + "\n".join(" | ".join(row) for row in rows)
