"""The machine's own load, read from the kernel once a second while a run lasts (`host_sample` events).

A run shares its cores with whatever else the machine does, and on two cores its own processes (members,
brokers, producer, ZooKeeper) are enough to saturate them. Three things say whether a runnable task had to
wait for a CPU, from counters that grow monotonically, so each sample covers exactly the interval since the
last one:

- CPU pressure: /proc/pressure/cpu, the `some` line's `total` (microseconds in which at least one runnable
  task waited for a CPU; Linux's PSI, 4.20 and later);
- steal: /proc/stat's steal ticks, CPU the hypervisor gave to another guest;
- busy: /proc/stat's non-idle ticks, the share of all cores in use.

The 1-minute load average and the core count come along, for a reader who knows those better. A kernel
without PSI gives no pressure (None), never a made-up zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PRESSURE = Path("/proc/pressure/cpu")
STAT = Path("/proc/stat")
SAMPLE_EVERY_S = 1.0


@dataclass(frozen=True)
class Counters:
    """The kernel's cumulative counters at one moment."""

    at_ns: int
    pressure_us: int | None     # PSI cpu `some` total
    busy_ticks: int
    steal_ticks: int
    total_ticks: int


def read_counters(now_ns: int, *, pressure: Path = PRESSURE, stat: Path = STAT) -> Counters:
    return Counters(now_ns, _pressure_total(pressure), *_cpu_ticks(stat))


def sample(before: Counters, after: Counters) -> dict[str, float | int | None]:
    """The `host_sample` fields for the interval between two readings."""
    interval_us = (after.at_ns - before.at_ns) / 1000
    ticks = after.total_ticks - before.total_ticks
    pressure = None
    if before.pressure_us is not None and after.pressure_us is not None and interval_us > 0:
        pressure = round(min(100.0, 100 * (after.pressure_us - before.pressure_us) / interval_us), 2)
    return {
        "interval_ms": round(interval_us / 1000, 1),
        "cpu_pressure_pct": pressure,
        "steal_pct": round(100 * (after.steal_ticks - before.steal_ticks) / ticks, 2) if ticks > 0 else None,
        "busy_pct": round(100 * (after.busy_ticks - before.busy_ticks) / ticks, 2) if ticks > 0 else None,
        "load1": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count() or 1,
    }


def _pressure_total(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("some "):
                return int(dict(item.split("=") for item in line.split()[1:])["total"])
    except (OSError, ValueError, KeyError):
        return None
    return None


def _cpu_ticks(path: Path) -> tuple[int, int, int]:
    """(busy, steal, total) ticks of the `cpu` line: user nice system idle iowait irq softirq steal ..."""
    fields = [int(value) for value in path.read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    steal = fields[7] if len(fields) > 7 else 0
    total = sum(fields[:8])   # guest time is counted inside user time already
    return total - idle, steal, total
