"""The fault history of a run: every fault as a fault_started and a fault_stopped event, in the same
event stream as the members' own events.

It keeps what is in force and when each fault's effect was observed, and closes each fault exactly
once: at its heal (a timed fault), at once (an instant one), by the action that undoes it (a
restart after a crash or a kill, `healed_by` naming it), or at the final heal before the run
settles (`healed_by = "final-heal"`). Which of these applies to an action: experiments/scenario/actions.py.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from experiments.scenario.actions import Span, Target, spec_of
from experiments.scenario.model import Step
from rebalance import events as ev
from rebalance.events import EventRecorder

Effect = Callable[[], Awaitable[int | None]]   # carries a step out; returns when its effect was observed

# The fields every fault event carries (the start's fields are repeated on the stop).
FAULT_KEYS = ("fault_id", "kind", "action", "target", "targets", "member_ids", "link", "params", "emulated",
              "at_s", "line")


def fault_kind(step: Step) -> str:
    """A fault event's `kind`: the action, or for a link fault the fault itself (`partition`, ...)."""
    return str(step.params["fault"]) if spec_of(step.action).target is Target.LINK else step.action


class FaultHistory:
    def __init__(self, recorder: EventRecorder, member_id: Callable[[str], str]) -> None:
        self.recorder = recorder
        self.member_id = member_id                 # the id a member's own events carry
        self.active: dict[str, dict] = {}          # fault_id -> its fault_started event, while in force
        self.observed: dict[str, int | None] = {}  # fault_id -> when its effect was seen

    def fields(self, step: Step) -> dict:
        members = [self.member_id(target) for target in step.targets] if spec_of(step.action).hits_members else []
        return {
            "fault_id": step.fault_id, "kind": fault_kind(step), "action": step.action,
            "target": ",".join(step.targets), "targets": list(step.targets), "member_ids": members,
            "link": step.link, "params": dict(step.params), "emulated": step.emulated, "at_s": step.at,
            "line": step.line,
        }

    def undone_by(self, step: Step) -> list[str]:
        """The faults in force on the step's targets that it ends (a restart ends a crash or a kill)."""
        undoes = {action.value for action in spec_of(step.action).undoes}
        return [fault_id for fault_id, event in self.active.items()
                if event["action"] in undoes and set(event["targets"]) & set(step.targets)]

    async def start(self, step: Step, effect: Effect) -> None:
        """Record the fault, carry it out, then close what it undid (and itself, if instant)."""
        undone = self.undone_by(step)
        self.active[step.fault_id] = self.recorder.emit(ev.FAULT_STARTED, **self.fields(step))
        observed = await effect()
        for fault_id in undone:
            self._close(fault_id, healed=observed, healed_by=step.fault_id)
        if spec_of(step.action).span is Span.INSTANT:
            self._stop(step, observed=observed, healed=observed)
        else:
            self.observed[step.fault_id] = observed

    async def heal(self, step: Step, effect: Effect) -> None:
        """Undo a timed fault and close it."""
        returned = await effect()
        if spec_of(step.action).seen_by_proxy:   # the proxy tells, at the heal, when traffic first met it
            self._stop(step, observed=returned, healed=time.monotonic_ns())
        else:
            self._stop(step, observed=self.observed.pop(step.fault_id, None), healed=returned)

    def final_heal(self, healed_ns: int) -> None:
        """Close every fault still in force; the runner has undone them all at `healed_ns`."""
        for fault_id in list(self.active):
            self._close(fault_id, healed=healed_ns, healed_by="final-heal")

    def _stop(self, step: Step, *, observed: int | None, healed: int | None) -> None:
        """`observed_ts_ns`: when the fault's effect was first seen; `healed_ts_ns`: when its undoing was."""
        self.active.pop(step.fault_id, None)
        self.recorder.emit(ev.FAULT_STOPPED, **self.fields(step), observed_ts_ns=observed, healed_ts_ns=healed)

    def _close(self, fault_id: str, *, healed: int | None, healed_by: str) -> None:
        started = self.active.pop(fault_id)
        self.recorder.emit(ev.FAULT_STOPPED, **{key: started[key] for key in FAULT_KEYS},
                           observed_ts_ns=self.observed.pop(fault_id, None), healed_ts_ns=healed, healed_by=healed_by)
