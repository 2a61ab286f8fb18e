"""A long stage's steps as the user sees them: each on a line of its own with its number and the time the one
before took, under a live spinner with the time elapsed on a terminal (`summarize`, `report`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

# The summary's steps in the order experiments.summary.pipeline names them, and what a reader should know of each.
SUMMARY_STEPS = {
    "starting Spark": "a JVM, a few seconds",
    "reading events": "every process's event file",
    "records": "which records were handled, late, twice or never (planned; Spark runs it below)",
    "ownership": "who owned which partition when (planned)",
    "checks and aggregates": "Spark runs every check and table planned above, a few dozen queries: the longest step, "
                             "about a minute for a run of a few minutes",
    "writing": "Parquet and Markdown into each run's summary/",
}
# The stage after it (experiments.stages), which a command that goes on to it shows as a further step
REPORT_STEPS = {"report": "report.html and report.md with their charts"}


class StepLines:
    """Call it with each step's name; it prints `summarising [2/6] reading events: ...` and, for the step before,
    how long it took; `count(done, added)` shows the step's progress beside the spinner (the checks' queries done
    of those started so far). Use it as a context manager: the spinner runs while the step does."""

    def __init__(self, title: str, steps: dict[str, str] | Sequence[str] = SUMMARY_STEPS,
                 console: Console | None = None) -> None:
        self.title = title
        self.steps = dict(steps) if isinstance(steps, dict) else dict.fromkeys(steps, "")
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=console or Console(stderr=True, highlight=False), transient=True)
        self.task = None
        self.current: tuple[str, float] | None = None
        self.label = title
        self.started = time.monotonic()
        self.stepped = False

    def __enter__(self) -> StepLines:
        self.progress.__enter__()
        self.task = self.progress.add_task(self.title, total=None)
        return self

    def __exit__(self, *exc) -> None:
        self._close_current()
        self.progress.__exit__(*exc)
        if exc[0] is None and self.stepped:
            self.progress.console.print(f"{self.title}: done in {time.monotonic() - self.started:.0f} s")

    def __call__(self, step: str) -> None:
        self._close_current()
        self.stepped = True
        names = list(self.steps)
        number = f"[{names.index(step) + 1}/{len(names)}] " if step in self.steps else ""
        about = self.steps.get(step, "")
        self.progress.console.print(f"{self.title} {number}{step}" + (f": {about}" if about else ""),
                                    markup=False, soft_wrap=True)
        self.label = f"{self.title} {number}{step}"
        self.progress.update(self.task, description=self.label)
        self.current = (step, time.monotonic())

    def count(self, done: int, added: int) -> None:
        """Queries done of those started so far (callable from any thread: rich's progress holds a lock)."""
        if self.current is not None:
            self.progress.update(self.task, description=f"{self.label}: {done} of {added} queries")

    def _close_current(self) -> None:
        if self.current is not None:
            step, began = self.current
            self.progress.console.print(f"  {step}: {time.monotonic() - began:.1f} s", markup=False)
            self.current = None
