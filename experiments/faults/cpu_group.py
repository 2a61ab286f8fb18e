"""A CPU group for the children that yield the CPU to the servers (the member hosts).

In production a consumer runs on a machine of its own; here a thousand of them share two cores with the one
broker. Nice 19 is not enough for the broker to keep its core: Linux first shares the CPU between groups
(with autogroups on, one group a session: the runner's, with every member host in it, against the broker's),
and weighs nice values only inside a group. A control group of its own, with a small weight, makes the
yielding children lose to every server together, whatever their number of threads.

Only where the machine allows it: root (or a delegated cgroup) and a `cpu` controller, cgroup v1's
`cpu.shares` or v2's `cpu.weight`. Elsewhere `yielding_group()` is None and the children only run at nice 19.
The group is made once and kept (an empty cgroup holds nothing); runs at the same time share it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

GROUP_NAME = "rebalance-lab-members"
V1_CPU = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup")
# Against 1,024 (v1) or 100 (v2) for each session's group: the members get about a tenth of a core a server
# leaves them when it is busy, and every core when it is not (the weights only matter when both want the CPU).
V1_SHARES = 100
V2_WEIGHT = 10


@functools.cache
def yielding_group() -> Path | None:
    """The `cgroup.procs` file of the members' CPU group, made on first use; None where that cannot be."""
    with contextlib.suppress(OSError):
        if (V1_CPU / "cpu.shares").exists():
            return _made(V1_CPU / GROUP_NAME, "cpu.shares", V1_SHARES)
        if "cpu" in (V2_ROOT / "cgroup.controllers").read_text().split() and \
                "cpu" in (V2_ROOT / "cgroup.subtree_control").read_text().split():
            return _made(V2_ROOT / GROUP_NAME, "cpu.weight", V2_WEIGHT)
    return None


def _made(group: Path, weight_file: str, weight: int) -> Path | None:
    group.mkdir(exist_ok=True)
    (group / weight_file).write_text(str(weight))
    procs = group / "cgroup.procs"
    return procs if os.access(procs, os.W_OK) else None


def join(procs: Path | None) -> None:
    """Move the calling process into the group (a child between fork and exec); nothing when it cannot."""
    if procs is not None:
        with contextlib.suppress(OSError):
            procs.write_text(str(os.getpid()))
