"""`scripts/setup` in a copy of the checkout, with stand-ins for apt, Docker and the virtualenv's Python
that record what they were asked: `--lab` (the demo's path) installs only what the lab's commands
need; the full set-up adds what only the tests need; each is done once."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_PACKAGES = ("chromium", "chromium-driver", "tmux", "debootstrap")


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path):
    """A copy of scripts/setup and pyproject.toml with a virtualenv already made, and stand-ins on PATH:
    no Debian package installed, a Docker engine without images, pip and the recorder only logging."""
    work, bin_dir, log = tmp_path / "checkout", tmp_path / "bin", tmp_path / "calls.log"
    (work / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup", work / "scripts" / "setup")
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    _stub(work / "docker" / "zookeeper" / "build.sh", f'echo "build.sh" >>{log}')
    _stub(work / ".venv" / "bin" / "python", f'echo "venv-python $*" >>{log}\n'
          f'[ "$1" = -c ] && exec {sys.executable} "$@"\n'
          'case "$*" in *"class_archive --check"*) exit 1 ;; esac')
    _stub(bin_dir / "dpkg-query", "exit 1")
    _stub(bin_dir / "apt-get", f'echo "apt-get $*" >>{log}')
    _stub(bin_dir / "sudo", '"$@"')
    _stub(bin_dir / "docker", f'echo "docker $*" >>{log}\ncase "$1" in info) exit 0 ;; *) exit 1 ;; esac')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("LAB_SKIP_IMAGE", None)
    env.pop("LAB_ZK_IMAGE", None)

    def setup(*args: str) -> list[str]:
        log.write_text("")
        subprocess.run(["bash", "scripts/setup", *args], cwd=work, env=env, check=True, timeout=120,
                       capture_output=True, text=True)
        return log.read_text().splitlines()

    setup.stamp = lambda: (work / ".venv" / ".lab-installed").read_text().split()
    setup.project = hashlib.sha256((work / "pyproject.toml").read_bytes()).hexdigest()
    return setup


def _installs(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("venv-python -m pip install")]


def test_the_demo_path_installs_only_what_the_lab_needs(checkout):
    calls = checkout("--lab")

    apt = next(call for call in calls if "apt-get install" in call)
    assert "openjdk-17-jre-headless" in apt and "zookeeper" in apt
    assert not any(package in apt.split() for package in TEST_PACKAGES)
    installs = _installs(calls)
    assert installs[-1].endswith("-e .")
    assert any("--compression=stored" in call and "pyspark" in call for call in installs)
    assert all("--no-compile" in call for call in installs)
    assert not any("experiments.summary.class_archive" in call and "--check" not in call for call in calls)
    assert not any(call.startswith(("docker pull", "build.sh")) for call in calls)
    assert checkout.stamp() == [checkout.project, "lab"]


def test_the_full_setup_adds_what_only_the_tests_need(checkout):
    checkout("--lab")
    calls = checkout()

    apt = next(call for call in calls if "apt-get install" in call)
    assert all(package in apt.split() for package in TEST_PACKAGES)
    assert _installs(calls)[-1].endswith("-e .[dev]")
    assert "venv-python -m experiments.summary.class_archive" in calls
    assert "docker pull zookeeper:3.8" in calls and "build.sh" in calls
    assert checkout.stamp() == [checkout.project, "dev"]


def test_each_level_installs_the_lab_once(checkout):
    checkout()

    assert _installs(checkout()) == []
    assert _installs(checkout("--lab")) == []   # the dev install holds the lab's too
