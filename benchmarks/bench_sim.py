"""Benchmark: the simulation's speed, the herd at several group sizes.

    .venv/bin/python benchmarks/bench_sim.py [--backend classic] [--sizes 100 1000 10000] [--repeat 3]
    .venv/bin/python benchmarks/bench_sim.py --backend legacy --sizes 100 1000 3000
    .venv/bin/python benchmarks/bench_sim.py --backend kip848 --sizes 100 1000 10000 --warm-start

For each size N, plays `herd` (one join and one leave into a stable group of N) in virtual time, each repetition
a seed of its own in a fresh folder, and prints the wall time (median, min, max; the play and the collection of
the garbage it leaves), the events written and simulated seconds per wall second; then the backend's herd cost
model (experiments.summary.herd_model, the terms its profile names) fitted over every size, one fit per
repetition. The machine index line comes first: every figure below it is this machine's, as fast as that line
says. --warm-start begins each run with the group
loaded stable by its coordinator instead of N joins (kip848; docs/simulation.md, "Warm start").
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
from experiments.summary.herd_model import fit_models

HERD = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "herd.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="classic")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("runs/bench-sim"))
    parser.add_argument("--warm-start", action="store_true", help="the group loaded stable, not N joins (kip848)")
    args = parser.parse_args()
    print_index()
    rows = []
    for size in args.sizes:
        scenario = load(HERD, overrides=[f"group.members={size}", "group.per_process=25"])
        walls, events, simulated = [], 0, 0.0
        for repetition in range(args.repeat):
            folder = args.dir / f"herd-{size}-{repetition}"
            shutil.rmtree(folder, ignore_errors=True)
            started = time.perf_counter()
            run = simulate(scenario, args.backend, folder, seed=repetition + 1, warm_start=args.warm_start)
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
        print(f"{args.backend} N = {size:>6}: wall {median:7.2f} s [{min(walls):.2f}-{max(walls):.2f}], n = {len(walls)}; "
              f"{events:,} events; {simulated:.0f} simulated s, {simulated / median:,.0f} simulated s a wall s")
    for model in fit_models(pd.DataFrame(rows)):
        print(f"{model.backend} {model.kind}: " + (f"{model.formula}; {model.spread}" if hasattr(model, "formula")
                                                   else f"no fit: {model.reason}"))


if __name__ == "__main__":
    main()
