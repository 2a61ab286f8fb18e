"""Lab 3 (split brain), walked: the comparison of split-brain-a on the three rebalancers, its report and the
events the lab points at, every claim checked against the summaries the report prints and the events."""

from __future__ import annotations

import pytest

from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import RunFolder
from tests.labs.runs import events, runs_of, verdicts, word
from tests.labs.walk import Claim, Lab, Walk

pytestmark = [pytest.mark.labs, pytest.mark.timeout(1800)]

LAB = Lab("03-split-brain.md")


def test_every_command_runs_clean(walked: Walk) -> None:
    assert [outcome.block.index for outcome in walked.outcomes] == [block.index for block in walked.text.blocks]
    assert not walked.problems, "\n".join(walked.problems)


def test_claim(walked: Walk, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


def _runs(walked: Walk):
    return runs_of(walked.folder / RUNS_DIR / "split-a")


def _names(value: str) -> list[str]:
    return value.split(",")


def _is(member: str, name: str) -> bool:
    """A member id as the events write it (legacy: GROUP_m001) is the lab's name (m001)."""
    return member == name or member.endswith(f"_{name}")


def _cut(run) -> tuple[dict, dict]:
    (started,) = events(run, "fault_started")
    (stopped,) = events(run, "fault_stopped")
    return started, stopped


@LAB.check("runs")
def _ran(walked: Walk, claim: Claim) -> None:
    walked.note(claim, sorted(_runs(walked)))
    assert sorted(_runs(walked)) == sorted(_names(claim.args["backends"])), claim.sentence


@LAB.check("zombie")
def _zombie(walked: Walk, claim: Claim) -> None:
    for backend, run in _runs(walked).items():
        started, stopped = _cut(run)
        hit = started["member_ids"]
        assert len(hit) == 1 and _is(hit[0], claim.args["member"]), f"{backend}: the cut hit {hit}"
        assert started["link"] == claim.args["link"], f"{backend}: the {started['link']} link was cut"
        seconds = (stopped["ts_ns"] - started["ts_ns"]) / 1e9
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[backend] = \
            f"{hit[0]} {started['link']} link cut for {seconds:.1f} s"
        assert abs(seconds - float(claim.args["seconds"])) < 1, f"{backend}: the cut lasted {seconds:.1f} s"


@LAB.check("verdicts")
def _verdicts(walked: Walk, claim: Claim) -> None:
    args = dict(claim.args)
    check = args.pop("check")
    runs = _runs(walked)
    got = {backend: word(verdicts(runs[backend])[check]["result"]) for backend in args}
    walked.note(claim, {backend: f'{verdicts(runs[backend])[check]["result"]}: {verdicts(runs[backend])[check]["detail"]}'
                        for backend in args})
    assert got == args, f"{claim.sentence}\n{check}: {got}"


@LAB.check("regressions-by")
def _regressions_by(walked: Walk, claim: Claim) -> None:
    """Every offset regression of the run is the zombie's commit, made after the cut healed."""
    import pandas as pd

    run = _runs(walked)[claim.args["backend"]]
    evidence = pd.read_parquet(RunFolder(run).evidence_table("offset-regressions"))
    _, stopped = _cut(run)
    first = min(event["ts_ns"] for event in events(run))
    healed_s = (stopped["ts_ns"] - first) / 1e9
    walked.note(claim, evidence[["tp", "t", "member", "offset", "highest_before"]].to_dict("records"))
    assert len(evidence), "no offset regression"
    assert all(_is(member, claim.args["member"]) for member in evidence["member"]), evidence.to_string()
    assert (evidence["t"] >= healed_s - 0.5).all(), f"a regression before the heal at {healed_s:.1f} s:\n{evidence}"
    assert (evidence["offset"] < evidence["highest_before"]).all()


@LAB.check("zombie-story")
def _story(walked: Walk, claim: Claim) -> None:
    """Another member takes the zombie's partitions about a session timeout into the cut; the zombie keeps
    processing them; it hears of the loss only once the cut heals."""
    name = claim.args["member"]
    for backend in _names(claim.args["backends"]):
        run = _runs(walked)[backend]
        started, stopped = _cut(run)
        mine = [e for e in events(run, "partitions_assigned") if _is(e["member"], name) and e["ts_ns"] < started["ts_ns"]]
        held = set(mine[-1]["partitions"])
        taken = [e for e in events(run, "partitions_assigned")
                 if not _is(e["member"], name) and started["ts_ns"] < e["ts_ns"] < stopped["ts_ns"]
                 and held & set(e["partitions"])]
        assert taken, f"{backend}: nobody took {sorted(held)} during the cut"
        takeover = taken[0]["ts_ns"]
        after_s = (takeover - started["ts_ns"]) / 1e9
        assert 4 <= after_s <= 12, f"{backend}: taken {after_s:.1f} s into the cut (the session timeout is 6 s)"
        (lost, *_) = [e for e in events(run, "partitions_lost") if _is(e["member"], name)]
        assert 0 <= (lost["ts_ns"] - stopped["ts_ns"]) / 1e9 < 5, f"{backend}: {name} heard of its loss at " \
            f"{(lost['ts_ns'] - stopped['ts_ns']) / 1e9:+.1f} s from the heal"
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[backend] = (
            f"took {sorted(held)} {after_s:.1f} s into the cut; heard of the loss "
            f"{(lost['ts_ns'] - stopped['ts_ns']) / 1e9:.2f} s after the heal")
        processed = [e for e in events(run, "records_consumed")
                     if _is(e["member"], name) and takeover < e["ts_ns"] < lost["ts_ns"] and f"{e['topic']}-{e['partition']}" in held]
        assert processed, f"{backend}: {name} processed nothing of {sorted(held)} after it was taken"


@LAB.check("refused")
def _refused(walked: Walk, claim: Claim) -> None:
    """Each backend refused at least one commit, every refused commit is the zombie's, made after the cut began,
    with one of the errors named; the lab's example error is among them."""
    allowed = set(_names(claim.args["errors"]))
    for backend in _names(claim.args["backends"]):
        run = _runs(walked)[backend]
        started, _ = _cut(run)
        failed = events(run, "commit_failed")
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[backend] = \
            [f"{event['member']} {event['error']}" for event in failed]
        assert failed, f"{backend}: no commit was refused"
        for event in failed:
            assert _is(event["member"], claim.args["member"]), f"{backend}: {event['member']}'s commit refused"
            assert event["ts_ns"] > started["ts_ns"], f"{backend}: a commit refused before the cut"
            assert event["error"] in allowed, f"{backend}: refused with {event['error']}"
        assert "UNKNOWN_MEMBER_ID" in {event["error"] for event in failed}, claim.sentence
