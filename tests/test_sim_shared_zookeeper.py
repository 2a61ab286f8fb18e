"""The shared ZooKeeper server (`ZooKeeper(shared=True)`, `./lab sim --shared-zookeeper`): the server's time
shared among the requests in it, and a 0.8 attempt's registration reads played as one request. It must charge a
herd as the request-by-request model does, with far fewer events."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.scenario import load
from experiments.sim.kernel import Simulation
from experiments.sim.play import simulate
from experiments.sim.validate import change_costs
from experiments.sim.zookeeper import SharedServer
from rebalance.events import read_events

HERD = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "herd.toml"


def _finishes(arrivals: list[tuple[float, float]]) -> list[float]:
    """Each job's finish time, for jobs of (arrival ms, work ms) on a shared server."""
    sim, done = Simulation(1), {}
    server = SharedServer(sim)
    for index, (at, work) in enumerate(arrivals):
        sim.at(at, lambda index=index, work=work: server.add(work, lambda index=index: done.setdefault(index, sim.now_ms)))
    sim.run_until(10_000)
    return [done[index] for index in range(len(arrivals))]


def test_a_request_alone_takes_its_own_work_and_two_at_once_share_the_server():
    assert _finishes([(0, 1.0)]) == [1.0]
    # Both at rate 1/2 until the first has had its 1 ms (at 2 ms); the second then has the server to itself.
    assert _finishes([(0, 1.0), (0, 3.0)]) == pytest.approx([2.0, 4.0])
    # One at 0 alone for 1 ms (1 of its 4 done), then shared with one arriving at 1 ms until that one's 1 ms.
    assert _finishes([(0, 4.0), (1, 1.0)]) == pytest.approx([5.0, 3.0])


def _legacy_herd(tmp_path: Path, members: int, partitions: int, shared: bool):
    scenario = load(HERD, overrides=[f"group.members={members}", f"topics.t0.partitions={partitions}"])
    return simulate(scenario, "legacy", tmp_path / ("shared" if shared else "each"), seed=3, shared_zookeeper=shared)


@pytest.mark.parametrize(("members", "partitions"), [(20, 320), (40, 80), (100, 200)])
def test_the_shared_server_charges_the_herd_as_the_request_by_request_model(tmp_path, members, partitions):
    each, shared = (_legacy_herd(tmp_path, members, partitions, flag) for flag in (False, True))
    by_request, by_share = change_costs(each.path), change_costs(shared.path)
    assert sorted(by_share) == sorted(by_request) == ["join", "leave"]
    for kind, cost in by_request.items():
        assert by_share[kind].moved == cost.moved
        assert abs(by_share[kind].requests - cost.requests) <= 0.02 * cost.requests, (kind, by_share, by_request)
    lines = {name: sum(1 for path in folder.event_files() for _ in read_events(path))
             for name, folder in (("each", each), ("shared", shared))}
    assert lines["shared"] < lines["each"]
    many = [event for path in shared.event_files() for event in read_events(path) if event.get("op") == "get_many"]
    assert many and all(event["count"] >= 1 for event in many)
    assert shared.record().scenario.resolved["zookeeper"] == "shared"


def test_the_shared_server_is_refused_where_it_does_not_apply(tmp_path):
    result = CliRunner().invoke(app, ["sim", "herd", "--backend", "classic", "--shared-zookeeper",
                                      "--out", str(tmp_path / "sims")])
    assert result.exit_code == 2
    assert "--shared-zookeeper" in result.output
    assert not (tmp_path / "sims").exists()
