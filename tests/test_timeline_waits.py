"""A timeline entry that waits for a stable group (`after = "stable"`, `timeout`), and each generation's
default strategy (`strategy = "default"`).

- the loader takes `after` and `timeout` together and the resolver hands them to the steps;
- `Settling` calls a group stable only when every member that should run is up, done rebalancing and the
  partitions are owned once among them, with nothing moving for a moment: a newcomer whose join is still
  unanswered keeps it unstable;
- the runner holds such a step back until then (at most its timeout), moves the rest of the timeline back
  by the wait, and writes in the step's event how it went;
- "default" is range on legacy and classic, uniform on kip848, and the herd scenarios run it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from experiments.run.client_processes import producing_room_s
from experiments.run.member_configs import check_member_settings, member_config
from experiments.run.runner import Run, RunOptions
from experiments.run.settling import Settling, running_before
from experiments.scenario import ScenarioError, load, loads, resolve
from experiments.scenario.model import on_backend
from rebalance import events as ev
from rebalance.backends import profile

TINY = """\
name = "tiny"
seed = 1
duration = {duration}

[cluster]
zookeeper_nodes = 0
brokers = 1

[[topics]]
name = "t0"
partitions = 4

[group]
members = 2
strategy = "{strategy}"

[[timeline]]
at = 0.2
action = "join"

[[timeline]]
at = 0.4
action = "leave"
member = "last"
{wait}
"""
WAIT = 'after = "stable"\ntimeout = {timeout}\n'


def tiny(*, wait: str = WAIT.format(timeout=5), strategy: str = "range", duration: float = 1.0, **kwargs):
    return loads(TINY.format(wait=wait, strategy=strategy, duration=duration),
                 overrides=[f'backends=["{kwargs.get("backend", "classic")}"]'])


# -- the file ------------------------------------------------------------------------------------

def test_a_leave_that_waits_for_a_stable_group_carries_the_wait_to_its_step():
    steps = resolve(tiny()).steps
    leave = next(step for step in steps if step.action == "leave")
    join = next(step for step in steps if step.action == "join")
    assert leave.params == {"after": "stable", "timeout": 5}
    assert join.params == {}


@pytest.mark.parametrize("wait, problem", [
    ('after = "stable"\n', 'after = "stable" needs a timeout'),
    ("timeout = 5\n", 'a timeout bounds a wait: give after = "stable"'),
    ('after = "quiet"\ntimeout = 5\n', "unknown value 'quiet'"),
    ('after = "stable"\ntimeout = 0\n', "must be positive"),
])
def test_a_wait_is_after_stable_with_a_positive_timeout(wait, problem):
    with pytest.raises(ScenarioError) as error:
        tiny(wait=wait)
    assert problem in str(error.value)


# -- each generation's default strategy -----------------------------------------------------------

def test_each_generation_assigns_with_its_own_default():
    assert {name: profile(name).default_strategy for name in ("legacy", "classic", "kip848")} == \
        {"legacy": "range", "classic": "range", "kip848": "uniform"}
    scenario = loads(TINY.format(wait="", strategy="default", duration=1.0).replace("zookeeper_nodes = 0",
                                                                                    "zookeeper_nodes = 1"))
    assert scenario.group.strategy == "default"
    assert {backend: on_backend(scenario, backend).group.strategy for backend in scenario.backends} == \
        {"kip848": "uniform", "legacy": "range", "classic": "range"}
    for backend in scenario.backends:   # each backend's own check takes it, and its members are told its name
        check_member_settings(scenario, profile(backend))
        assert member_config(scenario, profile(backend), "m000", "127.0.0.1:1").strategy == \
            profile(backend).default_strategy
    assert on_backend(tiny(strategy="range"), "kip848").group.strategy == "range"   # a named strategy stays


@pytest.mark.parametrize("name", ["demo-herd", "herd", "herd-1000"])
def test_the_herd_scenarios_run_each_generation_as_it_ships_and_leave_after_the_join_is_stable(name):
    from experiments.cli.run import find_scenario

    scenario = load(find_scenario(name), overrides=["group.members=8"])
    assert scenario.group.strategy == "default"
    leave = next(step for step in resolve(scenario).steps if step.action == "leave")
    assert leave.params["after"] == "stable" and leave.params["timeout"] > 0


# -- stable, as the members' events tell it -------------------------------------------------------

def _feed(settling: Settling, t_s: float, kind: str, member: str, **fields) -> None:
    settling.feed({"type": kind, "member": member, "ts_ns": int(t_s * 1e9), **fields})


PARTITIONS = {"t0-0", "t0-1", "t0-2", "t0-3"}


def _stable_pair() -> Settling:
    settling = Settling()
    for member, owned in (("a", ["t0-0", "t0-1"]), ("b", ["t0-2", "t0-3"])):
        _feed(settling, 1.0, ev.MEMBER_STARTED, member)
        _feed(settling, 1.1, ev.REBALANCE_STARTED, member)
        _feed(settling, 1.5, ev.PARTITIONS_ASSIGNED, member, partitions=owned)
        _feed(settling, 1.5, ev.REBALANCE_COMPLETED, member)
    return settling


def test_a_group_is_stable_when_every_member_is_done_and_every_partition_owned_once_for_a_moment():
    settling = _stable_pair()
    assert settling.stable(["a", "b"], PARTITIONS, now_ns=int(4e9), quiet_ns=int(2e9))
    assert not settling.stable(["a", "b"], PARTITIONS, now_ns=int(2e9), quiet_ns=int(2e9))   # not quiet yet


def test_a_newcomer_whose_join_is_unanswered_keeps_the_group_unstable():
    settling = _stable_pair()
    _feed(settling, 5.0, ev.MEMBER_STARTED, "c")
    _feed(settling, 5.0, ev.REBALANCE_STARTED, "c")
    late = int(20e9)
    assert not settling.stable(["a", "b", "c"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))
    assert "1 not done rebalancing" in settling.why_not(["a", "b", "c"], PARTITIONS)
    # the old members rejoin and give partitions up; the newcomer takes one: done when all are
    _feed(settling, 6.0, ev.REBALANCE_STARTED, "a")
    _feed(settling, 6.1, ev.PARTITIONS_REVOKED, "a", partitions=["t0-1"])
    _feed(settling, 6.2, ev.REBALANCE_COMPLETED, "a")
    assert not settling.stable(["a", "b", "c"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))   # t0-1 unowned
    _feed(settling, 6.3, ev.PARTITIONS_ASSIGNED, "c", partitions=["t0-1"])
    _feed(settling, 6.3, ev.REBALANCE_COMPLETED, "c")
    assert settling.stable(["a", "b", "c"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))
    assert not settling.stable(["a", "b", "c", "d"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))   # d not up


def _coordinator(settling: Settling, t_s: float, event: str, member: str = "", node: int = 0, **fields) -> None:
    settling.feed({"type": ev.COORDINATOR_EVENT, "member": member, "ts_ns": int(t_s * 1e9), "group": "g",
                   "node": node, "protocol": "consumer", "event": event, **fields})


def test_a_kip848_newcomer_done_with_nothing_waits_for_its_coordinator_to_have_the_group_stable():
    """Its first heartbeat brings an empty assignment (b still owns what the new target gives it) and every
    partition is owned once: the members' events say stable. The coordinator has the group Reconciling until b
    revokes, at b's next heartbeat, and c takes the partitions; only then is the group stable."""
    settling = _stable_pair()
    for member, epoch in (("a", 1), ("b", 1)):
        _coordinator(settling, 1.5, "member_state", member, state="stable", member_epoch=epoch)
    _coordinator(settling, 1.5, "target_assignment", assignment_epoch=1)
    _coordinator(settling, 1.5, "group_epoch", "a", group_epoch=1, reason="member joined")
    _feed(settling, 5.0, ev.MEMBER_STARTED, "c")
    _feed(settling, 5.0, ev.REBALANCE_STARTED, "c")
    _coordinator(settling, 5.0, "group_epoch", "c", group_epoch=2, reason="member joined")
    _coordinator(settling, 5.0, "target_assignment", assignment_epoch=2)
    _coordinator(settling, 5.0, "member_state", "c", state="unreleased_partitions", member_epoch=2)
    _feed(settling, 5.0, ev.REBALANCE_COMPLETED, "c")
    late = int(20e9)
    assert not settling.stable(["a", "b", "c"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))
    assert "coordinator: g: Reconciling" in settling.why_not(["a", "b", "c"], PARTITIONS)
    for member in ("a", "b"):
        _coordinator(settling, 7.0, "member_state", member, state="stable", member_epoch=2)
    _coordinator(settling, 8.0, "member_state", "c", state="stable", member_epoch=2)
    assert settling.stable(["a", "b", "c"], PARTITIONS, now_ns=late, quiet_ns=int(2e9))
    # a member leaving moves the group epoch: assigning until a member that stays heartbeats
    _coordinator(settling, 9.0, "group_epoch", "c", group_epoch=3, reason="member left")
    assert settling.unsettled_groups() == ["g: Assigning"]
    _coordinator(settling, 9.5, "target_assignment", assignment_epoch=3)
    for member in ("a", "b"):
        _coordinator(settling, 9.5, "member_state", member, state="stable", member_epoch=3)
    assert settling.unsettled_groups() == []
    # a coordinator that moves: the group is known again from what the new one records
    _coordinator(settling, 10.0, "member_state", "a", state="unrevoked_partitions", member_epoch=3)
    _coordinator(settling, 10.5, "loaded", node=1, group_epoch=3)
    assert settling.unsettled_groups() == []


def test_the_members_a_step_waits_for_are_those_the_schedule_has_running_then():
    schedule = resolve(tiny())
    assert running_before(schedule, 0) == ["m000", "m001"]
    assert running_before(schedule, 1) == ["m000", "m001", "m002"]   # before the leave: the newcomer too


# -- the runner's wait ----------------------------------------------------------------------------

def _run(tmp_path, scenario) -> tuple[Run, list]:
    run = Run(scenario, RunOptions(backend="classic", run_dir=tmp_path, progress=False), resolve(scenario))
    applied: list = []

    async def nothing(*args, **kwargs) -> None:
        return None

    async def apply(step) -> None:
        applied.append((time.monotonic_ns(), step))

    run.enter_phase = nothing
    run.clients.start_producer = nothing
    run.write_lock = lambda *args, **kwargs: None
    run.apply = apply
    return run, applied


def _settle(run: Run, members: list[str]) -> None:
    now = time.monotonic_ns() / 1e9 - 10
    for index, member in enumerate(members):
        owned = sorted(PARTITIONS)[index::len(members)]
        _feed(run.progress.settling, now, ev.MEMBER_STARTED, member)
        _feed(run.progress.settling, now, ev.PARTITIONS_ASSIGNED, member, partitions=owned)
        _feed(run.progress.settling, now, ev.REBALANCE_COMPLETED, member)


def test_the_runner_takes_the_leave_only_once_the_group_is_stable_and_moves_the_rest_back(tmp_path):
    scenario = tiny(wait=WAIT.format(timeout=60))
    run, applied = _run(tmp_path, scenario)
    settled_at: list[int] = []

    async def later() -> None:   # the join's rebalance ends well after the leave's scheduled 0.4 s
        await asyncio.sleep(1.0)
        _settle(run, ["m000", "m001", "m002"])
        settled_at.append(time.monotonic_ns())

    async def main() -> None:
        run.progress.poll = lambda: None
        await asyncio.gather(run.play(), later())

    asyncio.run(main())
    (_, join), (left_at, leave) = applied[0], applied[1]
    assert join.action == "join" and "waited_s" not in join.params
    assert leave.action == "leave" and left_at >= settled_at[0]
    assert leave.params["stable"] is True and leave.params["waited_s"] >= 0.5
    assert run.late_ns >= 0.5e9   # the timeline's end moved back by the wait


def test_a_group_never_stable_lets_the_step_go_on_its_timeout_and_says_so(tmp_path):
    run, applied = _run(tmp_path, tiny(wait=WAIT.format(timeout=0.5)))

    async def main() -> None:
        run.progress.poll = lambda: None
        await run.play()

    asyncio.run(main())
    leave = applied[1][1]
    assert leave.params["stable"] is False and leave.params["waited_s"] >= 0.5
    assert "3 of 3 members not up" in leave.params["unstable"]


def test_the_producer_produces_until_the_timelines_end_however_late_the_waits_made_it(tmp_path):
    """Each wait moves the timeline's end back; a producer with no duration of its own must cover it, or the
    phases after a long wait would have no records to measure."""
    scenario = tiny(wait=WAIT.format(timeout=60))
    assert producing_room_s(scenario, resolve(scenario)) == scenario.duration + 60 + 10
    run, _ = _run(tmp_path, scenario)
    stopped_at: list[int] = []

    class Producer:
        async def stop(self, timeout_s: float) -> int:
            stopped_at.append(time.monotonic_ns())
            return 0

    async def later() -> None:
        await asyncio.sleep(1.0)
        _settle(run, ["m000", "m001", "m002"])

    async def main() -> None:
        run.progress.poll = lambda: None
        run.clients.producer = Producer()
        await asyncio.gather(run.play(), later())

    asyncio.run(main())
    assert run.late_ns >= 0.5e9
    assert stopped_at and stopped_at[0] >= run.t0_ns + run.late_ns + int(scenario.duration * 1e9)
