"""Jepsen-style checks over runs' events, as PySpark DataFrame queries grouped by run.

Every check answers one question about a whole run and returns, per run, a `CheckResult`: a
verdict (true: nothing found, false: found, unknown: the log cannot tell) and evidence rows
saying where and when. `CHECKS` lists them once: name, the event types a run needs for the
check to tell anything, and the function. The inputs (`CheckInputs`) are the frames
`experiments.summary` derives from the events, each with a `run` column (times `t` in seconds
since the run's first event):

- `segments`: per partition, the spans between ownership changes with the set of owners
  (tp, start, end, owners);
- `never` processed records (with `unseen` ones flagged), `repeats` (offset ranges consumed
  again) and `deliveries` (one row per processed record with its latency: from its produce time to the end
  of its handling where the run reports it, `records_processed`, else to its delivery by poll()), all
  derived from offset ranges;
- `commits` (one row per partition per offsets_committed) and the `control` events.

A check is planned, then read: it adds its queries to a `Batch` (experiments.summary.spark_batch) and returns a
function that builds its results once the batch is collected. The batch runs the queries of every
check while later ones are still being planned, and their number does not depend on the number of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from experiments.scenario.labels import fault_label
from experiments.scenario.model import LATENCY_LIMIT_MS
from experiments.summary import checks
from experiments.summary.spark_batch import Batch
from experiments.summary.witness_counts import witness_windows
from rebalance import events as ev

Counts = Mapping[str, int]   # events per type in a run

# Commit errors that mean "you are not (or no longer) a member of this generation".
# Refusals of a commit from a member the group has moved past: classic generations, KIP-848 member epochs.
FENCING_ERRORS = ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "STALE_MEMBER_EPOCH",
                  "FENCED_MEMBER_EPOCH")


class Verdict(StrEnum):
    TRUE = "true"        # checked, nothing found
    FALSE = "false"      # the anomaly happened: see the evidence
    UNKNOWN = "unknown"  # the log lacks what the check needs


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    latency_limit_ms: int = LATENCY_LIMIT_MS   # seed 002 counts a record slower than this as lost; here: over the limit
    convergence_bound_s: float | None = None  # default: 2 x session timeout + 5 s (Kafka's system tests)
    overlap_tolerance_s: float = 0.0       # double ownership shorter than this is ignored
    evidence_rows: int = 1000              # evidence kept per check (the count is always exact)
    # Server and members disagree on a window between two server samples when they differ by more
    # than the larger of these (docs/analysis.md, "The servers as witnesses").
    witness_tolerance_requests: int = 10
    witness_tolerance_fraction: float = 0.25
    stall_threshold_s: float = 2.0         # a broker answering nothing this long, requests held up: a stall

    def convergence_bound_for(self, session_timeout_ms: int) -> float:
        """How long after the last fault or join every partition must have one owner: the configured bound,
        else twice the session timeout and 5 s (Kafka's system tests allow as much for a group to settle)."""
        if self.convergence_bound_s is not None:
            return float(self.convergence_bound_s)
        return 2 * session_timeout_ms / 1000 + 5


@dataclass(frozen=True)
class CheckResult:
    check: str
    verdict: Verdict
    count: int                             # how many anomalies (windows, records, commits...)
    detail: str
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False)


@dataclass(frozen=True, kw_only=True)
class CheckInputs:
    """What the checks read, for every run of one pass. `context` has one row per run: partitions,
    since_t and bound_s (the convergence window), run_end."""

    runs: list[int]
    counts: Mapping[int, Counts]
    control: DataFrame
    commits: DataFrame
    consumed: DataFrame
    handled: DataFrame              # batches at the end of their handling (offset_ranges.handled_batches)
    segments: DataFrame
    never: DataFrame
    repeats: DataFrame
    deliveries: DataFrame
    context: DataFrame


Results = dict[int, CheckResult]
Reader = Callable[[], Results]   # a planned check's results, once its batch is collected


def _found(name: str, count: int, found: str, clean: str, evidence: pd.DataFrame) -> CheckResult:
    return CheckResult(name, Verdict.FALSE if count else Verdict.TRUE, count, found if count else clean, evidence)


def warmup(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """A warm-up that timed out (the runner's `warmup-timeout` phase, with the group's ownership when it gave
    up): the timeline then began from a group still forming, and every count after it measures that too."""
    def summary(name: str) -> Column:
        return F.get_json_object("detail", f"$.{name}").cast("long").alias(name)

    timeouts = inputs.control.filter((F.col("type") == ev.PHASE) & (F.col("name") == ev.WARMUP_TIMEOUT)).select(
        "run", "t", summary("members_up"), summary("owned"), summary("partitions"), summary("double_owned"))
    evidence = batch.first_rows(timeouts, ["t"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            rows = evidence.value[run]
            detail = "; ".join(f"at {row.t:.1f} s, {row.members_up} members up, {row.owned} of {row.partitions} "
                               f"partitions owned, {row.double_owned} owned twice" for row in rows.itertuples())
            results[run] = _found(checks.WARMUP.name, len(rows), detail, "the group was stable first", rows)
        return results

    return read


def double_ownership(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Exclusive ownership, checked continuously: spans where two or more members owned one partition."""
    windows = (
        inputs.segments.filter((F.size("owners") >= 2) & (F.col("end") - F.col("start") > config.overlap_tolerance_s))
        .select("run", "tp", "start", "end", (F.col("end") - F.col("start")).alias("duration_s"), "owners")
    )
    stats = batch.values(windows.groupBy("run").agg(F.count("*").alias("n"), F.sum("duration_s").alias("s")))
    evidence = batch.first_rows(windows, ["start", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            count, seconds = stats.value.get(run, {}).get("n", 0), stats.value.get(run, {}).get("s") or 0.0
            results[run] = _found(checks.DOUBLE_OWNERSHIP.name, count, f"{count} windows, {seconds:.2f} s in total",
                                  "every partition had at most one owner", evidence.value[run])
        return results

    return read


def consumption_outside_ownership(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Ownership evidenced by consumption: records a member processed while it was not the sole owner.

    Each batch looks up the owners of its partition at the time its handling ended (the last ownership change
    at or before it, per partition): a batch 0.8's application was still handling when the watcher thread
    released the partition counts, though poll() delivered it in time."""
    marks = inputs.segments.select("run", "tp", F.col("start").alias("t"), F.lit(0).alias("kind"), "owners",
                                   F.lit(None).cast("string").alias("member"), F.lit(None).cast("long").alias("count"))
    batches = inputs.handled.select("run", "tp", "t", F.lit(1).alias("kind"),
                                     F.lit(None).cast("array<string>").alias("owners"), "member", "count")
    timeline = Window.partitionBy("run", "tp").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, 0)
    looked_up = (
        marks.unionByName(batches)
        .withColumn("owners_then", F.last("owners", ignorenulls=True).over(timeline))
        .filter(F.col("kind") == 1)
        .withColumn("owners_then", F.coalesce("owners_then", F.array().cast("array<string>")))
    )
    outside = looked_up.filter(~((F.size("owners_then") == 1) & (F.element_at("owners_then", 1) == F.col("member"))))
    grouped = outside.groupBy("run", "member", "tp", "owners_then").agg(
        F.min("t").alias("first_t"), F.max("t").alias("last_t"),
        F.count("*").alias("batches"), F.sum("count").alias("records"),
    )
    stats = batch.values(grouped.groupBy("run").agg(F.count("*").alias("n"), F.sum("records").alias("records")))
    evidence = batch.first_rows(grouped, ["first_t", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            count, records = stats.value.get(run, {}).get("n", 0), stats.value.get(run, {}).get("records")
            results[run] = _found(checks.CONSUMED_WITHOUT_OWNERSHIP.name, count, f"{records} records in {count} spans "
                                  "processed by a member that was not the sole owner",
                                  "every batch was processed by its partition's sole owner", evidence.value[run])
        return results

    return read


def lost_records(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Produced and never processed, while later records of the same partition were: skipped, lost for good.
    Records still in the log after everything processed on their partition when the run ended were not reached
    (a group that never settled, a backlog at the teardown) and are counted apart; those produced in the run's
    last `latency limit` seconds of consumption are only 'unseen': the run may have ended first."""
    lost = inputs.never.filter(~F.col("unseen") & F.col("skipped")).drop("unseen")
    stats = batch.values(inputs.never.groupBy("run").agg(
        F.sum((~F.col("unseen") & F.col("skipped")).cast("int")).alias("lost"),
        F.sum((~F.col("unseen") & ~F.col("skipped")).cast("int")).alias("not_reached"),
        F.sum(F.col("unseen").cast("int")).alias("unseen")))
    evidence = batch.first_rows(lost, ["t_produce", "tp", "offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            row = stats.value.get(run, {})
            count, not_reached, unseen = (row.get(key) or 0 for key in ("lost", "not_reached", "unseen"))
            apart = "; ".join(part for part in (
                f"{not_reached} still in the log when the run ended, after the last record processed on their "
                "partition: not reached, not skipped" if not_reached else "",
                f"{unseen} produced at the very end not seen: unseen, not lost" if unseen else "") if part)
            clean = "no record was skipped" + (f" ({apart})" if apart else "; every produced record was processed")
            found = f"{count} records skipped: produced and never processed while later records of their partition " \
                    f"were" + (f" ({apart})" if apart else "")
            results[run] = _found(checks.LOST_RECORDS.name, count, found, clean, evidence.value[run])
        return results

    return read


def duplicates(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """The same (partition, offset) processed more than once, by one member or by several.
    `repeats` holds offset ranges a batch consumed that earlier batches had consumed already;
    the count is of extra deliveries."""
    by_whom = batch.tables(inputs.repeats.groupBy("run", "by").agg(F.sum("records").alias("n")), ["by"])
    evidence = batch.first_rows(inputs.repeats, ["t", "tp", "from_offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            by = by_whom.value[run]
            count = int(by["n"].sum())
            results[run] = _found(checks.DUPLICATES.name, count, ", ".join(f"{n} by {who}" for who, n in zip(by["by"], by["n"], strict=True)),
                                  "every record was processed once", evidence.value[run])
        return results

    return read


def offset_regressions(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Per partition, a successful commit below the offset stored just before it (the partition's previous
    commit): the stored offset moved back (a zombie's late commit, a stale commit applied after a later one).
    Told apart: a commit of exactly the stored value when an earlier commit was higher, a member committing
    again where the coordinator had already been moved back to; it moves nothing and is not counted, only
    named. A commit above the stored value is a move forward, even below an earlier high."""
    in_order = Window.partitionBy("run", "tp").orderBy("t", "seq")
    earlier = in_order.rowsBetween(Window.unboundedPreceding, -1)
    commits = (inputs.commits.withColumn("stored_before", F.lag("offset").over(in_order))
               .withColumn("highest_before", F.max("offset").over(earlier)))
    moved_back = F.col("offset") < F.col("stored_before")
    re_commit = (F.col("offset") == F.col("stored_before")) & (F.col("offset") < F.col("highest_before"))
    below = (commits.filter(moved_back | re_commit)
             .withColumn("kind", F.when(moved_back, F.lit(_MOVED_BACK)).otherwise(F.lit(_RE_COMMIT)))
             .select("run", "tp", "t", "member", "offset", "stored_before", "highest_before", "kind"))
    counts = batch.values(below.groupBy("run").agg(
        F.sum(F.when(F.col("kind") == _MOVED_BACK, 1).otherwise(0)).alias("moved_back"),
        F.sum(F.when(F.col("kind") == _RE_COMMIT, 1).otherwise(0)).alias("re_commits")))
    evidence = batch.first_rows(below, ["t", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            found = counts.value.get(run, {})
            back, again = int(found.get("moved_back", 0)), int(found.get("re_commits", 0))
            detail = f"{back} commit{_s(back)} moved a partition's stored offset back"
            if again:
                detail += (f"; {again} commit{_s(again)} re-committed the value the coordinator had already "
                           "been moved back to")
            clean = detail if again else "committed offsets never went back"
            results[run] = _found(checks.OFFSET_REGRESSIONS.name, back, detail, clean, evidence.value[run])
        return results

    return read


_MOVED_BACK, _RE_COMMIT = "moved back", "re-commit"   # the kinds of offset_regressions' evidence rows


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def slow_records(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Processed later than the latency limit after being produced (seed 002 counts these as lost)."""
    limit = config.latency_limit_ms
    timed = inputs.deliveries.filter(F.col("latency_ms").isNotNull())
    stats = batch.values(timed.groupBy("run").agg(
        F.count("*").alias("timed"), F.sum((F.col("latency_ms") > limit).cast("int")).alias("n"),
        F.max("latency_ms").alias("worst")))
    slow = timed.filter(F.col("latency_ms") > limit).select("run", "tp", "offset", "t", "latency_ms", "member")
    evidence = batch.first_rows(slow, ["t", "tp", "offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            row = stats.value.get(run)
            if not row or not row["timed"]:
                results[run] = CheckResult(checks.SLOW_RECORDS.name, Verdict.UNKNOWN, 0,
                                           "no produce timestamps on consumed records")
                continue
            results[run] = _found(checks.SLOW_RECORDS.name, row["n"],
                                  f"{row['n']} records over {limit} ms (worst {row['worst']:.0f} ms)",
                                  f"every record within {limit} ms", evidence.value[run])
        return results

    return read


def awaited_from(since_t: float, last_fault: Mapping | None, heal_t: float | None) -> str:
    """What `since_t` is, in words: the run's last fault event (a fault applied or ended; a leave counts,
    as it is written as one) or, in a run without fault events, the last member's start. Faults still in
    force when the timeline ends are all ended by the runner's final heal, which is then that event."""
    if not last_fault:
        return f"the last member started, at t={since_t:.2f} s (no faults)"
    if last_fault.get("type") == ev.FAULT_STOPPED and heal_t is not None and since_t >= heal_t:
        return f"the final heal at t={since_t:.2f} s, which ends every fault still in force"
    label = fault_label(last_fault.get("kind"), last_fault.get("target"), last_fault.get("link"))
    what = "ended" if last_fault.get("type") == ev.FAULT_STOPPED else "began"
    return f"the last fault event at t={since_t:.2f} s ({label} {what})"


def bound_source(config: CheckConfig) -> str:
    """Where the allowed time comes from."""
    return "2 x session timeout + 5 s" if config.convergence_bound_s is None else "--convergence-bound-s"


def convergence_detail(verdict: Verdict, *, partitions: int, since: str, bound_s: float, source: str,
                       after_s: float = 0.0, short_s: float = 0.0, count: int = 0) -> str:
    """The convergence verdict in words: how long after `since` every partition had exactly one owner, and
    the time allowed (`bound_s`, from `source`)."""
    allowed = f"allowed: {bound_s:.0f} s, {source}"
    if verdict is Verdict.TRUE:
        return f"all {partitions} partitions had exactly one owner {after_s:.1f} s after {since} ({allowed})"
    if verdict is Verdict.UNKNOWN:
        return (f"not every partition had exactly one owner when the log ends, {short_s:.1f} s before the "
                f"{bound_s:.0f} s allowed after {since} ran out ({source})")
    return (f"{count} of {partitions} partitions without exactly one owner {bound_s:.0f} s after {since}, and no "
            f"moment in between when all had one ({allowed})")


def convergence(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Every partition owned by exactly one member at some moment within `bound_s` after `since_t`: the
    run's last fault event (its start or its end; the final heal ends every fault still in force), or the
    last member's start in a run without faults. Kafka's system tests ask this after killing an owner."""
    name = checks.CONVERGENCE.name
    context = F.broadcast(inputs.context.select(
        "run", "partitions", "since_t", "bound_s", "run_end", (F.col("since_t") + F.col("bound_s")).alias("deadline")))
    per_tp = Window.partitionBy("run", "tp").orderBy("start")
    changes = (
        inputs.segments.withColumn("good", (F.size("owners") == 1).cast("int"))
        .withColumn("delta", F.col("good") - F.lag("good", 1, 0).over(per_tp))
        .groupBy("run", "start").agg(F.sum("delta").alias("delta"))
    )
    in_time = Window.partitionBy("run").orderBy("start")
    good = (
        changes.withColumn("good_partitions", F.sum("delta").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .join(context, "run")
        .withColumn("until", F.coalesce(F.lead("start").over(in_time), "run_end"))
    )
    first = batch.values(good.filter(
        (F.col("good_partitions") == F.col("partitions")) & (F.col("until") > F.col("since_t"))
        & (F.col("start") <= F.col("deadline"))).groupBy("run").agg(F.min("start").alias("first")))
    probe = F.least("deadline", "run_end")
    owners = inputs.segments.join(context, "run").filter((F.col("start") <= probe) & (F.col("end") > probe)).select(
        "run", "tp", probe.alias("t"), "owners").filter(F.size("owners") != 1)
    counts = batch.values(owners.groupBy("run").count())
    evidence = batch.first_rows(owners, ["tp"], config.evidence_rows)
    window = batch.values(inputs.context)
    order = F.struct("t", "seq")
    faults = inputs.control.filter(F.col("type").isin(ev.FAULT_STARTED, ev.FAULT_STOPPED))
    last_fault = batch.values(faults.groupBy("run").agg(
        *(F.max_by(column, order).alias(column) for column in ("type", "kind", "target", "link"))))
    heal = batch.values(inputs.control.filter((F.col("type") == ev.PHASE) & (F.col("name") == str(ev.RunnerPhase.HEAL)))
                        .groupBy("run").agg(F.min("t").alias("t")))
    source = bound_source(config)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            partitions, since_t, bound_s, run_end = (
                window.value[run][key] for key in ("partitions", "since_t", "bound_s", "run_end"))
            since = awaited_from(since_t, last_fault.value.get(run), heal.value.get(run, {}).get("t"))
            words = {"partitions": partitions, "since": since, "bound_s": bound_s, "source": source}
            if partitions == 0:
                results[run] = CheckResult(name, Verdict.UNKNOWN, 0, "no partitions or no ownership events")
            elif first.value.get(run, {}).get("first") is not None:
                after = max(first.value[run]["first"] - since_t, 0.0)
                results[run] = CheckResult(name, Verdict.TRUE, 0, convergence_detail(Verdict.TRUE, after_s=after,
                                                                                     **words))
            elif run_end < since_t + bound_s:
                results[run] = CheckResult(name, Verdict.UNKNOWN, 0, convergence_detail(
                    Verdict.UNKNOWN, short_s=since_t + bound_s - run_end, **words), evidence.value[run])
            else:
                count = counts.value.get(run, {}).get("count", 0)
                results[run] = CheckResult(name, Verdict.FALSE, count, convergence_detail(
                    Verdict.FALSE, count=count, **words), evidence.value[run])
        return results

    return read


def fenced_commits(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Commits the coordinator refused because the member's generation or id was stale.
    Found means fencing happened: a zombie was stopped from moving offsets back."""
    fenced = inputs.control.filter((F.col("type") == ev.COMMIT_FAILED) & F.col("error").isin(*FENCING_ERRORS)).select(
        "run", "t", "member", "error", F.to_json("offsets").alias("offsets"))
    by_error = batch.tables(fenced.groupBy("run", "error").count(), ["error"])
    evidence = batch.first_rows(fenced, ["t"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            errors = by_error.value[run]
            count = int(errors["count"].sum())
            detail = ", ".join(f"{n} {error}" for error, n in zip(errors["error"], errors["count"], strict=True))
            results[run] = _found(checks.FENCED_COMMITS.name, count, detail, "no commit was fenced", evidence.value[run])
        return results

    return read


def server_witness(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """The servers' own count of requests (ZooKeeper's packets, the brokers' group-API counts) against the
    members' logged requests, window by window between the runner's server samples."""
    windows = witness_windows(inputs.control).withColumn("difference", F.col("server") - F.col("client"))
    allowed = F.greatest(F.lit(float(config.witness_tolerance_requests)),
                         F.lit(config.witness_tolerance_fraction) * F.greatest("server", "client"))
    flagged = windows.filter(F.abs("difference") > allowed).select(
        "run", "start", "end", "from_moment", "to_moment", "server", "client", "difference", "baseline_per_s")
    stats = batch.values(windows.groupBy("run").agg(
        F.count("*").alias("windows"), F.sum("server").alias("server"), F.sum("client").alias("client"),
        F.sum("served_delta").alias("served"), F.sum((F.abs("difference") > allowed).cast("int")).alias("n")))
    evidence = batch.first_rows(flagged, ["start"], config.evidence_rows)

    def read() -> Results:
        return {run: witness_result(stats.value.get(run), config, evidence.value[run]) for run in inputs.runs}

    return read


def witness_tolerance(config: CheckConfig) -> str:
    """The rule a window is held to, in words."""
    return (f"a window may differ by {config.witness_tolerance_requests} requests or "
            f"{config.witness_tolerance_fraction:.0%} of the larger count, whichever is more")


def witness_result(row: Mapping | None, config: CheckConfig, evidence: pd.DataFrame | None = None) -> CheckResult:
    """The server witness's verdict from one run's totals over its windows: `windows`, `server` (the servers'
    count less the background), `client` (the members' logged requests), `served` (the servers' raw count)
    and `n` (windows beyond the tolerance). Servers that counted nothing at all saw nothing: unknown, even
    when every window is within the tolerance (a few member requests are)."""
    name = checks.SERVER_WITNESS.name
    evidence = pd.DataFrame() if evidence is None else evidence
    if not row or not row["windows"]:
        return CheckResult(name, Verdict.UNKNOWN, 0, "no two comparable server samples")
    windows, client = row["windows"], int(row["client"] or 0)
    if not row["served"]:
        seen = f"while the members logged {client}" if client else "and neither did the members"
        return CheckResult(name, Verdict.UNKNOWN, 0, f"the servers counted no request in {windows} windows "
                           f"{seen}: the witness saw nothing to compare")
    totals = f"servers {row['server']:.0f}, members {client} requests in total"
    rule = witness_tolerance(config)
    if row["n"]:   # the lab's two measures of one thing disagree: said as counts (checks.SERVER_WITNESS.cross_check)
        return CheckResult(name, Verdict.FALSE, row["n"], f"members {client:,}, servers {row['server']:,.0f}; "
                           f"{row['n']} of {windows} windows differ by more than the tolerance ({rule}); the figures "
                           "use the members' counts (the servers' are the herd table's server_requests)", evidence)
    return CheckResult(name, Verdict.TRUE, 0, f"servers and members agree within the tolerance in all {windows} "
                       f"windows ({rule}); {totals}", evidence)


def server_stall(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Windows of more than `stall_threshold_s` in which a broker answered no request while requests were held
    up, as each broker's own sampler wrote them (`broker_liveness`: `stalled` when a window reaches its
    threshold, `resumed` when it ends; broker.liveness). A `stalled` without its `resumed` (the log ended, or
    the broker died, inside the stall) lasts until that broker process's last event."""
    liveness = inputs.control.filter(F.col("type") == ev.BROKER_LIVENESS).withColumn(
        "last_t", F.max("t").over(Window.partitionBy("run", "process")))
    marks = liveness.filter(F.col("state").isin("stalled", "resumed")).withColumn(
        "start", F.col("t") - (F.col("ts_ns") - F.col("start_ns")) / 1e9)
    ended = marks.filter(F.col("state") == "resumed")
    still_open = marks.filter(F.col("state") == "stalled").join(
        ended.select("run", "process", "start_ns"), ["run", "process", "start_ns"], "left_anti")
    windows = ended.withColumn("length_s", F.col("stalled_ms") / 1000).withColumn("ended", F.lit(True)).unionByName(
        still_open.withColumn("length_s", F.greatest(F.col("stalled_ms") / 1000, F.col("last_t") - F.col("start")))
        .withColumn("ended", F.lit(False)))
    stalls = windows.filter(F.col("length_s") > config.stall_threshold_s).select(
        "run", F.col("node").alias("broker"), "process", "start", "length_s", "ended", "outstanding",
        (F.col("loop_lag_ms") / 1000).alias("loop_lag_s"), (F.col("sampler_gap_ms") / 1000).alias("sampler_gap_s"),
        (F.col("gc_ms") / 1000).alias("gc_s"), (F.col("loop_cpu_ms") / 1000).alias("loop_cpu_s"),
        (F.col("loop_waited_ms") / 1000).alias("loop_waited_s"),
        F.array_join(F.slice(F.split(F.coalesce("stack", F.lit("")), "\n"), 1, 5), " <- ").alias("top_frames"))
    stats = batch.values(stalls.groupBy("run").agg(
        F.count("*").alias("n"), F.max_by(F.struct("broker", "start", "length_s", "loop_lag_s", "loop_waited_s", "top_frames"),
                                          "length_s").alias("longest")))
    lag = batch.values(liveness.groupBy("run").agg(F.max("loop_lag_ms").alias("lag_ms"),
                                                   F.countDistinct("process").alias("brokers")))
    evidence = batch.first_rows(stalls, ["start", "broker"], config.evidence_rows)

    def read() -> Results:
        return {run: stall_result(stats.value.get(run), lag.value.get(run), config, evidence.value[run])
                for run in inputs.runs}

    return read


def _waited(longest: Mapping) -> str:
    """How long the stalled loop waited for a CPU, where the broker recorded it (a window that ended)."""
    waited = longest["loop_waited_s"] if "loop_waited_s" in longest else None
    return "" if waited is None else f", {waited:.1f} s of it waiting for a CPU"


def stall_result(row: Mapping | None, lag: Mapping | None, config: CheckConfig,
                 evidence: pd.DataFrame | None = None) -> CheckResult:
    """The server-stall verdict of one run: `row` has `n` (stall windows) and the `longest` of them; `lag`
    the longest loop lag any broker sampled and how many broker processes sampled."""
    name, limit = checks.SERVER_STALL.name, config.stall_threshold_s
    evidence = pd.DataFrame() if evidence is None else evidence
    count = int(row["n"]) if row else 0
    if count:
        longest = row["longest"]
        frame = (longest["top_frames"] or "").split(" <- ")[0] or "no stack"
        return CheckResult(name, Verdict.FALSE, count, f"{count} window{'s' if count > 1 else ''} of more than "
                           f"{limit:g} s in which a broker answered no request while requests were held up; the "
                           f"longest {longest['length_s']:.1f} s (broker {longest['broker']} at t={longest['start']:.1f} s, "
                           f"loop lag {longest['loop_lag_s'] or 0:.1f} s{_waited(longest)}, in {frame})", evidence)
    worst = (lag or {}).get("lag_ms") or 0.0
    processes = (lag or {}).get("brokers") or 0
    return CheckResult(name, Verdict.TRUE, 0, f"no broker went more than {limit:g} s without answering while "
                       f"requests were held up ({processes} broker process{'es' if processes != 1 else ''} "
                       f"sampled; longest event-loop lag {worst / 1000:.2f} s)", evidence)


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check's Spark side: its row of `experiments.summary.checks` (name, question, words) and its queries.
    A run without any of the event types it `needs` gets `unknown` with `missing` as detail."""

    spec: checks.CheckSpec
    needs: tuple[str, ...]
    missing: str
    plan: Callable[[CheckInputs, CheckConfig, Batch], Reader]

    @property
    def name(self) -> str:
        return self.spec.name


_OWNERSHIP = (ev.PARTITIONS_ASSIGNED, ev.REBALANCE_COMPLETED)
CHECKS: tuple[Check, ...] = (
    Check(spec=checks.WARMUP, needs=(ev.PHASE,), missing="no phase events (the runner did not mark its phases)",
          plan=warmup),
    Check(spec=checks.DOUBLE_OWNERSHIP, needs=_OWNERSHIP, missing="no ownership events", plan=double_ownership),
    Check(spec=checks.CONSUMED_WITHOUT_OWNERSHIP, needs=(ev.RECORDS_CONSUMED,), missing="no records consumed",
          plan=consumption_outside_ownership),
    Check(spec=checks.LOST_RECORDS, needs=(ev.RECORD_PRODUCED, ev.RECORDS_PRODUCED),
          missing="no records_produced (or record_produced) events", plan=lost_records),
    Check(spec=checks.DUPLICATES, needs=(ev.RECORDS_CONSUMED,), missing="no records consumed", plan=duplicates),
    Check(spec=checks.OFFSET_REGRESSIONS, needs=(ev.OFFSETS_COMMITTED,), missing="no offsets_committed events",
          plan=offset_regressions),
    Check(spec=checks.SLOW_RECORDS, needs=(), missing="", plan=slow_records),
    Check(spec=checks.CONVERGENCE, needs=_OWNERSHIP, missing="no partitions or no ownership events", plan=convergence),
    Check(spec=checks.FENCED_COMMITS, needs=(), missing="", plan=fenced_commits),
    Check(spec=checks.SERVER_WITNESS, needs=(ev.SERVER_COUNTERS,), missing="no server samples (the servers' counters "
          "were not recorded)", plan=server_witness),
    Check(spec=checks.SERVER_STALL, needs=(ev.BROKER_LIVENESS,), missing="no broker liveness events (the brokers did not "
          "sample their own liveness: a log from before they did)", plan=server_stall),
)


def plan_checks(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Callable[[], dict[int, list[CheckResult]]]:
    """Every check of `CHECKS` over every run, planned into `batch`; the returned function gives each
    run's results in registry order once the batch is collected."""
    readers = [(check, check.plan(inputs, config, batch)) for check in CHECKS]

    def read() -> dict[int, list[CheckResult]]:
        results: dict[int, list[CheckResult]] = {run: [] for run in inputs.runs}
        for check, reader in readers:
            found = reader()
            for run in inputs.runs:
                counts = inputs.counts[run]
                if check.needs and not any(counts.get(kind) for kind in check.needs):
                    results[run].append(CheckResult(check.name, Verdict.UNKNOWN, 0, check.missing))
                else:
                    results[run].append(found[run])
        return results

    return read
