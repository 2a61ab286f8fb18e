"""The simulated run's folder: one event log per process, as a real run writes them, on the virtual clock.

Member events go to events/<host>.jsonl (the scenario's host processes), the runner's phases to
events/runner.jsonl and the coordinator's own to events/coordinator-0.jsonl; lock.json is a RunRecord like a
real run's. The summary, the report and the campaign statistics read the folder unchanged. With `write=False` no
event file is written: each event only goes to the runner's judge of stability and to `tap` (a tally of the run's
measures, experiments.sim.measures)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.run.settling import Settling
from experiments.sim.kernel import Simulation
from rebalance import events as ev
from rebalance.events import EventRecorder

T0_NS = 7_000_000_000_000          # an arbitrary CLOCK_MONOTONIC origin
T0_MS = 1_790_000_000_000          # an arbitrary wall-clock origin


Tap = Callable[[dict], None]


class _Watched(EventRecorder):
    """A recorder whose every event is also read as the runner reads its members' events (Settling), and by `tap`."""

    def __init__(self, *args, settling: Settling, tap: Tap | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.settling, self.tap = settling, tap

    def emit(self, type: str, member: str = "", **fields: object) -> dict:
        event = super().emit(type, member, **fields)
        self.settling.feed(event)
        if self.tap is not None:
            self.tap(event)
        return event


class Recorders:
    def __init__(self, folder: RunFolder, sim: Simulation, *, run_id: str, backend: str, write: bool = True,
                 tap: Tap | None = None) -> None:
        self.folder, self.sim, self.run_id, self.backend = folder, sim, run_id, backend
        self.write, self.tap = write, tap
        self._open: dict[str, EventRecorder] = {}
        self.settling = Settling()   # whether the group is stable, judged as the runner judges it
        folder.events.mkdir(parents=True, exist_ok=True)

    def clock(self) -> tuple[int, int]:
        return T0_NS + round(self.sim.now_ms * 1_000_000), T0_MS + int(self.sim.now_ms)

    def of(self, process: str) -> EventRecorder:
        """The recorder of one process (a member host, `runner`, `coordinator-0`)."""
        if process not in self._open:
            path = Path(self.folder.events) / f"{process}.jsonl" if self.write else None
            self._open[process] = _Watched(path, run_id=self.run_id, backend=self.backend, process=f"sim:{process}",
                                           clock=self.clock, settling=self.settling, tap=self.tap, buffered=True)
        return self._open[process]

    def close(self) -> None:
        for recorder in self._open.values():
            recorder.close()
        self._open.clear()


def member_closed(member) -> None:
    """A clean close complete: the member's `member_stopped`, then whatever waited for it (a restart's new process,
    which the runner starts only once the old one has exited)."""
    member.recorder.emit(ev.MEMBER_STOPPED, member.name, reason="close")
    if member.on_stopped is not None:
        member.on_stopped()
