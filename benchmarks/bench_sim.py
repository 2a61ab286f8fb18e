"""Benchmark: the simulation's speed, the herd at several group sizes.

    .venv/bin/python benchmarks/bench_sim.py [--backend classic] [--sizes 100 1000 10000] [--repeat 3]
    .venv/bin/python benchmarks/bench_sim.py --backend legacy --sizes 10 25 50 100 300 1000 3000 --shared-zookeeper
    .venv/bin/python benchmarks/bench_sim.py --backend kip848 --sizes 100 1000 10000 --warm-start

For each size N, plays `herd` (one join and one leave into a stable group of N) in virtual time, each repetition
a seed of its own in a fresh folder, and prints the wall time (median, min, max; the play and the collection of
the garbage it leaves), the events written and simulated seconds per wall second; then the backend's herd cost
model (experiments.summary.herd_model, the terms its profile names) fitted over every size, one fit per
repetition. The machine index line comes first: every figure below it is this machine's, as fast as that line
says. --warm-start begins each run with the group
loaded stable by its coordinator instead of N joins (kip848; docs/simulation.md, "Warm start").
0.8 plays with a timeline long enough for its changes to finish (`legacy_herd_at_scale`); --shared-zookeeper
plays it on the shared ZooKeeper server, each attempt's registrations one request (docs/simulation.md, "Speed").
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import time
from pathlib import Path

import pandas as pd

from experiments.run.machine import print_index
from experiments.scenario import load
from experiments.sim.play import simulate
from experiments.sim.validate import change_costs
from experiments.sim.zookeeper import SERVICE_MS
from experiments.summary.herd_model import fit_models

HERD = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "herd.toml"


def legacy_herd_at_scale(size: int) -> list[str]:
    """0.8's herd timeline made long enough for its changes to finish: each member reads the whole group on every
    attempt, so a change holds the ZooKeeper server for about N x N x 0.3 ms (45 minutes at N = 3,000; the
    warm-up 73). The auto-commit thread is off: its writes, which the herd's count leaves out, would be some 24
    million over the seven simulated hours at N = 3,000."""
    change_s = max(60, round(size * size * SERVICE_MS / 1000 * 1.2))
    return ["group.warmup_timeout=1000000", f"duration={2 * change_s + 300}", "group.legacy.auto.commit.enable=false",
            f'timeline=[{{at=0, action="phase", name="stable"}}, {{at=10, action="join"}}, '
            f'{{at={change_s}, action="leave", member="last", after="stable", timeout={change_s}}}]']


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="classic")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("runs/bench-sim"))
    parser.add_argument("--warm-start", action="store_true", help="the group loaded stable, not N joins (kip848)")
    parser.add_argument("--shared-zookeeper", action="store_true",
                        help="legacy: the ZooKeeper server shared, each attempt's registrations one request")
    args = parser.parse_args()
    print_index()
    rows = []
    for size in args.sizes:
        overrides = [f"group.members={size}", "group.per_process=25"]
        if args.backend == "legacy":
            overrides += legacy_herd_at_scale(size)
        scenario = load(HERD, overrides=overrides)
        walls, events, simulated = [], 0, 0.0
        for repetition in range(args.repeat):
            folder = args.dir / f"herd-{size}-{repetition}"
            shutil.rmtree(folder, ignore_errors=True)
            started = time.perf_counter()
            run = simulate(scenario, args.backend, folder, seed=repetition + 1, warm_start=args.warm_start,
                           shared_zookeeper=args.shared_zookeeper)
            gc.collect()   # the seed's own garbage: the next seed, or the command, pays for it otherwise
            walls.append(time.perf_counter() - started)
            rows += [{"run": str(folder), "backend": args.backend, "strategy": scenario.group.strategy, "kind": kind,
                      "N": size, "P": sum(t.partitions for t in scenario.topics), "M": float(cost.moved),
                      "requests": float(cost.requests), "overlapped": False, "repetition": repetition}
                     for kind, cost in change_costs(run.path).items()]
            record = run.record()
            simulated = (record.ended_ms - record.started_ms) / 1000
            events = sum(sum(1 for _ in path.open()) for path in run.event_files())
            shutil.rmtree(folder, ignore_errors=True)
        median = statistics.median(walls)
        costs = {kind: statistics.median(row["requests"] for row in rows if row["N"] == size and row["kind"] == kind)
                 for kind in sorted({row["kind"] for row in rows if row["N"] == size})}
        print(f"{args.backend} N = {size:>6}: wall {median:7.2f} s [{min(walls):.2f}-{max(walls):.2f}], n = {len(walls)}; "
              f"{events:,} events; {simulated:.0f} simulated s, {simulated / median:,.0f} simulated s a wall s; "
              "requests a change (median): " + ", ".join(f"{kind} {cost:,.0f}" for kind, cost in costs.items()))
    for model in fit_models(pd.DataFrame(rows)):
        print(f"{model.backend} {model.kind}: " + (f"{model.formula}; {model.spread}" if hasattr(model, "formula")
                                                   else f"no fit: {model.reason}"))


if __name__ == "__main__":
    main()
