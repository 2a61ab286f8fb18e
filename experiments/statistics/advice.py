"""`./lab advise`: which assignment strategy and which generation for a group, answered in virtual time.

The group is a scenario (its partitions, members, record rate, service times and timeline of changes). Every
strategy of every simulated generation is a cell; each cell is played for many seeds in the simulation
(experiments.sim) with its measures tallied as it plays (experiments.statistics.phase_tally), spread over the
machine's cores. The cells are ranked by their median records over the latency limit over the whole timeline, then
worst latency, then time rebalancing; every pair of cells is tested as the results page tests it
(`campaign_stats.comparisons`: the exact two-sided Mann-Whitney test, Benjamini-Hochberg over the page). The answer
names the mechanism behind the top cell and the command that confirms the top two with real runs.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.run.member_configs import native_settings
from experiments.scenario import Scenario, load, resolve
from experiments.scenario.actions import Action
from experiments.sim.play import simulate
from experiments.sim.playable import SIMULATED, records_refusal
from experiments.statistics import seed_pool
from experiments.statistics.campaign_stats import (
    WHOLE_RUN_LOST,
    WHOLE_RUN_REBALANCING,
    WHOLE_RUN_WORST,
    phase_metrics,
)
from experiments.statistics.inference import MIN_RUNS
from experiments.statistics.phase_tally import PhaseTally
from experiments.statistics.phase_validation import NOT_SCENARIO_PHASES
from rebalance.assignors import get_assignor
from rebalance.assignors.base import RebalanceProtocol
from rebalance.backends import GroupProtocol, canonical_name, profile

SEEDS = 30
RANKED_BY = (WHOLE_RUN_LOST, WHOLE_RUN_WORST, WHOLE_RUN_REBALANCING)   # in this order, each a median over the seeds


@dataclass(frozen=True)
class Cell:
    backend: str
    strategy: str

    @property
    def label(self) -> str:
        return f"{self.backend}/{self.strategy}"


def cells_of(scenario: Scenario) -> tuple[list[Cell], list[str]]:
    """Every strategy of every backend the scenario lists that the simulation plays with records, one cell per
    assignor actually run (KIP-848 runs the classic names as its server assignors); and what is left out, why."""
    cells, left_out = [], []
    schedule = resolve(scenario)
    for backend in dict.fromkeys(canonical_name(name) for name in scenario.backends):
        backend_profile = profile(backend)
        why = "not simulated" if backend not in SIMULATED else records_refusal(scenario, schedule, backend)
        if why:
            left_out.append(f"{backend}: {why} (docs/simulation.md)")
            continue
        runs_as: set[str] = set()
        for strategy in backend_profile.strategies:
            if backend_profile.runs_as(strategy) not in runs_as:
                runs_as.add(backend_profile.runs_as(strategy))
                cells.append(Cell(backend, strategy))
    return cells, left_out


@dataclass(frozen=True)
class SeedTask:
    source: str                   # the scenario file
    overrides: tuple[str, ...]
    cell: Cell
    seed: int
    latency_limit_ms: float


def play_seed(task: SeedTask) -> list[tuple[str, float]]:
    """One seed of one cell in virtual time, no event written: the metrics its tally gives."""
    scenario = load(Path(task.source), overrides=[*task.overrides, f'group.strategy="{task.cell.strategy}"',
                                                  f'backends=["{task.cell.backend}"]'])
    tally = PhaseTally(task.latency_limit_ms)
    scratch = Path(tempfile.mkdtemp(prefix="advise-"))
    try:
        simulate(scenario, task.cell.backend, scratch / "run", seed=task.seed, records=True, events=False,
                 tap=tally.feed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    phases = pd.DataFrame([vars(row) for row in tally.measures()]).astype({"max_latency_ms": "float64"})
    return phase_metrics(phases, whole_run_extremes=True)


def play(scenario: Scenario, cells: list[Cell], *, seeds: int, overrides: Iterable[str], latency_limit_ms: float,
         workers: int | None = None, done: Callable[[], None] = lambda: None,
         within_s: float | None = None) -> pd.DataFrame:
    """Each cell's seeds (the scenario's seed and the next ones), spread over `workers` processes (default: one a
    core): one row per seed and metric, as a campaign's runs.csv holds them. The seeds go out seed by seed, every
    cell's first before any cell's second, so the cells' counts grow together.

    `within_s`: a budget of wall time. Once it is spent and every cell has `MIN_RUNS` seeds (the least the tests
    take), the seeds under way are stopped and no other starts; each cell keeps the seeds every cell finished, so the
    cells are compared on the same seeds. `attrs["past_budget"]` says whether those 5 a cell took longer than it.
    Interrupted (Ctrl-C), it stops the same way, with `attrs["interrupted"]`: what was played is not lost."""
    tasks = [SeedTask(str(scenario.source), tuple(overrides), cell, seed, latency_limit_ms)
             for seed in range(scenario.seed, scenario.seed + seeds) for cell in cells]
    deadline = None if within_s is None else time.monotonic() + within_s
    finished: dict[Cell, set[int]] = {cell: set() for cell in cells}
    past_budget = interrupted = False
    rows = []
    with seed_pool.played(play_seed, tasks, workers=workers) as results:
        try:
            for task, metrics in results:
                for metric, value in metrics:
                    rows.append({"scenario": scenario.name, "backend": task.cell.backend,
                                 "strategy": task.cell.strategy, "sweep": "-", "seed": task.seed, "metric": metric,
                                 "value": value})
                finished[task.cell].add(task.seed)
                done()
                if deadline is not None and time.monotonic() >= deadline:
                    if min(len(seen) for seen in finished.values()) >= MIN_RUNS:
                        break   # the seeds still under way are stopped with the pool
                    past_budget = True
        except KeyboardInterrupt:
            interrupted = True
    runs = pd.DataFrame(rows)
    if within_s is None and not interrupted:
        return runs
    common = set.intersection(*finished.values())
    runs = runs[runs["seed"].isin(common)].reset_index(drop=True) if len(runs) else runs
    runs.attrs.update(past_budget=past_budget, interrupted=interrupted)
    return runs


@dataclass(frozen=True)
class Ranked:
    cell: Cell
    medians: dict[str, float]
    spreads: dict[str, tuple[float, float]]
    seeds: int


def rank(runs: pd.DataFrame, cells: list[Cell]) -> list[Ranked]:
    """The cells from best to worst: fewest records lost, then lowest worst latency, then least rebalancing."""
    ranked = []
    for cell in cells:
        rows = runs[(runs["backend"] == cell.backend) & (runs["strategy"] == cell.strategy)]
        medians, spreads = {}, {}
        for metric in RANKED_BY:
            values = rows.loc[rows["metric"] == metric, "value"]
            medians[metric] = float(values.median()) if len(values) else math.nan
            spreads[metric] = (float(values.min()), float(values.max())) if len(values) else (math.nan, math.nan)
        ranked.append(Ranked(cell, medians, spreads, int(rows["seed"].nunique())))
    return sorted(ranked, key=lambda item: tuple(math.inf if math.isnan(item.medians[m]) else item.medians[m]
                                                   for m in RANKED_BY))


def mechanism(cell: Cell, scenario: Scenario) -> list[str]:
    """The mechanisms behind a cell's figures in this scenario, one sentence each."""
    backend_profile = profile(cell.backend)
    settings = native_settings(scenario, backend_profile)
    session_s = backend_profile.session_ms(scenario.group.session_timeout_ms, settings) / 1000
    crashes = any(entry.action is Action.CRASH or (entry.action is Action.SCALE and entry.how == "crash")
                  for entry in scenario.timeline)
    sentences = []
    if backend_profile.needs_zookeeper:
        sentences.append("Every member on its own: a change fires every member's ZooKeeper watch, and each stops "
                         "fetching, releases all its partitions, reads the whole group and claims its share, trying "
                         "again while another still holds one, so the whole group stops handling until the last "
                         "member has claimed.")
    elif backend_profile.group_protocol is GroupProtocol.CONSUMER:
        sentences.append("No barrier: the coordinator moves partitions member by member through heartbeats, so a "
                         "change stops only the partitions that move, each until its old owner has given it up and "
                         "its new owner's next heartbeat has taken it.")
    elif _cooperative(cell):
        sentences.append("The revocations: a change revokes only the partitions that move, in a second rebalance, and "
                         "every member keeps handling the rest while the group rebalances.")
    else:
        sentences.append("The barrier: at every change each member revokes all its partitions and waits in JoinGroup "
                         "until every member has joined again, so the whole group stops handling for the rebalance.")
    if crashes:
        sentences.append(f"The sessions: a crashed member's partitions wait for its session ({session_s:g} s"
                         f"{' in ZooKeeper' if backend_profile.needs_zookeeper else ''}) to expire before another "
                         f"member takes them.")
    return sentences


def protocol_of(cell: Cell) -> str:
    backend_profile = profile(cell.backend)
    if backend_profile.needs_zookeeper:
        return "ZooKeeper, each member on its own (0.8)"
    if backend_profile.group_protocol is GroupProtocol.CONSUMER:
        return "consumer (KIP-848)"
    return "cooperative" if _cooperative(cell) else "eager"


def _cooperative(cell: Cell) -> bool:
    """Whether the cell's classic assignor rebalances cooperatively (KIP-429), as its own protocol declares."""
    return get_assignor(cell.strategy).rebalance_protocol is RebalanceProtocol.COOPERATIVE


def confirm_command(scenario_name: str, top: list[Cell], overrides: Iterable[str]) -> str:
    backends = ",".join(dict.fromkeys(cell.backend for cell in top))
    strategies = ",".join(dict.fromkeys(cell.strategy for cell in top))
    sets = " ".join(f"--set '{item}'" for item in overrides)
    return f"compare {scenario_name} --backends {backends} --strategies {strategies} --repeat 5 {sets}".strip()


PHASE_LABELS = {"records lost": "records lost", "max latency (ms)": "worst latency (ms)",
                "rebalancing (ms)": "rebalancing (ms)"}


def scenario_phases(runs: pd.DataFrame) -> list[str]:
    """The scenario's own phases, in the order their metrics came."""
    names = []
    for metric in runs["metric"]:
        phase, _, measure = metric.partition(": ")
        if measure in PHASE_LABELS and phase not in (*NOT_SCENARIO_PHASES, "whole run") and phase not in names:
            names.append(phase)
    return names


def pair(compared: pd.DataFrame, one: Cell, other: Cell, metric: str) -> pd.Series | None:
    """The page's comparison of two cells on `metric`, whichever way round it was made."""
    rows = compared[compared["metric"] == metric]
    for a, b in ((one, other), (other, one)):
        if a.strategy == b.strategy:
            found = rows[(rows["compares"] == "backend") & (rows["strategy"] == a.strategy) & (rows["a"] == a.backend)
                         & (rows["b"] == b.backend)]
        elif len({a.backend, b.backend}) == 1:   # one generation, two strategies
            found = rows[(rows["compares"] == "strategy") & (rows["backend"] == a.backend)
                         & (rows["a"] == a.strategy) & (rows["b"] == b.strategy)]
        else:
            found = rows[(rows["compares"] == "both") & (rows["a"] == a.label) & (rows["b"] == b.label)]
        if len(found):
            return found.iloc[0]
    return None


VALIDATION_PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "simulation.md"


def validation_marks(scenario_name: str, page: Path = VALIDATION_PAGE) -> dict[tuple[str, str], tuple[int, int]]:
    """(backend, strategy) -> (measures inside the real runs' range, measures validated), from the validation
    tables of docs/simulation.md (`./lab sim-validate --cells`) for this scenario; cells never validated are absent."""
    if not page.is_file():
        return {}
    marks: dict[tuple[str, str], tuple[int, int]] = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        columns = [column.strip() for column in line.strip().strip("|").split("|")]
        if len(columns) != 7 or columns[0] != scenario_name or columns[6] not in ("inside", "**outside**"):
            continue
        inside, total = marks.get((columns[1], columns[2]), (0, 0))
        marks[(columns[1], columns[2])] = (inside + (columns[6] == "inside"), total + 1)
    return marks
