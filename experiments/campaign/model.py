"""A campaign: a matrix of scenario runs, each cell repeated, declared in one TOML file.

    name = "quick"
    description = "herd at N = 4 and 8 on legacy and classic"
    repetitions = 5               # the default; a comparison needs at least 5 runs a side
    seed = 1000                   # repetition r runs with seed 1000 + r, the same on every backend

    [[matrix]]
    scenario = "demo-herd"        # a built-in scenario's name, or a path relative to this file
    backends = ["legacy", "classic"]         # default: the scenario's own (all registered if it names none)
    strategies = ["range"]                   # default: the scenario's own ("default": each backend's)
    set = ["group.per_process=4"]            # overrides for every cell of this block
    sweep = { "group.members" = [4, 8] }     # one cell per combination of values
    paired = false                           # true: the sweep's lists go position by position instead
    repetitions = 10                         # this block's cells only (timings under churn)

    [[claims]]                    # a headline claim, declared before the runs, tested with Holm
    says = "legacy's requests per join exceed classic's at every N"
    scenario = "demo-herd"
    metric = "join: requests per change"
    higher = ["legacy"]           # cells: "backend" or "backend/strategy"
    lower = ["classic"]           # every higher cell against every lower one, at every sweep value

    [[detect]]                    # the smallest shift the campaign is sized for (experiments.statistics.power)
    scenario = "demo-herd"
    metric = "join: requests per change"
    shift = 30
    sd = 10                       # the run-to-run standard deviation expected

A cell is one (scenario, backend, strategy, sweep values); every cell runs its block's `repetitions`
times, else the campaign's. A backend's earlier name (`modern` for `classic`) is accepted in `backends`
and in claims, and cells are named by the backend's own name.
The plan interleaves the cells (repetition 0 of every cell, then repetition 1, ...) so a slow drift
of the machine spreads over every cell instead of masquerading as a difference between them.
Everything is checked, and every scenario of the matrix loaded and validated, before anything runs.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from experiments.run.member_configs import check_member_settings
from experiments.scenario import Problem, Scenario, ScenarioError, find_file, load
from experiments.scenario.line_index import LineIndex
from rebalance.backends import canonical_name, profile

BUILTIN_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
BUILTIN_CAMPAIGNS = Path(__file__).resolve().parent.parent / "campaigns"


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One point of the matrix."""

    scenario: str                      # the scenario's name
    scenario_path: Path
    backend: str
    strategy: str
    sweep: tuple[tuple[str, object], ...]   # (dotted key, value) pairs, in declaration order
    common: tuple[str, ...]                 # the block's `set` overrides
    repetitions: int = 5

    @property
    def key(self) -> str:
        """A stable, readable id that also names the cell's folders."""
        parts = [self.scenario, self.backend, self.strategy]
        parts += [f"{key.rsplit('.', 1)[-1]}-{value}" for key, value in self.sweep]
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(part) for part in parts))

    def overrides(self, seed: int) -> list[str]:
        """The `--set` list that makes this cell's scenario for one repetition."""
        return [*self.common, *(f"{key}={_toml(value)}" for key, value in self.sweep),
                f"group.strategy={_toml(self.strategy)}", f"backends={_toml([self.backend])}", f"seed={seed}"]


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A headline claim declared in advance: `higher` cells exceed `lower` cells on `metric` in
    `scenario`, pair by pair at every sweep value both have (experiments.statistics.claims tests it)."""

    says: str
    scenario: str
    metric: str
    higher: tuple[str, ...]
    lower: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class PlannedRun:
    cell: Cell
    repetition: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.cell.key}-r{self.repetition}"


@dataclass(frozen=True, kw_only=True)
class Campaign:
    name: str
    description: str
    source: str
    text: str
    repetitions: int
    seed: int
    cells: tuple[Cell, ...]
    claims: tuple[Claim, ...] = ()
    # What a run whose conditions are invalid becomes: "replace" (made again, at most twice; then left out of the
    # statistics) or "keep" (counted, marked), for a campaign that measures such a condition on purpose.
    invalid_runs: str = "replace"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def plan(self) -> list[PlannedRun]:
        """Every run, interleaved: repetition 0 of each cell, then repetition 1, ..."""
        most = max((cell.repetitions for cell in self.cells), default=0)
        return [PlannedRun(cell=cell, repetition=rep, seed=self.seed + rep)
                for rep in range(most) for cell in self.cells if rep < cell.repetitions]

    def scenario_of(self, run: PlannedRun) -> Scenario:
        return load(run.cell.scenario_path, overrides=run.cell.overrides(run.seed))


def declared_claims(text: str) -> tuple[Claim, ...]:
    """The claims of a campaign file that was checked when it ran (its copy in the campaign folder)."""
    return tuple(Claim(says=claim["says"], scenario=claim["scenario"], metric=claim["metric"],
                       higher=tuple(claim["higher"]), lower=tuple(claim["lower"]))
                 for claim in tomllib.loads(text).get("claims", []))


@dataclass(frozen=True)
class Detect:
    metric: str
    shift: float
    sd: float
    scenario: str | None = None


def declared_detections(text: str) -> tuple[Detect, ...]:
    """The `detect` tables of a campaign file; ValueError names what is wrong."""
    found = tomllib.loads(text).get("detect", [])
    tables = [found] if isinstance(found, dict) else found
    if not isinstance(tables, list):
        raise ValueError("detect is a table or a list of [[detect]] tables")
    detections = []
    for index, table in enumerate(tables):
        where = f"detect.{index}"
        if not isinstance(table, dict):
            raise ValueError(f"{where}: a table")
        unknown = set(table) - {"scenario", "metric", "shift", "sd"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: metric, scenario, sd, shift)")
        if not isinstance(table.get("metric"), str) or not table["metric"]:
            raise ValueError(f"{where}.metric: a metric's name, as the statistics name it")
        for key in ("shift", "sd"):
            value = table.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{where}.{key}: a number above 0, not {value!r}")
        scenario = table.get("scenario")
        if scenario is not None and not isinstance(scenario, str):
            raise ValueError(f"{where}.scenario: a scenario's name")
        detections.append(Detect(metric=table["metric"], shift=float(table["shift"]), sd=float(table["sd"]),
                                 scenario=scenario))
    return tuple(detections)


def selects(selector: str, backend: str, strategy: str) -> bool:
    """A claim's selector, "backend" or "backend/strategy", against one cell's backend and strategy."""
    wanted_backend, _, wanted_strategy = selector.partition("/")
    return canonical_name(backend) == canonical_name(wanted_backend) and (not wanted_strategy or strategy == wanted_strategy)


def _strategy_on(backend: str, strategy: str) -> str:
    """A strategy as a backend runs it: "default" is the backend's own; an unknown backend is refused later."""
    try:
        return profile(backend).strategy(strategy)
    except ValueError:
        return strategy


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def find_campaign(name: str) -> Path:
    """A path, or the name of a built-in campaign (with or without .toml)."""
    found = find_file(name, BUILTIN_CAMPAIGNS)
    if found is not None:
        return found
    raise ScenarioError(name, [Problem("file", None, "no such campaign file, and no built-in campaign of that "
                                                     f"name (built-in: {', '.join(builtin_names())})")])


def builtin_names() -> list[str]:
    return sorted(path.stem for path in BUILTIN_CAMPAIGNS.glob("*.toml"))


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign file and every scenario it names; all problems at once."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ScenarioError(str(path), [Problem("file", None, f"cannot read: {error.strerror}")]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        raise ScenarioError(str(path), [Problem("toml", int(line.group(1)) if line else None, str(error))]) from None
    return _Reader(path, text, data).campaign()


def campaign_from_text(text: str, source: str) -> Campaign:
    """A campaign made on the spot (`compare --strategies ...`), checked as a file would be; `source` names it
    in messages, and a relative scenario path is resolved from the working directory."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(source, [Problem("toml", None, str(error))]) from None
    return _Reader(Path(source), text, data).campaign()


class _Reader:
    """Turns the parsed TOML into a Campaign, collecting every problem instead of stopping at one."""

    TOP_KEYS = {"name", "description", "repetitions", "seed", "matrix", "claims", "detect",   # detect: summary.power
                "invalid_runs"}
    INVALID_RUNS = ("replace", "keep")
    BLOCK_KEYS = {"scenario", "backends", "strategies", "set", "sweep", "paired", "repetitions"}
    CLAIM_KEYS = {"says", "scenario", "metric", "higher", "lower"}

    def __init__(self, path: Path, text: str, data: dict) -> None:
        self.path, self.text, self.data = path, text, data
        self.lines = LineIndex(text)
        self.problems: list[Problem] = []

    def fail(self, where: tuple, message: str) -> None:
        self.problems.append(Problem(".".join(str(part) for part in where), self.lines.line_of(where), message))

    def campaign(self) -> Campaign:
        data = self.data
        for key in sorted(set(data) - self.TOP_KEYS):
            self.fail((key,), f"unknown key (known: {', '.join(sorted(self.TOP_KEYS))})")
        name = data.get("name", self.path.stem)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            self.fail(("name",), "a campaign name is letters, digits, '.', '_' or '-'")
        repetitions = self.integer(data, "repetitions", (), default=5, low=1)
        seed = self.integer(data, "seed", (), default=1, low=0)
        invalid_runs = data.get("invalid_runs", "replace")
        if invalid_runs not in self.INVALID_RUNS:
            self.fail(("invalid_runs",), f"must be one of {', '.join(map(repr, self.INVALID_RUNS))}, not {invalid_runs!r}")
            invalid_runs = "replace"
        blocks = data.get("matrix")
        if not isinstance(blocks, list) or not blocks:
            self.fail(("matrix",), "at least one [[matrix]] block is needed")
            blocks = []
        cells: list[Cell] = []
        for index, block in enumerate(blocks):
            cells += self.block(block, ("matrix", index), seed, repetitions)
        keys = [cell.key for cell in cells]
        for key in sorted({key for key in keys if keys.count(key) > 1}):
            self.fail(("matrix",), f"cell {key} is declared twice")
        claims = data.get("claims", [])
        if not isinstance(claims, list):
            self.fail(("claims",), "claims is a list of [[claims]] tables")
            claims = []
        parsed = [self.claim(claim, ("claims", index), cells) for index, claim in enumerate(claims)]
        try:
            declared_detections(self.text)
        except ValueError as error:
            self.fail(("detect",), str(error))
        if self.problems:
            raise ScenarioError(str(self.path), sorted(self.problems, key=lambda problem: problem.line or 0))
        return Campaign(name=name, description=str(data.get("description", "")), source=str(self.path),
                        text=self.text, repetitions=repetitions, seed=seed, cells=tuple(cells),
                        claims=tuple(claim for claim in parsed if claim is not None), invalid_runs=invalid_runs)

    def integer(self, table: dict, key: str, where: tuple, *, default: int, low: int) -> int:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.fail((*where, key), f"must be a whole number >= {low}, not {value!r}")
            return default
        return value

    def strings(self, table: dict, key: str, where: tuple) -> list[str] | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value) or not value:
            self.fail((*where, key), "must be a non-empty list of strings")
            return None
        return value

    def claim(self, claim: object, where: tuple, cells: list[Cell]) -> Claim | None:
        if not isinstance(claim, dict):
            self.fail(where, "a [[claims]] entry is a table")
            return None
        for key in sorted(set(claim) - self.CLAIM_KEYS):
            self.fail((*where, key), f"unknown key (known: {', '.join(sorted(self.CLAIM_KEYS))})")
        for key in sorted(self.CLAIM_KEYS - set(claim)):
            self.fail((*where, key), "missing")
        if self.CLAIM_KEYS - set(claim):
            return None
        for key in ("says", "scenario", "metric"):
            if not isinstance(claim[key], str) or not claim[key]:
                self.fail((*where, key), "must be a non-empty string")
                return None
        sides = {key: self.strings(claim, key, where) for key in ("higher", "lower")}
        if None in sides.values():
            return None
        in_scenario = [cell for cell in cells if cell.scenario == claim["scenario"]]
        if not in_scenario:
            self.fail((*where, "scenario"), f"no cell of the matrix runs scenario {claim['scenario']!r}")
            return None
        for key, selectors in sides.items():
            for selector in selectors:
                if not any(selects(selector, cell.backend, cell.strategy) for cell in in_scenario):
                    self.fail((*where, key), f"{selector!r} names no cell of {claim['scenario']} "
                                             "(a backend, or backend/strategy)")
        return Claim(says=claim["says"], scenario=claim["scenario"], metric=claim["metric"],
                     higher=tuple(sides["higher"]), lower=tuple(sides["lower"]))

    def block(self, block: object, where: tuple, seed: int, repetitions: int) -> list[Cell]:
        if not isinstance(block, dict):
            self.fail(where, "a [[matrix]] entry is a table")
            return []
        for key in sorted(set(block) - self.BLOCK_KEYS):
            self.fail((*where, key), f"unknown key (known: {', '.join(sorted(self.BLOCK_KEYS))})")
        scenario_path = self.scenario_path(block.get("scenario"), where)
        common = self.strings(block, "set", where) or []
        repetitions = self.integer(block, "repetitions", where, default=repetitions, low=1)
        sweep = block.get("sweep", {})
        if not isinstance(sweep, dict) or not all(isinstance(v, list) and v for v in sweep.values()):
            self.fail((*where, "sweep"), "sweep maps a dotted key to a non-empty list of values")
            sweep = {}
        points = self.sweep_points(block, sweep, where)
        if scenario_path is None:
            return []
        try:
            base = load(scenario_path, overrides=common)
        except ScenarioError as error:
            self.fail((*where, "scenario"), f"{scenario_path.name} with set={common}: " + "; ".join(error.lines()))
            return []
        backends = [canonical_name(name) for name in self.strings(block, "backends", where) or base.backends]
        strategies = self.strings(block, "strategies", where) or [base.group.strategy]
        cells = []
        # "default" is each backend's own strategy: a cell names the one it runs (kip848/uniform, classic/range)
        chosen = [(backend, strategy) for backend in backends
                  for strategy in dict.fromkeys(_strategy_on(backend, name) for name in strategies)]
        for (backend, strategy), values in itertools.product(chosen, points):
            cell = Cell(scenario=base.name, scenario_path=scenario_path, backend=backend, strategy=strategy,
                        sweep=tuple(zip(sweep, values, strict=True)), common=tuple(common),
                        repetitions=repetitions)
            if self.cell_loads(cell, where, seed, base):
                cells.append(cell)
        return cells

    def sweep_points(self, block: dict, sweep: dict, where: tuple) -> list[tuple]:
        """Every combination of the sweep's values; with `paired = true`, the values at each position of lists
        of one length (a service time's median with its 99th percentile, say)."""
        paired = block.get("paired", False)
        if not isinstance(paired, bool):
            self.fail((*where, "paired"), f"must be true or false, not {paired!r}")
            paired = False
        if not paired or not sweep:
            return list(itertools.product(*sweep.values()))
        lengths = {len(values) for values in sweep.values()}
        if len(lengths) > 1:
            self.fail((*where, "sweep"), f"paired = true needs lists of one length, got {sorted(lengths)}")
            return []
        return list(zip(*sweep.values(), strict=True))

    def scenario_path(self, value: object, where: tuple) -> Path | None:
        if not isinstance(value, str) or not value:
            self.fail((*where, "scenario"), "names a scenario file or a built-in scenario")
            return None
        beside = find_file(str(self.path.parent / value), BUILTIN_SCENARIOS)
        if beside is not None and (beside.resolve() == self.path.resolve()
                                   or beside.resolve().parent == BUILTIN_CAMPAIGNS.resolve()):
            beside = None   # a campaign file, not a scenario: the built-in campaign `seed002` runs scenario `seed002`
        found = beside or find_file(value, BUILTIN_SCENARIOS)
        if found is not None:
            return found
        self.fail((*where, "scenario"), f"no scenario {value!r} (neither a file next to the campaign nor built in)")
        return None

    def cell_loads(self, cell: Cell, where: tuple, seed: int, base: Scenario) -> bool:
        """The cell's scenario must load, name the backend, and pass the backend's own settings check."""
        if cell.backend not in base.backends:
            self.fail((*where, "backends"), f"scenario {base.name} does not run on {cell.backend!r} "
                                            f"(its backends: {', '.join(base.backends)})")
            return False
        try:
            check_member_settings(load(cell.scenario_path, overrides=cell.overrides(seed)), profile(cell.backend))
        except ScenarioError as error:
            self.fail((*where,), f"cell {cell.key}: " + "; ".join(error.lines()))
            return False
        return True
