"""The warm-up's host processes sharing the cores as they come up, and the members beginning with their host."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from experiments.scenario import load
from experiments.sim.host_startup import (
    HOST_START_CPU_MS,
    HOST_START_SPREAD,
    MEMBER_START_MS,
    ready_after_ms,
    start_work_ms,
)
from experiments.sim.play import simulate
from rebalance import events as ev
from rebalance.events import read_events

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def test_as_many_processes_as_cores_each_come_up_after_its_own_work():
    assert ready_after_ms([700.0, 900.0], cores=2) == [700.0, 900.0]


def test_more_processes_than_cores_share_them_until_the_quickest_is_up():
    # three on two cores: two thirds of a core each until the first is up (after 1.5 x its work), then a core each
    assert ready_after_ms([900.0, 600.0, 1000.0], cores=2) == pytest.approx([1200.0, 900.0, 1300.0])


def test_equal_processes_come_up_together_after_their_share():
    assert ready_after_ms([800.0] * 10, cores=2) == pytest.approx([4000.0] * 10)


def test_each_hosts_work_is_drawn_from_the_seed_within_the_spread():
    work = start_work_ms(random.Random(7), 50)
    assert work == start_work_ms(random.Random(7), 50)
    low, high = HOST_START_CPU_MS * (1 - HOST_START_SPREAD), HOST_START_CPU_MS * (1 + HOST_START_SPREAD)
    assert all(low <= w <= high for w in work) and len(set(work)) == 50


@pytest.mark.parametrize("backend", ["legacy", "classic", "kip848"])
def test_the_initial_members_begin_as_their_hosts_come_up_not_at_once(tmp_path, backend):
    scenario = load(SCENARIOS / "split-brain-d.toml")
    run = simulate(scenario, backend, tmp_path / "run", seed=3)
    events = [e for path in run.event_files() for e in read_events(path)]
    warmup = next(e["ts_ns"] for e in events if e["type"] == ev.PHASE and e.get("name") == "warmup")
    started = sorted((e["ts_ns"] - warmup) / 1e6 for e in events if e["type"] == ev.MEMBER_STARTED)
    assert len(started) == scenario.group.members == 3
    # three hosts on two cores: none before the quickest's work alone, each a different moment, all within 1.5 x
    # the slowest's work
    assert started[0] >= HOST_START_CPU_MS * (1 - HOST_START_SPREAD)
    assert started[-1] <= 1.5 * HOST_START_CPU_MS * (1 + HOST_START_SPREAD) + 1
    assert len(set(started)) == 3


def test_the_members_of_one_host_begin_one_after_another_once_it_is_up(tmp_path):
    scenario = load(SCENARIOS / "herd.toml", overrides=["group.members=10", "group.per_process=5"])
    run = simulate(scenario, "classic", tmp_path / "run", seed=1)
    events = [e for path in run.event_files() for e in read_events(path)]
    timeline = next(e["ts_ns"] for e in events if e["type"] == ev.PHASE and e.get("name") == "timeline")
    started: dict[str, list[float]] = {}
    for e in events:
        if e["type"] == ev.MEMBER_STARTED and e["ts_ns"] < timeline:   # the warm-up's
            started.setdefault(e["process"], []).append(e["ts_ns"] / 1e6)
    assert len(started) == 2
    for times in started.values():
        gaps = [b - a for a, b in zip(times[:4], times[1:5], strict=True)]
        assert gaps == pytest.approx([MEMBER_START_MS] * 4)


def test_messages_wait_while_more_hosts_start_than_there_are_cores_and_keep_their_order():
    from experiments.sim.kernel import Simulation
    from experiments.sim.network import (
        LOADED_WAIT_MS_PER_PROCESS,
        NETWORK_JITTER_MS,
        NETWORK_ONE_WAY_MS,
        Network,
    )

    sim = Simulation(3)
    network = Network(sim)
    network.starting([1_000.0] * 20, cores=2)
    loaded = [network.delay_ms() for _ in range(2_000)]
    mean_wait = sum(loaded) / len(loaded) - NETWORK_ONE_WAY_MS - NETWORK_JITTER_MS / 2
    assert mean_wait == pytest.approx(LOADED_WAIT_MS_PER_PROCESS * 18, rel=0.1)   # 20 starting, 18 beyond the cores

    arrived: list[int] = []
    for index in range(50):   # one link: the waits drawn differ, the messages arrive in the order sent
        network.send("m", lambda index=index: arrived.append(index))
    sim.run_until(900.0)
    assert arrived == list(range(50))

    sim.run_until(1_000.5)    # every host up: loopback again
    assert all(network.delay_ms() <= NETWORK_ONE_WAY_MS + NETWORK_JITTER_MS for _ in range(100))
