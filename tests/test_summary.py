"""Per-phase aggregates, Kafka metric names and herd cost from the Spark summary; the summarize CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.folders.run_folder import RunFolder
from experiments.summary import markdown_table
from experiments.summary.read_back import RunData, load_run
from experiments.synthetic.anomalies import Anomaly
from experiments.synthetic.simulation import SyntheticRun, write_run
from rebalance.events import EVENT_TYPES, REQUIRED_FIELDS, read_events
from tests.fixtures.spark import SERVER_EXTRA

pytestmark = pytest.mark.timeout(900)  # the first Spark test pays for the shared runs


def test_synthetic_logs_follow_the_event_schema(tmp_path):
    run_dir = write_run(tmp_path / "run", SyntheticRun(duration_s=8.0, torn_tail=True))
    events = list(read_events(RunFolder(run_dir).events))   # the recorder's own reader skips the torn line
    assert events and all(set(REQUIRED_FIELDS) <= set(event) for event in events)
    assert {event["type"] for event in events} <= EVENT_TYPES


def test_markdown_table_rounds_and_cuts():
    table = pd.DataFrame({"a": [1.234, 2.0, 3.0], "b": ["x|y", None, "z"]})
    text = markdown_table(table, digits=1, limit=2)
    assert "| 1.2 | x\\|y |" in text and "1 more rows" in text


def test_summarize_rejects_a_directory_without_events(tmp_path):
    result = CliRunner().invoke(app, ["summarize", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a run directory" in result.output


@pytest.mark.spark
def test_phase_table_has_seed_002_measures(synthetic_runs):
    phases = synthetic_runs["clean"].tables["phases"]
    # the runner's `timeline` mark and the scenario's first phase both fall at 0: an empty row, as in real runs
    assert list(phases["phase"]) == ["timeline", "steady", "scale-up", "scale-down", "crash-one"]
    assert phases["produced"].sum() == synthetic_runs["clean"].facts.produced_records
    assert (phases["records_lost"] == 0).all() and (phases["max_latency_ms"].fillna(0) < 3000).all()
    named = phases[phases["phase"] != "timeline"]
    assert (named["rebalance_ms"] > 0).all() and phases.iloc[0]["produced"] == 0
    planted = synthetic_runs["planted"].tables["phases"].set_index("phase")
    assert planted.loc["crash-one", "over_limit"] > 0 and planted.loc["crash-one", "never_processed"] > 0


@pytest.mark.spark
def test_rebalance_metrics_use_kafka_names(synthetic_runs):
    metrics = synthetic_runs["clean"].tables["rebalance_metrics"].set_index("member")
    group = metrics.loc["(group)"]
    assert group["rebalance-total"] == synthetic_runs["clean"].facts.events_by_type["rebalance_completed"]
    assert group["rebalance-latency-max"] >= group["rebalance-latency-avg"] > 0
    assert group["failed-rebalance-total"] == 0
    assert metrics["join-time-avg"].notna().all()        # classic: JoinGroup requests were timed


@pytest.mark.spark
def test_herd_cost_per_change_legacy_reads_the_whole_group(synthetic_runs):
    classic = synthetic_runs["clean"].tables["herd"].set_index("t")
    legacy = synthetic_runs["planted"].tables["herd"].set_index("t")
    join_classic, join_legacy = classic.loc[6.0], legacy.loc[6.0]   # two members join a group of three
    assert join_classic["kind"] == join_legacy["kind"] == "join"
    assert (join_classic["live_before"], join_classic["live_after"]) == (3, 5)
    assert join_classic["requests"] == 2 * 5 and join_classic["notifications"] == 0      # JoinGroup + SyncGroup each
    assert join_legacy["requests"] == 5 * (5 + 2) and join_legacy["notifications"] == 5  # N reads each
    assert join_classic["last_assignment_s"] == pytest.approx(0.3, abs=0.01)
    assert join_classic["stop_the_world_s"] == pytest.approx(0.3, abs=0.01)


@pytest.mark.spark
def test_herd_table_puts_the_servers_count_beside_the_members(synthetic_runs):
    classic = synthetic_runs["clean"].tables["herd"].set_index("t")
    legacy = synthetic_runs["planted"].tables["herd"].set_index("t")
    assert list(classic.columns).index("server_requests") == list(classic.columns).index("requests") + 1
    sampled = classic[classic["server_requests"].notna()]
    assert set(sampled["kind"]) == {"join", "leave", "crash"}        # every change the runner sampled around
    assert (sampled["server_requests"] == sampled["requests"]).all()
    assert legacy.loc[6.0, "server_requests"] == legacy.loc[6.0, "requests"] + SERVER_EXTRA
    assert pd.isna(classic["server_requests"].iloc[-1])                # the members' final leave: no sample after
    assert synthetic_runs["unsampled"].tables["herd"]["server_requests"].isna().all()


@pytest.mark.spark
def test_summary_files_are_written(synthetic_runs):
    out = synthetic_runs["planted"].folder
    for name in ("verdicts", "phases", "herd", "throughput", "ownership", "rebalance_metrics", "faults"):
        assert out.summary_table(name).exists()
    assert out.evidence_table("duplicates").exists()
    verdicts = pd.read_parquet(out.summary_table("verdicts"))
    assert (verdicts["verdict"] == "false").sum() == 10    # every planted anomaly, the servers' extra count too
    assert "## Evidence: double-ownership" in out.summary_markdown.read_text()
    results = verdicts.set_index("check")["result"]                     # the same words as the terminal's
    assert results["duplicates"].startswith("VIOLATED (") and results["fenced-commits"].startswith("protected (")
    assert "| double-ownership | VIOLATED (" in out.summary_markdown.read_text()


@pytest.mark.spark
def test_produced_records_are_read_from_batches_and_from_older_single_record_lines(spark, tmp_path):
    from experiments.summary import read_events as read_frames

    events = RunFolder(tmp_path).events
    events.mkdir()
    head = '{"run_id":"r","backend":"","ts_ns":1000,"ts_ms":5000,"process":"p","member":"",'
    (events / "producer.jsonl").write_text(
        head + '"type":"records_produced","topic":"t","partition":0,"first_offset":7,"last_offset":9,"count":3,'
        '"seqs":[0,2,4],"produce_ts_ms":[4001,4002,4003]}\n'
        + head + '"type":"record_produced","topic":"t","partition":1,"offset":3,"seq":1,"produce_ts_ms":4004}\n'
        + head + '"type":"records_produced","topic":"t","partition":2,"first_offset":0,"last_offset":1,"count":2}\n')
    frames = read_frames(spark, tmp_path)
    rows = sorted((r["tp"], r["first_offset"], r["last_offset"], r["records"], list(r["stamps"]))
                  for r in frames.produced.collect())
    frames.unpersist()
    assert rows == [("t-0", 7, 9, 3, [4001, 4002, 4003]), ("t-1", 3, 3, 1, [4004]),
                    ("t-2", 0, 1, 2, [5000, 5000])], "a batch without produce times takes its own time"
    assert frames.types == {"records_produced": 2, "record_produced": 1}


def _shuffles_outside_the_cache(frame) -> int:
    """Exchanges in a frame's physical plan, not counting those inside a cached relation's own plan."""
    count, cache_indent = 0, None
    for line in frame._jdf.queryExecution().executedPlan().toString().splitlines():
        indent = len(line) - len(line.lstrip(" :+-"))
        if cache_indent is not None and indent > cache_indent:
            continue
        cache_indent = indent if "InMemoryRelation" in line else None
        count += "Exchange" in line
    return count


@pytest.mark.spark
def test_a_small_log_read_by_run_shuffles_nothing_for_a_window_by_run_and_partition(spark, tmp_path):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from experiments.summary import read_runs
    from experiments.summary.session import tuned_for

    runs = []
    for index in range(2):
        events = RunFolder(tmp_path / f"run-{index}").events
        events.mkdir(parents=True)
        (events / "m.jsonl").write_text("".join(_line("classic", t, member="m1", type="offsets_committed",
                                                      offsets={"t-0": 3}) for t in (1.0, 2.0)))
        runs.append(events.parent)
    shuffles = {}
    with tuned_for(spark, 1):   # the summary's settings for a small log, under which it reads by run
        for by_run in (False, True):
            frames = read_runs(spark, runs, by_run=by_run)
            in_order = Window.partitionBy("run", "tp").orderBy("ts_ns")
            lagged = frames.commits.withColumn("before", F.lag("offset").over(in_order))
            shuffles[by_run] = _shuffles_outside_the_cache(lagged)
            frames.unpersist()
    assert shuffles == {False: 1, True: 0}


def _line(backend: str, t_s: float, **fields) -> str:
    import json

    return json.dumps({"run_id": "r", "backend": backend, "ts_ns": int(t_s * 1e9), "ts_ms": int(t_s * 1e3),
                       "process": fields.get("member", "runner"), **fields}) + "\n"


def _write_restart_run(folder: Path) -> None:
    """A restart closes the member first (a last batch, a commit, the revocation)."""
    import json

    line = lambda t_s, **fields: _line("classic", t_s, **fields)  # noqa: E731
    events = RunFolder(folder).events
    events.mkdir(parents=True)
    (events / "m0.jsonl").write_text(
        line(1.0, member="m0", type="member_started")
        + line(1.5, member="m0", type="rebalance_completed", generation=1, assigned=["t-0"])
        + line(2.0, member="m0", type="records_consumed", topic="t", partition=0, first_offset=0, last_offset=9,
               count=10, produce_ts_ms=[1900] * 10)
        + line(3.05, member="m0", type="records_consumed", topic="t", partition=0, first_offset=10, last_offset=12,
               count=3, produce_ts_ms=[3000] * 3)
        + line(3.06, member="m0", type="partitions_revoked", partitions=["t-0"])
        + line(3.07, member="m0", type="member_stopped", reason="close"))
    (events / "runner.jsonl").write_text(
        line(3.0, member="", type="fault_started", fault_id="f0", kind="restart", target="m0", member_ids=["m0"]))
    RunFolder(folder).lock.write_text(json.dumps({
        "name": "restart", "run_id": "r", "backend": "classic", "strategy": "range", "session_timeout_ms": 10000,
        "topics": {"t": 1}, "members": 1, "group": "g", "status": "completed"}))


def _write_late_handling_run(folder: Path) -> None:
    """0.8's watcher thread releases a partition while the application still handles what poll() delivered."""
    import json

    line = lambda t_s, **fields: _line("legacy", t_s, **fields)  # noqa: E731
    events = RunFolder(folder).events
    events.mkdir(parents=True)
    batch = {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 2, "count": 3,
             "produce_ts_ms": [1900] * 3}
    (events / "m0.jsonl").write_text(
        line(1.0, member="m0", type="member_started")
        + line(1.5, member="m0", type="rebalance_completed", generation=1, assigned=["t-0"])
        + line(2.0, member="m0", type="records_consumed", **batch)                 # delivered while the owner
        + line(2.5, member="m0", type="partitions_revoked", partitions=["t-0"])
        + line(3.0, member="m0", type="records_processed", processed_ts_ms=[2800, 2900, 3000], **batch))
    (events / "m1.jsonl").write_text(
        line(1.0, member="m1", type="member_started")
        + line(2.6, member="m1", type="rebalance_completed", generation=2, assigned=["t-0"]))
    RunFolder(folder).lock.write_text(json.dumps({
        "name": "late-handling", "run_id": "r", "backend": "legacy", "strategy": "range", "session_timeout_ms": 6000,
        "topics": {"t": 1}, "members": 2, "group": "g", "status": "completed"}))


@pytest.fixture(scope="module")
def summarised_by_command(spark, tmp_path_factory):
    """The hand-written runs above and a synthetic run with a duplicate planted, summarised by `summarize` in one
    pass (a pass costs about the same for one run or several), with the convergence bound given: the command's
    output and each run's summary as read back."""
    root = tmp_path_factory.mktemp("by-command")
    _write_restart_run(root / "restart")
    _write_late_handling_run(root / "late-handling")
    write_run(root / "duplicate", SyntheticRun(name="duplicate", anomalies=frozenset({Anomaly.DUPLICATE})))
    runs = [root / "restart", root / "late-handling", root / "duplicate"]
    result = CliRunner().invoke(app, ["summarize", *map(str, runs), "--master", "local[2]", "--convergence-bound-s", "12"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output, {run.name: load_run(run) for run in runs}


def _verdict(run: RunData, check: str) -> pd.Series:
    return run.verdicts.set_index("check").loc[check]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_summarize_command_prints_verdicts(summarised_by_command):
    output, runs = summarised_by_command
    assert "duplicates" in output and "VIOLATED (1)" in output and "summary.md" in output
    assert "summarising 3 runs [5/6] checks and aggregates" in output   # its steps, as they happen
    duplicates = _verdict(runs["duplicate"], "duplicates")
    assert duplicates["verdict"] == "false" and duplicates["count"] == 1
    assert _verdict(runs["duplicate"], "convergence")["detail"].endswith("(allowed: 12 s, --convergence-bound-s)")


@pytest.mark.spark
def test_a_clean_restart_ends_ownership_at_the_members_own_revocation(summarised_by_command):
    """A restart closes the member first (a last batch, a commit, the revocation), so consuming between
    the fault's start and the member's revocation is consumption by the owner, not outside ownership."""
    _, runs = summarised_by_command
    assert _verdict(runs["restart"], "consumed-without-ownership")["verdict"] == "true"


@pytest.mark.spark
def test_a_batch_handled_after_its_partition_moved_is_processed_without_ownership(summarised_by_command):
    """0.8's watcher thread releases a partition while the application is still handling what poll()
    delivered: the record was delivered to the owner, but handled by a member that no longer owned it."""
    _, runs = summarised_by_command
    outside = _verdict(runs["late-handling"], "consumed-without-ownership")
    assert outside["verdict"] == "false" and outside["count"] == 1
    evidence = runs["late-handling"].evidence["consumed-without-ownership"]
    assert evidence.iloc[0]["member"] == "m0" and evidence.iloc[0]["records"] == 3


def test_synthetic_logs_use_only_declared_fields(tmp_path):
    from rebalance.events import VOCABULARY

    run_dir = write_run(tmp_path / "run", SyntheticRun(duration_s=8.0, anomalies=frozenset(Anomaly)))
    for event in read_events(RunFolder(run_dir).events):
        undeclared = set(event) - set(REQUIRED_FIELDS) - set(VOCABULARY[event["type"]].fields)
        assert not undeclared, (event["type"], undeclared)


def test_the_spark_schema_is_the_vocabularys():
    from experiments.summary.event_tables import EVENT_SCHEMA, READ_FIELDS

    assert EVENT_SCHEMA.fieldNames() == list(READ_FIELDS)
    types = {field.name: field.dataType.simpleString() for field in EVENT_SCHEMA.fields}
    assert types["produce_ts_ms"] == "array<bigint>" and types["offsets"] == "map<string,bigint>"
    assert types["params"] == "string"                     # any JSON value, read as its text


def test_the_memory_slope_is_fitted_over_the_second_half_only():
    """Start-up growth in the first half does not count; a leak in the second half does (MB a minute)."""
    import pandas as pd

    from experiments.summary.memory import memory_table, steepest

    minutes = [t / 60 for t in range(0, 1200, 10)]
    rows = [{"process": "broker-0", "t": m * 60, "rss_bytes": int((50 + (20 if m < 10 else 20)) * 2 ** 20)}
            for m in minutes]                                            # flat after the first half
    rows += [{"process": "host-0", "t": m * 60, "rss_bytes": int((40 + 2 * m) * 2 ** 20)} for m in minutes]
    table = memory_table(pd.DataFrame(rows), run_end=1200.0)
    slopes = dict(zip(table["process"], table["second_half_slope_mb_per_min"], strict=True))
    assert abs(slopes["broker-0"]) < 1e-9 and abs(slopes["host-0"] - 2.0) < 1e-6
    assert steepest(table) == ("host-0", pytest.approx(2.0))
    assert steepest(memory_table(pd.DataFrame(rows[:2]), run_end=1200.0)) is None   # too few samples to judge


def test_a_process_started_late_is_judged_over_its_own_later_half_and_never_on_a_short_life():
    """A host restarted in the run's second half has its start-up there: its growth then is not a leak."""
    import pandas as pd

    from experiments.summary.memory import memory_table, steepest

    def host(name, start_s, end_s, mb_at):
        return [{"process": name, "t": t, "rss_bytes": int(mb_at(t - start_s) * 2 ** 20)}
                for t in range(start_s, end_s, 10)]

    growing_then_flat = lambda age_s: 50 + min(age_s, 120) / 20     # noqa: E731 - 6 MB over its first 2 minutes
    rows = host("broker-0", 0, 1800, lambda age: 60)
    rows += host("restarted", 1000, 1800, growing_then_flat)          # 13 minutes, started in the second half
    rows += host("short-lived", 1500, 1530, growing_then_flat)        # three samples of a start-up
    rows += host("leaking", 1000, 1800, lambda age: 50 + age / 60)    # 1 MB a minute for good
    slopes = dict(zip(*(memory_table(pd.DataFrame(rows), run_end=1800.0)[c]
                        for c in ("process", "second_half_slope_mb_per_min")), strict=True))
    assert abs(slopes["restarted"]) < 1e-9
    assert pd.isna(slopes["short-lived"])
    assert slopes["leaking"] == pytest.approx(1.0)
    assert steepest(memory_table(pd.DataFrame(rows), run_end=1800.0)) == ("leaking", pytest.approx(1.0))
