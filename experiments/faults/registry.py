"""What each timeline action does, by name: one handler per action with a `start` and, for actions
with a duration, a `heal`.

A handler acts on the run (`experiments.runner.Run`: its member hosts, proxies, ensemble and
cluster) and returns what it observed; the runner writes the fault events. Registering two handlers
under one name is an error, so actions compose by name without silently replacing each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from experiments.faults.proxy import Toxic
from experiments.scenario import Direction, LinkFault, Step

Handler = Callable[[Any, Step], Awaitable[int | None]]   # (run, step) -> observed monotonic ns or None


@dataclass(frozen=True)
class ActionHandler:
    name: str
    start: Handler
    heal: Handler | None = None
    is_fault: bool = True          # False: a membership change or a phase mark, written as a phase event


_HANDLERS: dict[str, ActionHandler] = {}


def register(handler: ActionHandler) -> None:
    if handler.name in _HANDLERS:
        raise ValueError(f"action {handler.name!r} already has a handler")
    _HANDLERS[handler.name] = handler


def handler_for(action: str) -> ActionHandler:
    try:
        return _HANDLERS[action]
    except KeyError:
        raise ValueError(f"no handler for action {action!r}") from None


def names() -> list[str]:
    return sorted(_HANDLERS)


# ---- membership changes


async def _join(run, step: Step) -> int | None:
    await run.start_members(step.targets)
    return None


async def _leave(run, step: Step) -> int | None:
    return await run.stop_members(step.targets)


async def _scale(run, step: Step) -> int | None:
    if all(run.member_started(name) for name in step.targets):   # shrinking: they are running
        return await run.stop_members(step.targets)
    await run.start_members(step.targets)
    return None


async def _phase(run, step: Step) -> int | None:
    return None


# ---- member faults


async def _crash(run, step: Step) -> int | None:
    """SIGKILL the targets' host processes; for part of a shared host, the runner emulates the crash
    through the members' links and the host's control channel (`step.emulated`)."""
    return await run.crash_members(step.targets)


async def _pause(run, step: Step) -> int | None:
    return await run.pause_members(step.targets)


async def _resume(run, step: Step) -> int | None:
    return await run.resume_members(step.targets)


async def _restart(run, step: Step) -> int | None:
    return await run.restart_members(step.targets)


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
    return None   # the effect is seen later, when traffic meets the toxic: see fault_stopped


async def _link_heal(run, step: Step) -> int | None:
    observed = [run.proxies.observed_ns(member, step.link) for member in step.targets]
    for member in step.targets:
        run.proxies.set_toxic(member, step.link, None)
    observed = [value for value in observed if value is not None]
    return min(observed) if observed else None


# ---- servers


def _index(target: str) -> int:
    return int(target.rsplit("-", 1)[1])


async def _zk_kill(run, step: Step) -> int | None:
    return await run.servers.zk_kill(_index(step.targets[0]))


async def _zk_restart(run, step: Step) -> int | None:
    return await run.servers.zk_restart(_index(step.targets[0]))


async def _zk_pause(run, step: Step) -> int | None:
    return await run.servers.zk_pause(_index(step.targets[0]))


async def _zk_resume(run, step: Step) -> int | None:
    return await run.servers.zk_resume(_index(step.targets[0]))


async def _zk_isolate(run, step: Step) -> int | None:
    return await run.servers.zk_isolate(_index(step.targets[0]))


async def _zk_heal(run, step: Step) -> int | None:
    return await run.servers.zk_heal(_index(step.targets[0]))


async def _broker_kill(run, step: Step) -> int | None:
    return await run.servers.broker_kill(_index(step.targets[0]))


async def _broker_restart(run, step: Step) -> int | None:
    return await run.servers.broker_restart(_index(step.targets[0]))


for _handler in (
    ActionHandler("join", _join, is_fault=False),
    ActionHandler("scale", _scale, is_fault=False),
    ActionHandler("phase", _phase, is_fault=False),
    ActionHandler("leave", _leave),
    ActionHandler("crash", _crash),
    ActionHandler("pause", _pause, _resume),
    ActionHandler("restart", _restart),
    ActionHandler("link", _link, _link_heal),
    ActionHandler("zk_kill", _zk_kill),
    ActionHandler("zk_restart", _zk_restart),
    ActionHandler("zk_pause", _zk_pause, _zk_resume),
    ActionHandler("zk_isolate", _zk_isolate, _zk_heal),
    ActionHandler("broker_kill", _broker_kill),
    ActionHandler("broker_restart", _broker_restart),
    ActionHandler("coordinator_kill", _broker_kill),
    ActionHandler("coordinator_restart", _broker_restart),
):
    register(_handler)
