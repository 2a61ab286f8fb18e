"""A check's result in words a reader does not have to decode.

The checker answers each question with a verdict (true: nothing found, false: found, unknown) and a
count. Read without the question, `false` is ambiguous: for `double-ownership` it means the anomaly
happened, for `fenced-commits` it means the coordinator stopped a zombie, which is the protection
working. Here each result gets one of four words, the same in the terminal, Markdown and HTML:

- `ok`: checked, nothing found;
- `VIOLATED (n)`: the anomaly happened n times; the evidence says where and when;
- `protected (n)`: a protection fired n times (a stale member's commit refused);
- `unknown`: the log lacks what the check needs;
- `counts differ (members 1,251, servers 1,343)`: a cross-check of the lab's own measurement (the server
  witness) found two counts apart; not an anomaly of the system under test;

and a one-line meaning that says what the count counts. The run's `conditions` (whether the machine carried
it; experiments.run.conditions) reads `ok`, `suspect` or `INVALID`, with its reasons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from experiments.summary import checks


class Word(StrEnum):
    OK = "ok"
    VIOLATED = "VIOLATED"
    PROTECTED = "protected"
    UNKNOWN = "unknown"
    DIFFER = "counts differ"   # a cross-check of the measurement: two counts of one thing disagree
    SUSPECT = "suspect"     # the run's conditions: kept, its numbers marked
    INVALID = "INVALID"     # the run's conditions: its numbers say more about the machine than the protocol


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One check of one run, in words."""

    check: str
    word: Word
    count: int
    meaning: str
    counts: str = ""     # a cross-check's two counts, "members 1,251, servers 1,343"

    @property
    def label(self) -> str:
        """`ok`, `VIOLATED (3)`, `protected (1)`, `counts differ (members 1,251, servers 1,343)` or `unknown`."""
        if self.word in (Word.VIOLATED, Word.PROTECTED):
            return f"{self.word.value} ({self.count})"
        if self.word is Word.DIFFER:
            return f"{self.word.value} ({self.difference})"
        return self.word.value

    @property
    def difference(self) -> str:
        """How a cross-check's counts differ: in total, or only window by window when the totals agree."""
        if not self.counts:
            return f"{self.count} windows"
        totals = re.findall(r"\d+(?:,\d{3})*", self.counts)
        if len(totals) == 2 and totals[0] == totals[1]:
            return f"in {self.count} windows; totals equal: {self.counts}"
        return self.counts

    @property
    def line(self) -> str:
        """The label and its meaning on one line, for plain output."""
        return f"{self.label}: {self.meaning}" if self.meaning else self.label


def read(check: str, verdict: str, count: int, detail: str) -> Reading:
    """The reading of one check result (`verdict` is the checker's true / false / unknown)."""
    count = int(count or 0)
    detail = str(detail or "")
    if verdict in ("suspect", "invalid"):
        return Reading(check=check, word=Word(verdict.upper() if verdict == "invalid" else verdict), count=count,
                       meaning=detail)
    if verdict == "unknown":
        return Reading(check=check, word=Word.UNKNOWN, count=count, meaning=detail or "the log cannot tell")
    row = checks.spec(check)
    if verdict == "false" and row is not None and row.cross_check:
        counts, _, rest = detail.partition("; ")
        return Reading(check=check, word=Word.DIFFER, count=count, meaning=rest or detail, counts=counts)
    if verdict == "false":
        word = Word.PROTECTED if row is not None and row.protection else Word.VIOLATED
        if not count:   # found, but nothing counted: still an anomaly, say so
            return Reading(check=check, word=word, count=count, meaning=detail)
        meaning = (row.found if row else "{detail}").format(count=count, detail=detail, s="" if count == 1 else "s")
        return Reading(check=check, word=word, count=count, meaning=meaning)
    clean = row.clean if row is not None and row.clean is not None else detail
    return Reading(check=check, word=Word.OK, count=0, meaning=clean)


def read_result(result) -> Reading:
    """The reading of a `check_queries.CheckResult`."""
    return read(result.check, result.verdict.value, result.count, result.detail)


def question(check: str) -> str:
    """What `check` looks for, in a line; "" for a check no row of `checks` knows (a later version's)."""
    row = checks.spec(check)
    return row.question if row is not None else ""


def combine(readings: list[Reading]) -> Reading:
    """Several runs' readings of one check as one: VIOLATED when any run violated it (the counts of those runs
    added), else protected (likewise), else unknown when any run could not tell, else ok. The meaning lists
    the runs' own lines, for a tooltip."""
    if not readings:
        raise ValueError("combine() needs at least one reading")
    if len(readings) == 1:
        return readings[0]
    for word in (Word.INVALID, Word.VIOLATED, Word.SUSPECT, Word.PROTECTED, Word.DIFFER, Word.UNKNOWN, Word.OK):
        found = [reading for reading in readings if reading.word is word]
        if found:
            return Reading(check=readings[0].check, word=word, count=sum(reading.count for reading in found),
                           meaning="; ".join(reading.line for reading in readings))
    raise AssertionError("unreachable")


def legend() -> str:
    """One sentence that states the four words, for the head of a verdict table."""
    return ("ok: checked, nothing found; VIOLATED (n): the anomaly happened n times, evidence below; "
            "protected (n): a protection fired n times (the coordinator refused a stale member's commit); "
            "counts differ: the lab's cross-check of its own request counts found the servers' and the members' "
            "apart (the figures use the members'); unknown: the log lacks what the check needs; conditions suspect or INVALID: the machine did not "
            "carry the run, its reasons in numbers.")


# Styles per word: rich markup in the terminal, CSS classes in HTML.
RICH_STYLE = {Word.OK: "green", Word.VIOLATED: "bold red", Word.PROTECTED: "cyan", Word.UNKNOWN: "yellow",
              Word.DIFFER: "yellow",
              Word.SUSPECT: "bold yellow", Word.INVALID: "bold red"}
CSS_CLASS = {Word.OK: "good", Word.VIOLATED: "bad", Word.PROTECTED: "protected", Word.UNKNOWN: "unknown",
             Word.DIFFER: "unknown",
             Word.SUSPECT: "unknown", Word.INVALID: "bad"}


# -- the terminal --------------------------------------------------------------------------------

Column = tuple[str, list[Reading]]   # a run's title and its readings, in check order


def print_verdicts(console, title: str, columns: list[Column]) -> None:
    """Checks as rows, runs as columns on a terminal; plain lines otherwise (a pipe or a CI log), so that no
    cell is wrapped in the middle: one line per check and run, `check  run  label: meaning`."""
    if not columns:
        return
    checks = list(dict.fromkeys(reading.check for _, readings in columns for reading in readings))
    if console.is_terminal:
        console.print(_rich_table(title, checks, columns))
        return
    width = max(len(check) for check in checks)
    run_width = max(len(name) for name, _ in columns)
    lines = [title, "-" * len(title)]
    for check in checks:
        for name, readings in columns:
            reading = next((r for r in readings if r.check == check), None)
            lines.append(f"{check:<{width}}  {name:<{run_width}}  {reading.line if reading else '-'}")
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _rich_table(title: str, checks: list[str], columns: list[Column]):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, caption=legend(), caption_justify="left")
    table.add_column("check", no_wrap=True)
    for name, _ in columns:
        table.add_column(escape(name))
    for check in checks:
        cells = []
        for _, readings in columns:
            reading = next((r for r in readings if r.check == check), None)
            if reading is None:
                cells.append("-")
                continue
            style = RICH_STYLE[reading.word]
            cells.append(f"[{style}]{escape(reading.label)}[/{style}]\n[dim]{escape(reading.meaning)}[/dim]")
        table.add_row(check, *cells)
    return table
