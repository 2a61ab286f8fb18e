"""The summary on a standalone Spark cluster (master and worker started from the pyspark package's own
launcher, loopback only, once for this file) gives exactly the output of a local session on the same runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments.folders.run_folder import RunFolder
from rebalance.ports import free_ports

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _start(argv: list[str], log: Path, env: dict) -> subprocess.Popen:
    from experiments.faults.process import _die_with_parent

    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent,
                                start_new_session=True)


def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not seen in {log}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker of 2 cores, its logs in the folder `spark_cluster_logs` gives;
    both processes stopped after this file's tests."""
    tmp_path = tmp_path_factory.mktemp("spark-cluster")
    home = _spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "PYSPARK_PYTHON": sys.executable,
           # the master and the worker only route a few messages: the JVM's quick compiler and a small heap
           "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "SPARK_DAEMON_MEMORY": "256m"}
    port, ui, worker_ui = free_ports(3)
    spark_class = str(home / "bin" / "spark-class")
    master = _start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], tmp_path / "master.log", env)
    worker = None
    try:
        _wait_for(tmp_path / "master.log", "I have been elected leader", master)
        url = f"spark://127.0.0.1:{port}"
        worker = _start([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                         "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui)], tmp_path / "worker.log", env)
        _wait_for(tmp_path / "master.log", "Registering worker", master)
        yield url, tmp_path / "master.log"
    finally:
        for process in (worker, master):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


def _summarize(run_dirs: list[Path], master: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}   # the driver on loopback too
    return subprocess.run([sys.executable, "-m", "experiments.cli.app", "summarize", *map(str, run_dirs),
                           "--master", master], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_standalone_cluster_summarises_like_local(tmp_path, spark_cluster, synthetic_runs):
    """The suite's clean and planted runs, summarised here in its local session (with three other runs), summarised
    again on the cluster (the two alone): the same tables."""
    url, master_log = spark_cluster
    local_runs = [synthetic_runs[name].folder.path for name in ("clean", "planted")]
    cluster_runs = []
    for run in local_runs:
        shutil.copytree(run, tmp_path / run.name, ignore=shutil.ignore_patterns(RunFolder(run).summary.name))
        cluster_runs.append(tmp_path / run.name)

    on_cluster = _summarize(cluster_runs, url)
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    assert _registered_apps(master_log) == 1, "the summary ran as an application of the cluster"

    for local, cluster in zip(local_runs, cluster_runs, strict=True):
        names = sorted(path.name for path in RunFolder(local).summary.glob("*.parquet"))
        assert names == sorted(path.name for path in RunFolder(cluster).summary.glob("*.parquet"))
        assert "verdicts.parquet" in names and "herd.parquet" in names
        for name in names:
            pd.testing.assert_frame_equal(pd.read_parquet(RunFolder(local).summary / name),
                                          pd.read_parquet(RunFolder(cluster).summary / name), check_exact=False)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_simulated_seeds_spread_over_a_standalone_cluster_replay_as_here(tmp_path, spark_cluster):
    """`./lab sim --master spark://...`: one task a seed on the cluster's worker, the same events as here."""
    from tests.test_sim import _sim_command, same_events, sim_here

    url, master_log = spark_cluster
    apps_before = _registered_apps(master_log)
    on_cluster = _sim_command(tmp_path / "cluster", "--master", url)
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    assert _registered_apps(master_log) == apps_before + 1, "the seeds ran as an application of the cluster"
    sim_here(tmp_path / "here")
    assert same_events(tmp_path / "here", tmp_path / "cluster")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_split_brain_safety_sweep_runs_its_seeds_on_a_standalone_cluster(tmp_path, spark_cluster):
    """`./lab sim split-brain-a --records --safety --master spark://...`: one task a seed, each tallied on the
    cluster's worker; the sweep's verdict is written as here."""
    import json

    url, master_log = spark_cluster
    apps_before = _registered_apps(master_log)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-m", "experiments.cli.app", "sim", str(SCENARIOS / "split-brain-a.toml"),
                           "--backend", "classic", "--records", "--seeds", "3", "--safety", "--out", str(out),
                           "--master", url], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _registered_apps(master_log) == apps_before + 1, "the seeds ran as an application of the cluster"
    assert "0 of 3 seeds broke a safety check" in done.stdout
    assert json.loads((out / "violations.json").read_text())["seeds"] == 3


def _registered_apps(master_log: Path) -> int:
    return master_log.read_text(errors="replace").count("Registering app")
