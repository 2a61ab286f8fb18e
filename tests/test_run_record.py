"""Run metadata: one writer, one reader, and the lock.json files earlier versions wrote."""

from __future__ import annotations

import json

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import ClusterAddresses, RunRecord, ScenarioSource
from experiments.synthetic.simulation import SyntheticRun, write_run


def test_what_is_written_reads_back_the_same(tmp_path):
    meta = RunRecord(name="herd", run_id="r1", backend="legacy", strategy="range", session_timeout_ms=6000,
                   topics={"t0": 12}, members=4, group="g", status="completed",
                   scenario=ScenarioSource(name="herd", source="herd.toml", sha256="ab", resolved={"seed": 3}),
                   seed=3, applied=({"fault_id": "f1", "op": "start"},), cluster=ClusterAddresses(brokers="b:9092"),
                   hosts={"h000": ("h000-0", "h000-1")}, member_ids={"h000-0": "h000-0-id"}, versions={"python": "3"})
    RunFolder(tmp_path).write_record(meta)
    assert RunFolder(tmp_path).record() == meta
    assert json.loads(RunFolder(tmp_path).lock.read_text())["hosts"] == {"h000": ["h000-0", "h000-1"]}


def test_a_run_without_lock_json_has_no_metadata(tmp_path):
    assert RunFolder(tmp_path).record() is None


def test_a_lock_from_before_the_run_at_a_glance_fields_is_read_from_its_scenario(tmp_path):
    RunFolder(tmp_path).lock.write_text(json.dumps({
        "run_id": "r0", "backend": "classic", "status": "completed", "reason": "",
        "scenario": {"name": "churn", "source": "churn.toml", "sha256": None, "resolved": {
            "name": "churn", "topics": [{"name": "t0", "partitions": 6}],
            "group": {"name": "lab-group", "members": 3, "strategy": "roundrobin", "session_timeout_ms": 10000}}},
        "seed": 1, "schedule": {"initial_members": ["m0", "m1"]}, "applied": [],
        "timeline_start_ns": 5, "started_ms": 6, "ended_ms": 7,
        "cluster": {"zookeeper": None, "zookeeper_provider": None, "brokers": "b:1", "coordinator_broker": 0},
        "members": {"m0": ["m0"], "m1": ["m1"], "m2": ["m2"]}, "proxies": {}, "versions": {},
    }))
    meta = RunFolder(tmp_path).record()
    assert (meta.name, meta.strategy, meta.session_timeout_ms, meta.group) == ("churn", "roundrobin", 10000, "lab-group")
    assert meta.topics == {"t0": 6} and meta.members == 2          # the initial members, not the host table
    assert meta.hosts == {"m0": ("m0",), "m1": ("m1",), "m2": ("m2",)}
    assert meta.backend == "classic"   # the classic backend's earlier name, read as its name


def test_an_older_synthetic_lock_keeps_its_settings_in_the_scenario(tmp_path):
    RunFolder(tmp_path).lock.write_text(json.dumps({
        "name": "s", "backend": "legacy", "seed": 0, "strategy": "range", "session_timeout": 2000,
        "topics": {"t0": {"partitions": 6}}, "members": ["a", "b"], "timeline": [], "anomalies": ["duplicate"],
        "versions": {"synthetic": "1"}}))
    meta = RunFolder(tmp_path).record()
    assert (meta.session_timeout_ms, meta.topics, meta.members) == (2000, {"t0": 6}, 2)
    assert meta.scenario.resolved == {"anomalies": ["duplicate"], "timeline": []}


def test_the_synthetic_generator_writes_through_the_one_writer(tmp_path):
    run_dir = write_run(tmp_path / "run", SyntheticRun(duration_s=2.0, members=2, timeline=()))
    meta = RunFolder(run_dir).record()
    assert (meta.backend, meta.members, meta.topics, meta.status) == ("classic", 2, {"t0": 6}, "completed")


def test_unknown_keys_and_broken_files_name_the_file(tmp_path):
    path = RunFolder(tmp_path).lock
    path.write_text(json.dumps({"name": "x", "typo": 1}))
    with pytest.raises(ValueError, match=r"lock\.json: unknown keys \['typo'\]"):
        RunFolder(tmp_path).record()
    path.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        RunFolder(tmp_path).record()


def test_a_glance_at_a_folder_reads_its_status_past_keys_it_does_not_know(tmp_path):
    """The state of a folder a later version wrote still reads (a status, a name); its full record is refused
    by name, as a hand-written file's typo is."""
    RunFolder(tmp_path).events.mkdir()
    RunFolder(tmp_path).lock.write_text(json.dumps({"name": "herd", "backend": "classic", "status": "completed",
                                                    "topics": {"t": 2}, "a_later_field": 1}))
    assert RunFolder(tmp_path).status() == "completed" and RunFolder(tmp_path).is_completed()
    assert RunFolder(tmp_path).described() == "a completed run of herd on classic"
    with pytest.raises(ValueError, match="a_later_field"):
        RunFolder(tmp_path).record()
