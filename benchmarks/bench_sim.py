"""Benchmark: the simulation's speed, the herd at several group sizes.

    .venv/bin/python benchmarks/bench_sim.py [--backend classic] [--sizes 100 1000 10000] [--repeat 3]
    .venv/bin/python benchmarks/bench_sim.py --backend legacy --sizes 100 1000 3000

For each size N, plays `herd` (one join and one leave into a stable group of N) in virtual time, each repetition
in a fresh folder, and prints the wall time (median, min, max), the events written, simulated seconds per wall
second, and requests per change as the events count them. The machine index line comes first: every figure
below it is this machine's, as fast as that line says.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from experiments.run.machine import print_index
from experiments.scenario import load
from experiments.sim.play import simulate

HERD = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "herd.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="classic")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("runs/bench-sim"))
    args = parser.parse_args()
    print_index()
    for size in args.sizes:
        scenario = load(HERD, overrides=[f"group.members={size}", "group.per_process=25"])
        walls, events, simulated = [], 0, 0.0
        for repetition in range(args.repeat):
            folder = args.dir / f"herd-{size}-{repetition}"
            shutil.rmtree(folder, ignore_errors=True)
            started = time.perf_counter()
            run = simulate(scenario, args.backend, folder)
            walls.append(time.perf_counter() - started)
            record = run.record()
            simulated = (record.ended_ms - record.started_ms) / 1000
            events = sum(sum(1 for _ in path.open()) for path in run.event_files())
            shutil.rmtree(folder, ignore_errors=True)
        median = statistics.median(walls)
        print(f"{args.backend} N = {size:>6}: wall {median:7.2f} s [{min(walls):.2f}-{max(walls):.2f}], n = {len(walls)}; "
              f"{events:,} events; {simulated:.0f} simulated s, {simulated / median:,.0f} simulated s a wall s")


if __name__ == "__main__":
    main()
