"""How much of a core a busy one-thread server keeps against many yielding children, with and without their CPU group.

    .venv/bin/python benchmarks/bench_cpu_group.py [--hosts 8] [--threads 25] [--seconds 10] [--repeat 3]

A server stands in for the broker's event loop: one thread in a session of its own, at nice 0, that spins
for 1 ms and sleeps for 1 ms in a loop (it wants half a core and more whenever it can get it). Beside it,
`--hosts` children started as the runner starts member hosts (experiments.faults.process.ChildProcess,
`yields_cpu=True`), each with `--threads` threads that take turns on the GIL as a host's members do. Each
round runs the same load twice, the children at nice 19 only and at nice 19 in the members' CPU group
(experiments.faults.cpu_group), and prints the server's time on a CPU and its time runnable but waiting for
one (the kernel's schedstat), each as a share of the wall time. Needs a machine that allows the group
(root and a cpu controller); elsewhere it says so and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.faults import cpu_group
from experiments.faults.process import ChildProcess

SERVER = """
import time
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    spin = time.monotonic() + 0.001
    while time.monotonic() < spin:
        pass
    time.sleep(0.001)
"""

HOST = """
import threading, time
def member():
    while True:
        spin = time.monotonic() + 0.0005
        while time.monotonic() < spin:
            pass
        time.sleep(0.002)
for _ in range({threads}):
    threading.Thread(target=member, daemon=True).start()
time.sleep(3600)
"""


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds on a CPU and seconds runnable waiting for one, of the process's main thread."""
    on_cpu, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu) / 1e9, int(waited) / 1e9


async def one_round(hosts: int, threads: int, seconds: float, grouped: bool, folder: Path) -> tuple[float, float]:
    children = []
    original = cpu_group.yielding_group
    if not grouped:
        cpu_group.yielding_group = lambda: None
    try:
        for index in range(hosts):
            child = ChildProcess(f"host{index}", [sys.executable, "-c", HOST.format(threads=threads)],
                                 log_path=folder / f"host{index}.log", yields_cpu=True)
            await child.start()
            children.append(child)
    finally:
        cpu_group.yielding_group = original
    await asyncio.sleep(2)   # every host's threads running
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(seconds=seconds)], start_new_session=True)
    await asyncio.sleep(0.5)
    before = schedstat(server.pid), time.monotonic()
    await asyncio.sleep(seconds - 1.5)
    after = schedstat(server.pid), time.monotonic()
    await asyncio.to_thread(server.wait)
    wall = after[1] - before[1]
    for child in children:
        child.kill_now()
        await child.process.wait()
    return (after[0][0] - before[0][0]) / wall, (after[0][1] - before[0][1]) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--threads", type=int, default=25)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.hosts < 1 or args.threads < 1 or args.seconds < 3 or args.repeat < 1:
        parser.error("--hosts, --threads and --repeat must be positive, --seconds at least 3")
    if cpu_group.yielding_group() is None:
        raise SystemExit("this machine gives no CPU group (not root, or no cpu controller): nothing to compare")
    results: dict[str, list[tuple[float, float]]] = {"nice 19": [], "nice 19 + group": []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.repeat):
            for name, grouped in (("nice 19", False), ("nice 19 + group", True)):
                share = asyncio.run(one_round(args.hosts, args.threads, args.seconds, grouped, Path(folder)))
                results[name].append(share)
                print(f"round {round_ + 1}/{args.repeat} {name}: server on a CPU {100 * share[0]:.0f}%, "
                      f"waiting {100 * share[1]:.0f}%", flush=True)
    print(f"\n{args.hosts} yielding hosts x {args.threads} threads against one server thread, {args.seconds:.0f} s "
          f"a round, n = {args.repeat} (median [min-max], % of the wall time)")
    for name, shares in results.items():
        on_cpu, waited = [s[0] for s in shares], [s[1] for s in shares]
        print(f"  {name:>16}: on a CPU {100 * statistics.median(on_cpu):5.1f} [{100 * min(on_cpu):.1f}-"
              f"{100 * max(on_cpu):.1f}]  waiting {100 * statistics.median(waited):5.1f} "
              f"[{100 * min(waited):.1f}-{100 * max(waited):.1f}]")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
