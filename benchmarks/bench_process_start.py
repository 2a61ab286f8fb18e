"""What starting one of a run's processes costs in CPU: the whole command line against the command alone.

    .venv/bin/python benchmarks/bench_process_start.py [--repeat 5]

A run starts a process per member host (5 to 25 members each) and a producer; seed 002's growth from 50 to
100 members starts ten hosts at once on two cores. Each process here runs its command's `--help` (imports and
option parsing, no network), alternating the two ways in, `--repeat` times; the CPU (user + system) of each
start is printed as median [min-max] with n, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

WAYS = {
    "member host": (["-m", "experiments.cli.app", "member", "--help"], ["-m", "experiments.run.member_cli", "--help"]),
    "producer": (["-m", "experiments.cli.app", "produce", "--help"], ["-m", "broker.cli", "produce", "--help"]),
}


def cpu_of(argv: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one child process."""
    before, started = os.times(), time.monotonic()
    subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, time.monotonic() - started


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}] s, n = {len(values)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    for process, (whole, alone) in WAYS.items():
        cpu: dict[str, list[float]] = {"whole command line": [], "command alone": []}
        for _ in range(repeat):
            for label, argv in (("whole command line", whole), ("command alone", alone)):
                cpu[label].append(cpu_of(argv)[0])
        print(f"{process}:")
        for label, values in cpu.items():
            print(f"  {label:<20} CPU {spread(values)}")
        ratio = statistics.median(cpu["whole command line"]) / statistics.median(cpu["command alone"])
        print(f"  the command alone starts on {1 / ratio:.0%} of the whole command line's CPU ({ratio:.1f}x less)")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
