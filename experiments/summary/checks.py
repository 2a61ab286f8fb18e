"""The checks, one row each: a check's name, what it looks for, how its findings read, and whether a finding
is an anomaly or a protection doing its job. Every module that names a check takes it from here; the Spark
side of each check (its queries) is its row in `experiments.summary.check_queries.CHECKS`.

No Spark here: the report reads these rows without starting a JVM.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    name: str
    question: str                   # what it looks for and what its count counts (a report's row header)
    phrase: str                     # how a sentence names what it found ("double ownership on all three")
    found: str = "{detail}"         # a found count's meaning: {count}, {detail} and {s} (plural) filled in
    clean: str | None = None        # the meaning when nothing was found (None: the checker's own detail)
    protection: bool = False        # a finding is a safeguard doing its job, not an anomaly
    cross_check: bool = False       # it checks the lab's measurement, not the system: a finding is two counts
                                    # that differ, its detail opening with them before "; "
    campaign_metric: str | None = None   # its count among a campaign's per-run metrics (None: not one)


CONDITIONS = CheckSpec(
    name="conditions", phrase="run conditions the machine did not carry",
    question="whether the machine carried the run: the producer's schedule, the members where nothing changed, "
             "CPU pressure and steal, join waves on time (ok, suspect or invalid; experiments.run.conditions)",
    clean="the machine carried the run")
WARMUP = CheckSpec(
    name="warm-up", phrase="warm-ups that ended without a stable group",
    question="the timeline started before the group owned every partition exactly once (count: warm-ups)",
    found="the warm-up timed out ({detail}): every later measure includes a group still forming",
    clean="the group owned every partition exactly once before the timeline started")
DOUBLE_OWNERSHIP = CheckSpec(
    name="double-ownership", phrase="double ownership",
    question="two or more members owning one partition at once (count: windows)",
    found="{detail}, in which two or more members owned the same partition")
CONSUMED_WITHOUT_OWNERSHIP = CheckSpec(
    name="consumed-without-ownership", phrase="records processed by a member that did not own them alone",
    question="records processed by a member that was not the partition's sole owner (count: spans)")
LOST_RECORDS = CheckSpec(
    name="lost-records", phrase="records skipped",
    question="records skipped: produced and never processed while later records of their partition were "
             "(records still in the log when the run ended, never reached, are counted apart in its detail)")
DUPLICATES = CheckSpec(
    name="duplicates", phrase="duplicates", question="records processed more than once",
    found="{count} record{s} processed more than once ({detail})", campaign_metric="duplicates")
OFFSET_REGRESSIONS = CheckSpec(
    name="offset-regressions", phrase="offset regressions",
    question="a commit that moved a partition's stored offset below the one committed just before it (count: "
             "backward moves; a re-commit of the value already moved back to is named, not counted)",
    campaign_metric="offset regressions")
SLOW_RECORDS = CheckSpec(
    name="slow-records", phrase="records later than the latency limit",
    question="records processed later than the latency limit after they were produced")
CONVERGENCE = CheckSpec(
    name="convergence", phrase="partitions not converged within the bound",
    question="every partition with exactly one owner, within the bound after the last fault")
FENCED_COMMITS = CheckSpec(
    name="fenced-commits", phrase="stale commits refused by the coordinator",
    question="a stale member's commit refused by the coordinator: a protection, not an anomaly",
    found="{count} commit{s} of a stale member refused by the coordinator ({detail})",
    clean="no stale commit was refused (none was made, or nothing could refuse it)",
    protection=True, campaign_metric="fenced commits")
SERVER_WITNESS = CheckSpec(
    name="server-witness", phrase="server and member request counts apart",
    question="a cross-check of the measurement, not of the system: the servers' own request counts against the "
             "members' logged ones, which the figures use (count: windows that disagree)",
    cross_check=True)
SERVER_STALL = CheckSpec(
    name="server-stall", phrase="brokers answering nothing for over 2 s while requests were held up",
    question="a broker answering no request for more than 2 s while requests were held up (count: windows)")

SPECS: tuple[CheckSpec, ...] = (CONDITIONS, WARMUP, DOUBLE_OWNERSHIP, CONSUMED_WITHOUT_OWNERSHIP, LOST_RECORDS, DUPLICATES,
                                OFFSET_REGRESSIONS, SLOW_RECORDS, CONVERGENCE, FENCED_COMMITS, SERVER_WITNESS,
                                SERVER_STALL)
BY_NAME: dict[str, CheckSpec] = {spec.name: spec for spec in SPECS}


def spec(name: str) -> CheckSpec | None:
    """The row of the check called `name`; None for a name no row has (a log from a later version)."""
    return BY_NAME.get(name)
