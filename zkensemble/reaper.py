"""A watchman that removes an ensemble once the process that owns it is gone, even after SIGKILL.

`zkensemble.start(..., owner_pid=os.getpid())` starts one next to the ensemble:

    python -m zkensemble.reaper --owner PID --owner-start TICKS --provider docker --name NAME
    python -m zkensemble.reaper --owner PID --owner-start TICKS --provider local --name NAME --workdir DIR

It runs detached (a session of its own, no terminal, stdin/stdout on /dev/null) and checks
twice a second whether the owner still lives. The owner's start time (field 22 of
/proc/PID/stat) is compared as well, so a new process that happens to get the same pid does
not keep the ensemble alive. When the owner is gone it removes what it can find of the
ensemble without the owner's objects: docker containers and the peer network by their
`rebalance-lab.zk=<name>` label, local java servers by the `-Drebalance.lab.zk=<name>` marker
on their command line (which every spawn of a node carries, so a node restarted with a new pid
is found too), then the local work directory.

It ends by itself after that, when the owner's `stop()` terminates it, or when it sees that
the ensemble was removed without it (docker: no labelled container or network left after some
were seen; local: the work directory is gone). An ensemble started by `zk up` has no reaper:
it must outlive the command.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .config import Provider
from .leftovers import docker_client, labelled, local_pids, remove_labelled, start_time

POLL_S = 0.5
PRESENCE_EVERY = 10  # docker: whether the ensemble still exists is checked every 10 polls
MODULE = "zkensemble.reaper"


def owner_alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


def spawn(provider: Provider, name: str, owner_pid: int, workdir: Path | None = None) -> subprocess.Popen:
    """Start the reaper of ensemble `name`, owned by `owner_pid`; the caller terminates it on stop()."""
    started = start_time(owner_pid)
    if started is None:
        raise ValueError(f"owner process {owner_pid} does not exist")
    argv = [sys.executable, "-m", MODULE, "--owner", str(owner_pid), "--owner-start", str(started),
            "--provider", provider.value, "--name", name]
    log_path = None
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
        log_path = workdir / "reaper.log"
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        # Its own session: neither a Ctrl-C in the owner's terminal nor a signal to the owner's
        # process group reaches it. The checkout is its working directory so the package imports.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True, close_fds=True,
                                cwd=Path(__file__).resolve().parents[1])
    finally:
        if log_path:
            log.close()


def stop(popen: subprocess.Popen | None) -> None:
    """End a reaper the owner no longer needs (its ensemble is stopped) and collect its exit status."""
    if popen is None or popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=10)


# -- finding and removing an ensemble without its owner ----------------------------------------


class Target:
    """What the reaper guards: can say whether anything of it is left, and remove it."""

    def __init__(self, provider: Provider, name: str, workdir: Path | None) -> None:
        self.provider = provider
        self.name = name
        self.workdir = workdir
        self._client = None

    def _docker(self):
        if self._client is None:
            self._client = docker_client()
        return self._client

    def present(self) -> bool:
        if self.provider is Provider.DOCKER:
            containers, networks = labelled(self._docker(), self.name)
            return bool(containers or networks)
        return bool(local_pids(self.name))

    def remove(self) -> None:
        if self.provider is Provider.DOCKER:
            remove_labelled(self._docker(), self.name)
            return
        for pid in local_pids(self.name):
            try:
                os.kill(pid, signal.SIGKILL)  # also ends a stopped (paused) process
            except ProcessLookupError:
                pass
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} reaper[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def tear_down(target: Target, timeout_s: float = 120.0) -> bool:
    """Remove the ensemble until two checks a second apart find nothing (a node the owner was still
    starting when it died may appear a moment later). False if something is still there at the end."""
    deadline = time.monotonic() + timeout_s
    clear = 0
    while time.monotonic() < deadline:
        try:
            target.remove()
            clear = clear + 1 if not target.present() else 0
        except Exception as error:  # the engine may be busy; keep trying until the deadline
            log(f"removing {target.name} failed: {type(error).__name__}: {error}")
            clear = 0
        if clear >= 2:
            return True
        time.sleep(1.0)
    return False


def watch(owner: int, owner_start: int, target: Target) -> int:
    seen = False
    for tick in itertools.count():
        if not owner_alive(owner, owner_start):
            break
        time.sleep(POLL_S)
        if target.provider is Provider.LOCAL:
            if target.workdir is not None and not target.workdir.exists():
                log(f"{target.name} was stopped by its owner")
                return 0
        elif tick % PRESENCE_EVERY == 0:  # asks the engine: far less often than the owner check
            try:
                present = target.present()
            except Exception as error:
                log(f"cannot look at {target.name}: {type(error).__name__}: {error}")
                continue
            if seen and not present:
                log(f"{target.name} was stopped by its owner")
                return 0
            seen = seen or present
    log(f"owner {owner} is gone: removing {target.provider.value} ensemble {target.name}")
    if tear_down(target):
        log(f"{target.name} removed")
        return 0
    log(f"{target.name} is still partly there")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--owner", type=int, required=True, help="pid of the process that owns the ensemble")
    parser.add_argument("--owner-start", type=int, required=True,
                        help="its start time (field 22 of /proc/PID/stat), against pid reuse")
    parser.add_argument("--provider", choices=[Provider.DOCKER.value, Provider.LOCAL.value], required=True)
    parser.add_argument("--name", required=True, help="the ensemble's name")
    parser.add_argument("--workdir", type=Path, help="local ensembles: the directory to remove")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    target = Target(Provider.parse(args.provider), args.name, args.workdir)
    return watch(args.owner, args.owner_start, target)


if __name__ == "__main__":
    sys.exit(main())
