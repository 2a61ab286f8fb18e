"""The fault history on its own: which fault_stopped each fault gets, and when, by the action table."""

from __future__ import annotations

import asyncio

from experiments.faults.history import FaultHistory
from experiments.scenario import Step
from experiments.scenario.actions import ACTIONS, SILENCING_KINDS, Action, Span
from rebalance.events import EventRecorder, read_events


def record(tmp_path, steps_and_times: list[tuple[Step, int | None]], *, final_heal_ns: int = 999):
    path = tmp_path / "runner.jsonl"
    recorder = EventRecorder(path, process="runner")
    history = FaultHistory(recorder, member_id=lambda name: f"g_{name}")

    async def play() -> None:
        for step, observed in steps_and_times:
            async def effect(value=observed) -> int | None:
                return value

            await (history.heal if step.op == "heal" else history.start)(step, effect)
        history.final_heal(final_heal_ns)

    asyncio.run(play())
    recorder.close()
    return list(read_events(path)), history


def step(fault_id: str, action: Action, targets: tuple[str, ...], *, op: str = "start", **fields) -> Step:
    return Step(at=1.0, fault_id=fault_id, op=op, action=action.value, targets=targets, line=1, **fields)


def stops(events: list[dict]) -> dict[str, dict]:
    return {event["fault_id"]: event for event in events if event["type"] == "fault_stopped"}


def test_a_restart_closes_the_crash_it_undoes_and_itself_at_once(tmp_path):
    events, history = record(tmp_path, [
        (step("f001", Action.CRASH, ("m001",)), 100),
        (step("f002", Action.RESTART, ("m001",)), 200),
    ])
    stopped = stops(events)
    assert stopped["f001"]["healed_by"] == "f002"
    assert (stopped["f001"]["observed_ts_ns"], stopped["f001"]["healed_ts_ns"]) == (100, 200)
    assert (stopped["f002"]["observed_ts_ns"], stopped["f002"]["healed_ts_ns"]) == (200, 200)
    assert stopped["f001"]["member_ids"] == ["g_m001"]
    assert history.active == {}


def test_a_link_fault_is_observed_by_its_proxy_and_a_kill_stays_until_the_final_heal(tmp_path):
    link = dict(link="coord", params={"fault": "partition", "duration": 2.0})
    events, _ = record(tmp_path, [
        (step("f001", Action.LINK, ("m000",), **link), None),
        (step("f002", Action.BROKER_KILL, ("broker-0",)), 150),
        (step("f001", Action.LINK, ("m000",), op="heal", **link), 120),
    ], final_heal_ns=999)
    stopped = stops(events)
    assert stopped["f001"]["kind"] == "partition" and stopped["f001"]["observed_ts_ns"] == 120
    assert stopped["f002"]["healed_by"] == "final-heal"
    assert (stopped["f002"]["observed_ts_ns"], stopped["f002"]["healed_ts_ns"]) == (150, 999)
    assert stopped["f002"]["member_ids"] == []


def test_the_table_is_consistent():
    for spec in ACTIONS.values():
        if spec.span is Span.TIMED:
            assert "duration" in spec.required, spec.action
        for undone in spec.undoes:
            assert ACTIONS[undone].span is Span.UNTIL_UNDONE, (spec.action, undone)
    assert SILENCING_KINDS == ("crash",)
