"""The pool that plays a sweep's seeds: every task's result comes back once, and a worker starts no `git` of its own
(the pool asks the provenance before forking: a worker stopped under way cannot reap a child)."""

import subprocess

from experiments.run import provenance
from experiments.statistics import seed_pool


def _git_started_here(task: int) -> tuple[int, int]:
    """The task, and how many times this worker had to start `git` to know the commit."""
    before = provenance.process_commit.cache_info().misses
    provenance.process_commit()
    return task, provenance.process_commit.cache_info().misses - before


def test_every_task_comes_back_once_and_no_worker_starts_git():
    provenance.process_commit.cache_clear()
    with seed_pool.played(_git_started_here, range(20), workers=2) as results:
        found = sorted(results)
    assert [task for task, _ in found] == list(range(20))
    assert all(result == (task, 0) for task, result in found)


def test_the_commit_is_asked_each_time_but_once_for_a_process(monkeypatch):
    """A campaign records the checkout at each run's start (code changed mid-campaign shows), so `git_commit` asks
    `git` every time; a simulation's seeds, all played by the code this process imported, ask it once."""
    asked = []

    def run(argv, **_):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=f"{len(asked):040d}\n")

    monkeypatch.setattr(provenance.subprocess, "run", run)
    provenance.process_commit.cache_clear()
    try:
        assert provenance.git_commit() != provenance.git_commit()
        assert provenance.process_commit() == provenance.process_commit()
        assert len(asked) == 3
    finally:
        provenance.process_commit.cache_clear()   # the next test asks the real checkout again
