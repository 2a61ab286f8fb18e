"""Which call carries out each timeline action: a `start` and, for a timed fault, a `heal`.

A handler acts on the run (`experiments.run.runner.Run`): its member faults (`run.members`), its
proxies (`run.proxies`) and its server faults (`run.servers`), and returns when the effect was
observed; the run's fault history writes the events. What each action is (its fields, its span, what
undoes it) is declared in experiments/scenario/actions.py; every action there except the ones the
resolver expands has exactly one handler here. Registering two handlers for one action is an error,
so actions compose by name without silently replacing each other.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from experiments.faults.members import MemberFaults
from experiments.faults.proxy import Toxic
from experiments.faults.server import ServerFaults
from experiments.scenario.actions import ACTIONS, Action, Direction, LinkFault, Span
from experiments.scenario.model import Step
from rebalance import events as ev

Handler = Callable[[Any, Step], Awaitable[int | None]]   # (run, step) -> observed monotonic ns or None


@dataclass(frozen=True)
class ActionHandler:
    action: Action
    start: Handler
    heal: Handler | None = None


_HANDLERS: dict[Action, ActionHandler] = {}


def register(handler: ActionHandler) -> None:
    if handler.action in _HANDLERS:
        raise ValueError(f"action {handler.action.value!r} already has a handler")
    _HANDLERS[handler.action] = handler


def handler_for(action: Action | str) -> ActionHandler:
    try:
        return _HANDLERS[Action(action)]
    except (KeyError, ValueError):
        raise ValueError(f"no handler for action {action!r}") from None


def names() -> list[str]:
    return sorted(action.value for action in _HANDLERS)


# ---- membership changes and marks


async def _join(run, step: Step) -> int | None:
    """A join wave: every member due at the step's time, or at its declared offset (`spread_s`)."""
    now = time.monotonic_ns()
    due = [now + int(offset * 1e9) for offset in step.start_offsets_s]
    run.recorder.emit(ev.JOIN_WAVE, fault_id=step.fault_id, members=[run.member_id(name) for name in step.targets],
                      due_ns=due, armed=all(run.members.state_of(name) == "armed" for name in step.targets))
    await run.members.start(step.targets, due_ns=due)
    return None


async def _scale(run, step: Step) -> int | None:
    if all(run.members.started(name) for name in step.targets):   # shrinking: they are running
        return await run.members.leave(step.targets)
    return await _join(run, step)


async def _phase(run, step: Step) -> int | None:
    return None


# ---- member faults


def _members(method: Callable[[MemberFaults, tuple[str, ...]], Awaitable[int | None]]) -> Handler:
    """A handler calling `method` of the run's MemberFaults on the step's targets."""
    async def handler(run, step: Step) -> int | None:
        return await method(run.members, step.targets)

    return handler


# ---- link faults


def toxic_of(step: Step) -> Toxic:
    params = step.params
    return Toxic(
        kind=LinkFault(params["fault"]),
        direction=Direction(params.get("direction", "both")),
        latency_ms=float(params.get("latency_ms", 0.0)),
        jitter_ms=float(params.get("jitter_ms", 0.0)),
        rate_kbps=params.get("rate_kbps"),
    )


async def _link(run, step: Step) -> int | None:
    for member in step.targets:
        run.proxies.set_toxic(member, step.link, toxic_of(step))
    return None   # the effect is seen later, when traffic meets the toxic; the heal reports it


async def _link_heal(run, step: Step) -> int | None:
    observed = [run.proxies.observed_ns(member, step.link) for member in step.targets]
    for member in step.targets:
        run.proxies.set_toxic(member, step.link, None)
    observed = [value for value in observed if value is not None]
    return min(observed) if observed else None


# ---- servers


def _server(method: Callable[[ServerFaults, int], Awaitable[int | None]]) -> Handler:
    """A handler calling `method` of the run's ServerFaults on the step's one target (`zk-1`, `broker-0`)."""
    async def handler(run, step: Step) -> int | None:
        return await method(run.servers, int(step.targets[0].rsplit("-", 1)[1]))

    return handler


for _handler in (
    ActionHandler(Action.JOIN, _join),
    ActionHandler(Action.SCALE, _scale),
    ActionHandler(Action.PHASE, _phase),
    ActionHandler(Action.LEAVE, _members(MemberFaults.leave)),
    ActionHandler(Action.CRASH, _members(MemberFaults.crash)),
    ActionHandler(Action.PAUSE, _members(MemberFaults.pause), _members(MemberFaults.resume)),
    ActionHandler(Action.RESTART, _members(MemberFaults.restart)),
    ActionHandler(Action.LINK, _link, _link_heal),
    ActionHandler(Action.ZK_KILL, _server(ServerFaults.zk_kill)),
    ActionHandler(Action.ZK_RESTART, _server(ServerFaults.zk_restart)),
    ActionHandler(Action.ZK_PAUSE, _server(ServerFaults.zk_pause), _server(ServerFaults.zk_resume)),
    ActionHandler(Action.ZK_ISOLATE, _server(ServerFaults.zk_isolate), _server(ServerFaults.zk_heal)),
    ActionHandler(Action.BROKER_KILL, _server(ServerFaults.broker_kill)),
    ActionHandler(Action.BROKER_RESTART, _server(ServerFaults.broker_restart)),
    ActionHandler(Action.COORDINATOR_KILL, _server(ServerFaults.broker_kill)),
    ActionHandler(Action.COORDINATOR_RESTART, _server(ServerFaults.broker_restart)),
):
    register(_handler)

_missing = [spec.action.value for spec in ACTIONS.values() if spec.expands_into is None
            and (spec.action not in _HANDLERS or (spec.span is Span.TIMED) != (_HANDLERS[spec.action].heal is not None))]
if _missing:
    raise RuntimeError(f"actions without a start (or a heal, when timed): {_missing}")
