"""The pool that plays a sweep's seeds: every task's result comes back once, and a worker starts no `git` of its own
(the pool asks the provenance before forking: a worker stopped under way cannot reap a child)."""

from experiments.run import provenance
from experiments.statistics import seed_pool


def _git_started_here(task: int) -> tuple[int, int]:
    """The task, and how many times this worker had to start `git` to know the commit."""
    before = provenance.git_commit.cache_info().misses
    provenance.git_commit()
    return task, provenance.git_commit.cache_info().misses - before


def test_every_task_comes_back_once_and_no_worker_starts_git():
    provenance.git_commit.cache_clear()
    with seed_pool.played(_git_started_here, range(20), workers=2) as results:
        found = sorted(results)
    assert [task for task, _ in found] == list(range(20))
    assert all(result == (task, 0) for task, result in found)
