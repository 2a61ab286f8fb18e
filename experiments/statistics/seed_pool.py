"""Seeds played over a pool of processes (one a core by default) that the caller can stop: a budget spent, or Ctrl-C.

A terminal's Ctrl-C reaches every process of its group, and a worker that died of it would lose its seed and break
the pool. So the workers leave Ctrl-C to the process that started them, which stops the pool itself and keeps what
had finished. Leaving the `with` block stops the seeds still under way: `concurrent.futures` cannot stop a running
task before Python 3.14, a `multiprocessing` pool can.

The pool stops its workers with SIGTERM, which a worker turns into `SystemExit` so that a seed's `finally` still
cleans up (its scratch folder). A worker stopped cannot reap a child of its own: so the provenance every seed's
record asks for (the commit, which starts `git`) is asked here, once, before the workers are forked with it.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from experiments.run import provenance

Task = TypeVar("Task")
Result = TypeVar("Result")


@contextmanager
def played(play: Callable[[Task], Result], tasks: Iterable[Task], *,
           workers: int | None = None) -> Iterator[Iterator[tuple[Task, Result]]]:
    """`play(task)` for every task, started in the tasks' order; the block reads (task, result) as each finishes.
    `play` must be a module's own function (it is pickled by name). A worker's error is raised where its result
    would have been read."""
    provenance.process_commit(), provenance.versions()
    pool = multiprocessing.Pool(workers or os.cpu_count() or 1, initializer=_as_worker)
    try:
        yield pool.imap_unordered(functools.partial(_with_task, play), tasks)
    finally:
        pool.terminate()
        pool.join()


def _with_task(play: Callable[[Task], Result], task: Task) -> tuple[Task, Result]:
    return task, play(task)


def _as_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
