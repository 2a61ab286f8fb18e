"""Benchmark: a split-brain safety sweep, seeds per minute, the tally against writing and summarising every seed.

    .venv/bin/python benchmarks/bench_safety_sweep.py [--scenario split-brain-a] [--backend classic] [--seeds 1000]
                                                      [--written 20]

Plays SEEDS seeds of the scenario with records, each seed's safety checks tallied as its events are emitted
(experiments.statistics.safety_tally), over one process a core, as `./lab sim SCENARIO --records --safety` does;
then WRITTEN seeds the other way (every event written over the same processes, every seed summarised in one Spark
pass, as `--keep-clean` does), and prints both rates and their ratio under the machine index line. Every verdict of the
written seeds is compared with the tally's: a difference is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from experiments.run.machine import print_index
from experiments.scenario import load
from experiments.sim.play import run_seed
from experiments.statistics.safety import SAFETY, SafetySeed, tally_seeds

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="split-brain-a")
    parser.add_argument("--backend", default="classic")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--written", type=int, default=20, help="seeds written and summarised, for the ratio")
    args = parser.parse_args()
    print_index()
    source = SCENARIOS / f"{args.scenario}.toml"
    scenario = load(source)
    seeds = range(scenario.seed, scenario.seed + args.seeds)
    workers = os.cpu_count() or 1

    started = time.perf_counter()
    tallied = tally_seeds([SafetySeed(str(source), (), args.backend, seed, False, True) for seed in seeds])
    tally_wall = time.perf_counter() - started
    broken = sorted(seed for seed, checks in tallied.items() if any(check.verdict.value == "false" for check in checks))
    simulated_s = scenario.duration + scenario.settle
    print(f"tallied: {args.seeds} seeds of {args.scenario} on {args.backend} in {tally_wall:.1f} s over {workers} "
          f"processes: {args.seeds / tally_wall * 60:,.0f} seeds a minute, about "
          f"{args.seeds * simulated_s / tally_wall:,.0f} simulated s a wall s (timeline and settle only); "
          f"{len(broken)} broke a safety check{': ' + ', '.join(map(str, broken[:10])) if broken else ''}")

    from experiments.summary import summarize

    scratch = Path(tempfile.mkdtemp(prefix="bench-safety-"))
    try:
        few = list(seeds)[:args.written]
        started = time.perf_counter()
        with ProcessPoolExecutor(max_workers=workers) as pool:
            folders = [Path(folder) for folder in pool.map(run_seed, [
                (str(source), [], args.backend, seed, str(scratch / f"seed-{seed}"), False, True) for seed in few])]
        summaries = summarize(folders, write=False)
        written_wall = time.perf_counter() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    per_tally, per_written = tally_wall / args.seeds, written_wall / len(few)
    print(f"written and summarised: {len(few)} seeds in {written_wall:.1f} s, {workers} processes and one Spark pass: "
          f"{len(few) / written_wall * 60:,.0f} seeds a minute")
    print(f"ratio: {per_written / per_tally:.1f}x the tally's wall time a seed ({per_written:.3f} s against "
          f"{per_tally:.4f} s)")
    differ = [(seed, check.check) for seed, summary in zip(few, summaries, strict=True) for check in summary.checks
              if check.check in SAFETY and (check.verdict, check.count) not in
              {(tallied_check.verdict, tallied_check.count) for tallied_check in tallied[seed]
               if tallied_check.check == check.check}]
    print("the tally's verdicts equal the summary's on every written seed" if not differ
          else f"the tally and the summary differ: {differ}")


if __name__ == "__main__":
    main()
