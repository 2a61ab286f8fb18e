"""An ensemble started with an owner goes away when the owner is SIGKILLed; `zk up`'s does not get a reaper.

Real ZooKeeper, real processes: a throwaway owner process starts an ensemble with `owner_pid`,
prints what it started and sleeps; the test kills it with SIGKILL and waits for the reaper.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import zkensemble
from tests.fixtures.zk import PROVIDERS
from tests.test_zk_cli import lab, leftovers
from zkensemble import reaper, wait_until

pytestmark = [pytest.mark.zk]

OWNER = """
import json, os, sys, time
import zkensemble
zk = zkensemble.start(nodes=int(sys.argv[2]), provider=sys.argv[1], owner_pid=os.getpid())
print(json.dumps({"name": zk.name, "ports": [n.client_port for n in zk.nodes], "reaper": zk._reaper.pid,
                  "workdir": str(getattr(zk, "workdir", ""))}), flush=True)
time.sleep(600)
"""


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return False
    except OSError:
        return True


def reapers_of(name: str) -> list[int]:
    """Pids of live reaper processes naming ensemble `name`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if reaper.MODULE.encode() in argv and name.encode() in argv and reaper.start_time(int(proc.name)) is not None:
            found.append(int(proc.name))
    return found


def read_line(process: subprocess.Popen, timeout_s: float) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise AssertionError(f"the owner printed nothing within {timeout_s:.0f} s")
    return process.stdout.readline()


@pytest.mark.ensemble
@pytest.mark.parametrize("provider", PROVIDERS)
def test_sigkilled_owner_leaves_no_zookeeper_behind(provider):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, provider, "3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    started = None
    try:
        line = read_line(owner, timeout_s=180)
        assert line, f"the owner exited: {owner.stderr.read() if owner.poll() is not None else ''}"
        started = json.loads(line)
        name, ports = started["name"], started["ports"]
        assert leftovers(name), "the owner printed its ensemble but nothing of it runs"
        assert not any(refused(port) for port in ports)
        assert reapers_of(name) == [started["reaper"]]

        killed_at = time.monotonic()
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        wait_until(lambda: not leftovers(name) and all(refused(port) for port in ports), 90,
                   f"the reaper to remove ensemble {name}", interval_s=0.25)
        print(f"{provider}: ensemble gone {time.monotonic() - killed_at:.1f} s after the owner's SIGKILL")
        wait_until(lambda: not reapers_of(name), 30, "the reaper to exit")
        if provider == "local":
            assert not Path(started["workdir"]).exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=30)
        if started is not None:  # whatever the reaper did not remove, the test does
            reaper.tear_down(reaper.Target(zkensemble.Provider.parse(provider), started["name"],
                                           Path(started["workdir"]) if started["workdir"] else None))
            for pid in reapers_of(started["name"]):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stopping_an_owned_ensemble_also_ends_its_reaper(provider):
    ensemble = zkensemble.start(nodes=1, provider=provider, owner_pid=os.getpid())
    try:
        process = ensemble._reaper
        assert process is not None and process.poll() is None
        assert reapers_of(ensemble.name) == [process.pid]
    finally:
        ensemble.stop()
    assert process.returncode is not None
    assert reapers_of(ensemble.name) == []
    assert leftovers(ensemble.name) == []


def test_a_new_process_with_the_owners_pid_does_not_count_as_the_owner():
    me = os.getpid()
    started = reaper.start_time(me)
    assert started is not None and reaper.owner_alive(me, started)
    assert not reaper.owner_alive(me, started + 1)  # same pid, other start time: pid reused
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:  # an owner that died but was not waited for yet (a zombie) is gone too
        wait_until(lambda: reaper.start_time(child.pid) is None, 30, "the child to exit")
        assert Path(f"/proc/{child.pid}").exists()
    finally:
        child.wait(timeout=30)


@pytest.mark.docker
def test_zk_up_starts_no_reaper_and_outlives_the_command(tmp_path):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    try:
        up = lab("zk", "up", "--provider", "docker", "--name", name, state=tmp_path)
        assert up.returncode == 0, up.stderr
        assert reapers_of(name) == []
        status = lab("zk", "status", state=tmp_path)  # the `zk up` process is gone; its ensemble is not
        assert status.returncode == 0 and "yes" in status.stdout, status.stderr
    finally:
        down = lab("zk", "down", state=tmp_path)
    assert down.returncode == 0, down.stderr
    assert leftovers(name) == []
