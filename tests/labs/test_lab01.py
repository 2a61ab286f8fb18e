"""Lab 1 (assignment strategies), walked: every command of its text run, every claim checked against what
the commands printed."""

from __future__ import annotations

import re

import pytest

from tests.labs.walk import Claim, Lab, Walk, rich_tables

pytestmark = [pytest.mark.labs, pytest.mark.timeout(600)]

LAB = Lab("01-assignment-strategies.md")


def test_every_command_runs_clean(walked: Walk) -> None:
    assert [outcome.block.index for outcome in walked.outcomes] == [block.index for block in walked.text.blocks]
    assert not walked.problems, "\n".join(walked.problems)


def test_claim(walked: Walk, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


def _assignment(walked: Walk, claim: Claim, title: str) -> dict[str, list[str]]:
    """The table of that title printed by the block before the claim: member -> its partitions."""
    tables = [rows for name, rows in rich_tables(walked.output(claim)) if name == title]
    assert len(tables) == 1, f"line {claim.line}: expected one table titled {title!r}, found {len(tables)}"
    return {row[0]: [] if row[1] == "-" else row[1].split() for row in tables[0]}


@LAB.check("owns")
def _owns(walked: Walk, claim: Claim) -> None:
    """Each member named owns exactly the partitions listed (comma-separated)."""
    args = dict(claim.args)
    got = _assignment(walked, claim, args.pop("table"))
    walked.note(claim, got)
    assert got == {member: parts.split(",") for member, parts in args.items()}, claim.sentence


@LAB.check("counts")
def _counts(walked: Walk, claim: Claim) -> None:
    """Each member named owns that many partitions."""
    args = dict(claim.args)
    got = _assignment(walked, claim, args.pop("table"))
    walked.note(claim, {member: len(parts) for member, parts in got.items()})
    assert {member: len(parts) for member, parts in got.items()} == {m: int(n) for m, n in args.items()}, \
        f"{claim.sentence}\nprinted: {got}"


@LAB.check("refused")
def _refused(walked: Walk, claim: Claim) -> None:
    """The block exited non-zero (its `test: exit`) and its error line says the words given."""
    output = walked.output(claim)
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    walked.note(claim, errors[:1])
    assert errors and claim.args["says"] in errors[0], f"{claim.sentence}\nprinted: {output}"


@LAB.check("moved")
def _moved(walked: Walk, claim: Claim) -> None:
    """`movement` printed 'STRATEGY: N moved' with these counts."""
    printed = {name: int(count) for name, count in
               re.findall(r"^([\w-]+): (\d+) moved", walked.output(claim), re.MULTILINE)}
    walked.note(claim, printed)
    assert printed == {name: int(count) for name, count in claim.args.items()}, claim.sentence


@LAB.check("cooperative")
def _cooperative(walked: Walk, claim: Claim) -> None:
    """Round 1 keeps the named members' first partitions and gives the newcomer nothing; round 2 adds the
    withheld ones to it; no partition changes hands between two owners within a round."""
    first = _assignment(walked, claim, "cooperative-sticky, round 1")
    second = _assignment(walked, claim, "cooperative-sticky, round 2")
    owned = {"C0": {"t0-0", "t0-1", "t0-2"}, "C1": {"t0-3", "t0-4", "t0-5"}, "C2": set()}   # the --owned
    expected = {member: parts.split(",") for member, parts in claim.args.items()}
    newcomers = [member for member in expected if not owned[member]]
    walked.note(claim, {"round 1": first, "round 2": second})
    assert second == expected, claim.sentence
    assert all(first[member] == [] for member in newcomers), f"round 1 gave a newcomer partitions: {first}"
    for member, parts in first.items():
        assert set(parts) <= owned[member], f"round 1 moved a partition to {member}: {first}"
    for member, parts in second.items():
        taken = set(parts) - set(first[member])
        assert all(not any(part in first[other] for other in first) for part in taken), \
            f"round 2 took a partition another member still had in round 1: {member} {sorted(taken)}"
