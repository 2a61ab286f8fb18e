"""`rebalance-lab zk up | status | down` as a user runs it: separate processes, one state file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import docker
from tests.fixtures.zk import PROVIDERS
from zkensemble.docker_provider import LABEL
from zkensemble.local_provider import MARKER

pytestmark = [pytest.mark.zk]


def lab(*args: str, state: Path, env: dict[str, str] | None = None, timeout_s: float = 180):
    environment = {**os.environ, "LAB_STATE_DIR": str(state), "COLUMNS": "120", **(env or {})}
    return subprocess.run([sys.executable, "-m", "experiments.cli.app", *args], env=environment,
                          capture_output=True, text=True, timeout=timeout_s)


def leftovers(name: str) -> list[str]:
    """Everything of ensemble `name` still alive: containers, networks, java processes."""
    found = []
    client = docker.from_env()
    try:
        flt = {"label": f"{LABEL}={name}"}
        # ignore_removed: a container removed between the listing and its inspection is gone, not an error
        found += [f"container {c.name}" for c in client.containers.list(all=True, filters=flt, ignore_removed=True)]
        found += [f"network {n.name}" for n in client.networks.list(filters=flt)]
    finally:
        client.close()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"{MARKER}{name}".encode() in cmdline.split(b"\0"):
            found.append(f"process {proc.name}")
    return found


@pytest.mark.ensemble
@pytest.mark.parametrize("provider", PROVIDERS)
def test_up_three_nodes_then_status_then_down_leaves_nothing(tmp_path, provider):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    try:
        up = lab("zk", "up", "--nodes", "3", "--provider", provider, "--name", name, state=tmp_path)
        assert up.returncode == 0, up.stderr
        assert (tmp_path / "zk.json").exists()

        status = lab("zk", "status", state=tmp_path)
        assert status.returncode == 0, status.stderr
        rows = [line for line in status.stdout.splitlines() if "127.0.0.1:" in line and "│" in line]
        assert len(rows) == 3, status.stdout
        assert all("yes" in row for row in rows), status.stdout
        assert sum("leader" in row for row in rows) == 1, status.stdout
        assert sum("follower" in row for row in rows) == 2, status.stdout
        assert leftovers(name), "zk up returned but nothing of the ensemble is running"
    finally:
        down = lab("zk", "down", state=tmp_path)
    assert down.returncode == 0, down.stderr
    assert leftovers(name) == []
    assert not (tmp_path / "zk.json").exists()
    assert not (tmp_path / name).exists()
    again = lab("zk", "status", state=tmp_path)
    assert again.returncode == 1 and "no ZooKeeper is up" in again.stderr


def one_error_line(result) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unknown_provider_is_refused(tmp_path):
    line = one_error_line(lab("zk", "up", "--provider", "zookeeper-in-the-cloud", state=tmp_path))
    assert "unknown ZooKeeper provider" in line and "auto, docker, local" in line


@pytest.mark.parametrize("provider", PROVIDERS)
def test_port_in_use_is_refused_and_nothing_runs(tmp_path, provider):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = lab("zk", "up", "--provider", provider, "--client-port", str(port), "--name", name, state=tmp_path)
    assert f"port {port} is already in use" in one_error_line(result)
    assert leftovers(name) == []
    assert not (tmp_path / "zk.json").exists()


@pytest.mark.docker
def test_missing_image_is_refused(tmp_path):
    result = lab("zk", "up", "--provider", "docker", state=tmp_path, env={"LAB_ZK_IMAGE": "rebalance-lab/absent:0"})
    assert "LAB_ZK_IMAGE=rebalance-lab/absent:0 is not present and cannot be pulled" in one_error_line(result)


def test_no_java_and_no_docker_is_refused(tmp_path):
    env = {"PATH": str(tmp_path / "empty"), "JAVA_HOME": "", "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    line = one_error_line(lab("zk", "up", state=tmp_path, env=env))
    assert "neither a Docker engine" in line and "./lab setup" in line
    line = one_error_line(lab("zk", "up", "--provider", "local", state=tmp_path, env=env))
    assert "no Java found" in line


def test_down_with_nothing_up_is_fine(tmp_path):
    result = lab("zk", "down", state=tmp_path)
    assert result.returncode == 0 and "no ZooKeeper is up" in result.stdout
