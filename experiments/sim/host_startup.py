"""How long member host processes take to come up when the runner starts several at once.

A member host is a Python process: before its members begin, it spends about `HOST_START_CPU_MS` of one core
importing Python, the clients and the lab and making its members' clients. The warm-up starts every host of the
initial group at once (and, with `prestart`, every later wave's host, armed), so on the machine's two cores they
share the CPU: Linux's fair scheduler gives each runnable process an equal share, at most one core, and a process
comes up when it has had its own work (processor sharing). So three hosts on two cores come up after 1.5 times
their work, the quickest first; a seed draws each host's work within `HOST_START_SPREAD` of the mean, the
differences a real warm-up shows between hosts that do the same.

Meanwhile the members already up wait for the cores too: every message of theirs waits (experiments.sim.network,
`Network.starting`), so the group's first member is still joining when its host's next members join, as in the real
warm-ups. Not modelled: the servers' share of the cores while the hosts start (the members' hosts run at a lower priority
than the brokers and ZooKeeper, experiments.run.member_cpu) and a restart's new process, which starts while the
running members load the machine (`experiments.sim.play.RESTART_PROCESS_START_MS`, a fixed time, measured).
"""

from __future__ import annotations

import random

# One member host's start-up, CPU ms of one core: fitted to two real warm-ups on this kind of machine (2026-12-06,
# machine index python 0.70-0.73 s): split-brain-d's 3 hosts came up 1.13-1.60 s after the warm-up began (1.5 x
# 0.75-1.07 s of work), seed002's 10 hosts, started with its 10 armed wave hosts, 8.8-10.7 s after (20 processes
# on 2 cores: 10 x the mean work, 1.0 s). `python -m experiments.run.member_cli --help` alone takes 0.88-1.02 s.
# Those runs (the shipped ones) compiled every module at start; with the bytecode `./lab setup` now compiles ahead
# it takes 0.31 s (docs/analysis.md, "Start-up"). Kept at the shipped runs' value: the validation compares to them.
HOST_START_CPU_MS = 1_000.0
HOST_START_SPREAD = 0.3     # each host's work drawn uniformly within +-30 % of the mean
# The members of one host begin one after another once it is up, each client made in turn: 21.7 ms apart at the
# median in that seed002 run ([0.8-282] ms, n = 80)
MEMBER_START_MS = 20.0
CORES = 2


def start_work_ms(rng: random.Random, hosts: int) -> list[float]:
    """Each host's start-up work (CPU ms), drawn from the seed."""
    return [HOST_START_CPU_MS * rng.uniform(1 - HOST_START_SPREAD, 1 + HOST_START_SPREAD) for _ in range(hosts)]


def ready_after_ms(work_ms: list[float], cores: int = CORES) -> list[float]:
    """When each of processes started together comes up, each needing `work_ms` of one core, the cores shared
    equally among those still starting (none gets more than one core). In the order given."""
    order = sorted(range(len(work_ms)), key=lambda index: work_ms[index])
    ready = [0.0] * len(work_ms)
    now, done_work = 0.0, 0.0            # elapsed time, and the work every process still starting has had
    for position, index in enumerate(order):
        starting = len(order) - position
        rate = min(1.0, cores / starting)   # each one's share of a core
        now += (work_ms[index] - done_work) / rate
        done_work = work_ms[index]
        ready[index] = now
    return ready
