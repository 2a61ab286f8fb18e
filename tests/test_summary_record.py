"""summary/run.json: the record kept whole beside the typed facts, read back equal; one written before the
record was kept whole (the run at a glance under `info`, the facts a dict) reads back the same way."""

from __future__ import annotations

import json

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord
from experiments.summary.check_queries import CheckConfig
from experiments.summary.run_summary import (
    RunSummary,
    SummaryFacts,
    read_summary_record,
    write_summary_record,
)


def test_the_record_and_the_facts_read_back_as_they_were_written(tmp_path):
    folder = RunFolder(tmp_path)
    folder.summary.mkdir(parents=True)
    record = RunRecord(name="herd", run_id="r1", backend="classic", strategy="range", session_timeout_ms=10000,
                       topics={"t0": 4}, members=2, group="g", status="completed")
    facts = SummaryFacts(checks=CheckConfig(latency_limit_ms=2500), events=10, events_by_type={"phase": 3},
                         duration_s=12.5, partitions=4, coordinator_gap_s=1.5)
    write_summary_record(RunSummary(folder, record, [], {}, facts))
    assert read_summary_record(folder) == (record, facts)
    assert json.loads(folder.summary_record.read_text())["facts"]["checks"]["latency_limit_ms"] == 2500


def test_a_run_json_from_before_the_record_was_kept_whole_reads_back(tmp_path):
    folder = RunFolder(tmp_path)
    folder.summary.mkdir(parents=True)
    folder.summary_record.write_text(json.dumps({
        "info": {"run_dir": str(tmp_path), "name": "old", "backend": "modern", "strategy": "range", "members": 3,
                 "topics": {"t": 6}, "session_timeout_ms": 10000, "a_key_since_dropped": 1},
        "facts": {"partitions": 6, "latency_limit_ms": 2000, "unreadable_lines": 1, "a_fact_since_dropped": 2}}))
    record, facts = read_summary_record(folder)
    assert (record.name, record.backend, record.members, record.topics) == ("old", "classic", 3, {"t": 6})
    assert facts.partitions == 6 and facts.unreadable_lines == 1 and facts.latency_limit_ms == 2000
