"""What the simulation plays: the backends, the timeline's actions and faults, and the settings it can honour. A
scenario asking for anything else is refused before anything is written (`NotSimulated`, naming what)."""

from __future__ import annotations

from experiments.scenario import resolve
from experiments.scenario.actions import Action
from experiments.scenario.model import Scenario, Step
from experiments.sim.server_faults import SERVER_FAULTS, fail_back_within_run, unplayed_server_faults
from rebalance.backends import GroupProtocol, backend_names, profile

# The backends this simulation plays so far (docs/simulation.md): the two coordinator protocols, and 0.8's members
# coordinating in ZooKeeper.
PROTOCOLS = (GroupProtocol.CLASSIC, GroupProtocol.CONSUMER)
SIMULATED = tuple(name for name in backend_names()
                  if profile(name).group_protocol in PROTOCOLS or profile(name).needs_zookeeper)
PLAYED = {Action.PHASE, Action.JOIN, Action.LEAVE, Action.CRASH, Action.SCALE, Action.RESTART, Action.ROLLING_RESTART}
# Split brain's member faults: a process paused (SIGSTOP), and the coordination link (a coordinator client's to its
# broker, a 0.8 member's to ZooKeeper) black-holed (the lab's proxy: held both ways, delivered after the heal).
MEMBER_FAULTS = {Action.PAUSE, Action.LINK}

class NotSimulated(ValueError):
    """The scenario asks for something the simulation does not play yet; the message names it."""


def check_playable(scenario: Scenario, backend: str, *, warm_start: bool, records: bool):
    """The scenario's schedule, when the simulation plays all of it on `backend` (a canonical name)."""
    if backend not in SIMULATED:
        raise NotSimulated(f"the simulation plays {', '.join(SIMULATED)} so far, not {backend}")
    schedule = resolve(scenario)
    coordinated = profile(backend).group_protocol in PROTOCOLS
    played = PLAYED | MEMBER_FAULTS | SERVER_FAULTS
    unplayed = sorted({step.action for step in schedule.steps} - {action.value for action in played})
    why = unplayed_server_faults(scenario, schedule, coordinated, backend, warm_start=warm_start)
    if unplayed or why:
        raise NotSimulated(f"scenario {scenario.name}: " + (why or f"the simulation does not play {', '.join(unplayed)} "
                                                                   f"on {backend} yet"))
    for step in schedule.steps:
        _check_member_fault(scenario, step)
        if not coordinated and step.action == Action.PAUSE.value and step.op == "start" \
                and _duration_ms(schedule, step) < scenario.group.session_timeout_ms:
            raise NotSimulated(f"scenario {scenario.name}, line {step.line}: a pause on {backend} shorter than the "
                               f"session ({scenario.group.session_timeout_ms} ms) is not simulated yet (kazoo's "
                               f"connection after a stopped process within the session is not modelled)")
    if warm_start and profile(backend).group_protocol is not GroupProtocol.CONSUMER:
        raise NotSimulated(f"a warm start is simulated for kip848 so far, not {backend}")
    if records and (why := records_refusal(scenario, schedule, backend)):
        raise NotSimulated(f"scenario {scenario.name}: {why}")
    return schedule


def records_refusal(scenario: Scenario, schedule, backend: str) -> str | None:
    """Why records cannot be played on this schedule and backend (a canonical name), or None: they can. On 0.8 the
    brokers' data path is the coordinators' (`server_faults`), so what it does not play there it does not play on 0.8
    either: a restarted broker that would lead again within the run."""
    if profile(backend).group_protocol in PROTOCOLS:
        return None
    why = fail_back_within_run(scenario, schedule)
    return None if why is None else f"records on {backend}: {why}"


def _check_member_fault(scenario: Scenario, step: Step) -> None:
    """A pause of a member's own process, or a black hole on its coordination link, both ways: what is played."""
    if step.action == Action.PAUSE.value and step.emulated:
        raise NotSimulated(f"scenario {scenario.name}, line {step.line}: a pause of a member that shares its host "
                           f"(emulated by the host) is not simulated yet; give it a process of its own "
                           f"(group.per_process = 1)")
    if step.action == Action.LINK.value:
        fault, direction = step.params.get("fault"), step.params.get("direction", "both")
        if step.link != "coord" or fault != "partition" or direction != "both":
            raise NotSimulated(f"scenario {scenario.name}, line {step.line}: of the link faults the simulation plays "
                               f"a partition of the coord link both ways so far, not {fault} of the {step.link} link "
                               f"({direction})")


def _duration_ms(schedule, step: Step) -> float:
    """How long a timed fault lasts: from its start to its heal (to the run's end when never healed)."""
    heal = next((other for other in schedule.steps if other.fault_id == step.fault_id and other.op == "heal"), None)
    return float("inf") if heal is None else (heal.at - step.at) * 1000
