"""The ledger of looks: every test ever run on a declared claim, kept in the repository
(docs/results-data/looks.csv) and shown on the results page beside each claim.

A look is one claim tested on one set of runs. Each row records the claim (as the campaign file declaring it
words it now; `said` keeps the words of the time when they differed), the campaign file that declares it now
and the campaign that ran (`ran`), the data (a data folder, `FOLDER at COMMIT` for one that has since left
the tree, or the run folder when the runs never entered the repository), the commit whose code made the runs
(`code`), the date and the commit that published the verdict (`published`; blank for the commit that adds
the row), the runs a side (`n`), the test, its p, the family it was counted in (`k`) and the verdict.

The rule the page states (`RULE`): a look at a claim on code no earlier look ran re-declares the claim, as a
new hypothesis about a changed system; its earlier looks, on other code, stay beside it on the page and in
their own family at the time, and do not count in this page's k. Looks at a claim on the same code as this
page's are the same hypothesis looked at again: every one of them counts in k. The same runs tested again by
a corrected test are the same look (one p counts: the current test's); the ledger keeps both rows.

`./lab looks DATA... --looks docs/results-data/looks.csv` adds the page's current looks the ledger lacks
(`results_doc.append_looks`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LOOKS_CSV = "docs/results-data/looks.csv"
COLUMNS = ["claim", "campaign", "ran", "said", "data", "code", "date", "published", "n", "test", "p", "k", "verdict"]
DECISIONS = ("supported", "not supported")

RULE = ("Every look at a claim is on the record: `{ledger}` holds every test run on a declared claim since "
        "{first} ({rows} rows), and each claim's looks are listed below the power. A look is one claim tested "
        "on one set of runs; the same runs tested again by a corrected test are one look. The rule: a look on "
        "code no earlier look at the claim ran re-declares the claim, a new hypothesis about a changed system; "
        "its earlier looks, on other code, stay on the record beside it and in their own family at the time, "
        "not in this one. Looks at a claim on the code of this page's runs are one hypothesis looked at again, "
        "and every one of them counts here ({same} now). So the family is this page's {declared} declared "
        "claims and those {same} looks, k = {k}, and the 5% is over them, not over every look ever taken; a "
        "claim supported now whose earlier looks were not says so beside its verdict.")


@dataclass(frozen=True)
class Look:
    claim: str
    campaign: str
    ran: str
    said: str
    data: str
    code: str
    date: str
    published: str
    n: str
    test: str
    p: float            # nan when no test was made
    k: int | None
    verdict: str

    @property
    def runs(self) -> tuple[str, str, str]:
        """What makes it one look: the claim, the campaign that ran and its data."""
        return (self.campaign, self.claim, self.data)


def parse_looks(text: str) -> list[Look]:
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        rows.append(Look(**{**row, "p": float(row["p"]) if row["p"] else math.nan,
                            "k": int(row["k"]) if row["k"] else None}))
    return rows


def read_looks(path: Path | None) -> list[Look]:
    return parse_looks(path.read_text()) if path is not None and path.is_file() else []


def looks_csv(looks: Sequence[Look]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for look in looks:
        writer.writerow([_cell(getattr(look, column)) for column in COLUMNS])
    return buffer.getvalue()


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Current:
    """A claim of the page and where its current look's runs are: its campaign, words, data folder and the
    commit the data folder names."""
    campaign: str
    claim: str
    data: str
    commit: str


def current_code(current: Current, ledger: Sequence[Look]) -> str:
    """The code of a current look's runs as the ledger records it (a row for the same claim and data), else
    the data folder's commit."""
    for look in ledger:
        if look.runs == (current.campaign, current.claim, current.data) and look.code:
            return look.code
    return current.commit[:7]


def same_code_looks(currents: Sequence[Current], ledger: Sequence[Look]) -> list[Look]:
    """The earlier looks that count in the page's k: a decision on one of the page's claims, on the code of
    that claim's current runs, from other runs (one row per look)."""
    found: dict[tuple[str, str, str], Look] = {}
    for current in currents:
        code = current_code(current, ledger)
        for look in ledger:
            if ((look.campaign, look.claim) == (current.campaign, current.claim) and look.code == code
                    and look.data != current.data and look.verdict in DECISIONS):
                found.setdefault(look.runs, look)
    return list(found.values())


def earlier_looks(current: Current, ledger: Sequence[Look], test: str) -> list[Look]:
    """The ledger's looks at a claim other than its current look by the current test, in the ledger's order."""
    return [look for look in ledger if (look.campaign, look.claim) == (current.campaign, current.claim)
            and not (look.data == current.data and look.test == test)]


def latest_only(earlier: Sequence[Look], current: Current) -> str:
    """The note beside a supported claim whose every earlier look, on other runs, was not supported."""
    other = [look for look in earlier if look.data != current.data and look.verdict in DECISIONS]
    if other and all(look.verdict != "supported" for look in other):
        dates = ", ".join(f"{look.date} ({look.n}, p = {_p(look.p)})" for look in other)
        return f"on its latest look only: not supported on {dates}, on earlier code"
    return ""


def new_looks(currents: Sequence[Current], ledger: Sequence[Look], results, *, test: str, date: str) -> list[Look]:
    """The rows the ledger lacks for the page's current looks (`results`: the page's ClaimResults, in the
    order of `currents`)."""
    added = []
    for current, result in zip(currents, results, strict=True):
        if any(look.runs == (current.campaign, current.claim, current.data) and look.test == test
               for look in ledger):
            continue
        added.append(Look(claim=current.claim, campaign=current.campaign, ran=current.campaign, said="",
                          data=current.data, code=current_code(current, ledger),
                          date=date, published="", n=result.n, test=test, p=result.p, k=result.k,
                          verdict=result.verdict))
    return added


def looks_markdown(currents: Sequence[Current], ledger: Sequence[Look], results, *, test: str) -> str:
    """Every look at the page's claims, the current one (this page) last, then the looks at claims no
    campaign file of this page declares."""
    lines = ["## Every look at these claims\n",
             "Each test ever run on a declared claim, from the ledger; the last row of each claim is this page's. "
             "`n` is runs a side, `k` the family the verdict was counted in, `code` the commit whose code made the "
             "runs.\n",
             "| claim | date | campaign run | data | code | n | test | p | k | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for current, result in zip(currents, results, strict=True):
        rows = earlier_looks(current, ledger, test)
        mine = Look(current.claim, current.campaign, current.campaign, "", current.data,
                    current_code(current, ledger), "this page", "", result.n, test, result.p, result.k,
                    result.verdict)
        for index, look in enumerate([*rows, mine]):
            lines.append(_row(look, current.claim if index == 0 else "〃"))
    declared = {(current.campaign, current.claim) for current in currents}
    retired = [look for look in ledger if (look.campaign, look.claim) not in declared]
    if retired:
        lines += ["", "Looks at claims this page's campaign files do not declare:", "",
                  "| claim | date | campaign run | data | code | n | test | p | k | verdict |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        previous = None
        for look in retired:
            lines.append(_row(look, f"{look.claim} ({look.campaign})" if look.claim != previous else "〃"))
            previous = look.claim
    return "\n".join(lines) + "\n"


def _row(look: Look, label: str) -> str:
    said = f" (then: \"{look.said}\")" if look.said else ""
    return (f"| {label}{said} | {look.date} | {look.ran} | {look.data} | {look.code or '-'} | {look.n} | "
            f"{look.test} | {_p(look.p)} | {look.k if look.k is not None else '-'} | {look.verdict} |")


def _p(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2g}"

