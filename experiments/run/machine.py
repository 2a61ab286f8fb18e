"""How fast this machine is right now, in one line, so a wall-clock figure from here can be set beside one from
another machine of the same kind: machines of one kind differ up to twofold, and a busy machine more.

    machine index: python 0.62 s, on all 2 cores at once 0.71 s, jvm start 0.16 s, load 0.8, cpu pressure 10 s 1.95%

- python: a fixed single-threaded mix of interpreter work (loops, dict and string operations, small
  allocations), the median of 5 timings; the lab's members, brokers and producer are Python;
- on all cores at once: the same work on every core together (median of 3), near the single figure when the
  cores are really there and free;
- jvm start: `java -version` (ZooKeeper and Spark are Java);
- load and CPU pressure (the kernel's 10-second PSI average): what else the machine was doing.

The work is the same as the workplace's own index tool does, so the two lines compare.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path


def _work(_: int = 0) -> float:
    started = time.perf_counter()
    table: dict[int, str] = {}
    total = 0
    for i in range(5_000_000):
        total += i * i % 7
        if i % 3 == 0:
            table[i % 5000] = str(i)
    "".join(table.values())
    return time.perf_counter() - started


@dataclass(frozen=True, kw_only=True)
class MachineIndex:
    python_s: float
    all_cores_s: float
    cores: int
    jvm_start_s: float | None
    load1: float
    cpu_pressure_10s: float | None

    def line(self) -> str:
        jvm = "n/a" if self.jvm_start_s is None else f"{self.jvm_start_s:.2f} s"
        pressure = "n/a" if self.cpu_pressure_10s is None else f"{self.cpu_pressure_10s:.2f}%"
        return (f"machine index: python {self.python_s:.2f} s, on all {self.cores} cores at once "
                f"{self.all_cores_s:.2f} s, jvm start {jvm}, load {self.load1:.1f}, cpu pressure 10 s {pressure}")

    def to_json(self) -> dict:
        return asdict(self)


def measure() -> MachineIndex:
    """About 15 s on a machine of two cores."""
    cores = os.cpu_count() or 1
    single = statistics.median(_work() for _ in range(5))
    with ProcessPoolExecutor(cores) as pool:
        together = statistics.median(max(pool.map(_work, range(cores))) for _ in range(3))
    return MachineIndex(python_s=round(single, 3), all_cores_s=round(together, 3), cores=cores,
                        jvm_start_s=_jvm_start(), load1=round(os.getloadavg()[0], 2),
                        cpu_pressure_10s=pressure_avg10())


def _jvm_start() -> float | None:
    java = shutil.which("java")
    if java is None:
        return None
    started = time.perf_counter()
    subprocess.run([java, "-version"], capture_output=True, check=False)
    return round(time.perf_counter() - started, 3)


def pressure_avg10(path: Path = Path("/proc/pressure/cpu")) -> float | None:
    """The kernel's 10-second average of CPU pressure (`some`), or None without PSI."""
    try:
        fields = path.read_text().splitlines()[0].split()
        return float(next(field for field in fields if field.startswith("avg10=")).partition("=")[2])
    except (OSError, StopIteration, ValueError, IndexError):
        return None


PART_FLAGS = ("--child", "--worker", "--time-once")   # a benchmark's own child processes: no line of their own


def print_index() -> None:
    """The index line first, for a benchmark's figures (not for the processes a benchmark starts of itself)."""
    import sys

    if not any(flag in sys.argv for flag in PART_FLAGS):
        print(measure().line(), flush=True)
