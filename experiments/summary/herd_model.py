"""The herd's cost model: what one membership change costs, fitted by least squares over a sweep.

A log-log slope through three points cannot tell N x N reads from per-partition work and a per-member
constant; a model with one term per step of the protocol can. Each backend's profile names its terms
(`BackendProfile.herd_cost_terms`):

- legacy:   requests = a·N² + b·N + c·P + d. In 0.8 every member re-reads every registration (N x N), runs
  a fixed number of requests of its own (N), and releases, claims and reads the offset of each partition
  (P) whoever owns it;
- classic:  requests = a·N + d. Every member rejoins and syncs behind the group-wide barrier;
- kip848:   requests = a·M + d, M the members whose assignment changed. The others only heartbeat.

N is the group's size before the change, P its partition count. When P is the same multiple of N in every
run (the herd scenarios give each member two partitions), P and N cannot be told apart: the P term is
dropped and its share is in b, which the fit says. When P is the same at every N (a sweep inside one run,
demo-herd-sweep: P fixed at the largest size's 2N), the P term is part of the constant d: legacy's model is
then a·N² + b·N + d. Likewise when every join moved the same number of members M (a sticky assignor such
as KIP-848's `uniform` moves the newcomer and one or two others at any N): the M term cannot be told from
the constant, and the model is the constant.

One model per backend and strategy (a line of the herd plot): kip848 with `range` and with `uniform` are
two protocols' worth of difference. Changes marked `overlapped` (the next change began before this one
was stable, experiments.summary.herd.overlapping) carry part of each other's cost: they are left out, and
the model says how many.

Spread: one fit per repetition (the r-th run of every cell), so a coefficient is a median [min-max] over
the repetitions' fits, with n, the way every other number of the lab is given. A fit needs at least
`MIN_SIZES` group sizes and more points than terms; otherwise there is no fit, and the reason is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.summary.herd_sizes import by_size
from rebalance.backends import profile

MIN_SIZES = 4        # a fit on fewer distinct group sizes is not given
TERM_LABELS = {"N2": "N²", "N": "N", "P": "P", "moved": "M", "1": ""}
TERM_MEANING = {"N2": "per member squared", "N": "per member", "P": "per partition",
                "moved": "per member whose assignment changed", "1": "constant"}


@dataclass(frozen=True, kw_only=True)
class Coefficient:
    term: str
    median: float
    low: float
    high: float


@dataclass(frozen=True, kw_only=True)
class HerdModel:
    """One backend's fitted model for one kind of change (a join or a leave)."""

    backend: str
    kind: str
    terms: tuple[str, ...]
    coefficients: tuple[Coefficient, ...]
    strategy: str = ""
    fits: int                        # repetitions fitted (n of the spread)
    points: int                      # changes in the largest fit
    sizes: tuple[int, ...]           # the group sizes N covered
    partitions: tuple[int, ...]      # the partition counts P covered
    folded: str = ""                 # a term that could not be separated from another, and why
    residuals: pd.DataFrame | None = None   # per point of the first fit: N, P, M, measured, fitted
    left_out: int = 0                # overlapped changes not fitted

    @property
    def label(self) -> str:
        """`kip848 (uniform)`: the backend and the strategy its runs used."""
        return line_label(self.backend, self.strategy)

    @property
    def formula(self) -> str:
        parts = []
        for coefficient in self.coefficients:
            label = TERM_LABELS[coefficient.term]
            value = _number(coefficient.median)
            parts.append(f"{value}·{label}" if label else value)
        return " + ".join(parts).replace("+ -", "- ")

    @property
    def spread(self) -> str:
        if self.fits < 2:
            return "n = 1 fit: no spread"
        ranges = ", ".join(f"{TERM_LABELS[c.term] or 'constant'} [{_number(c.low)}, {_number(c.high)}]"
                           for c in self.coefficients)
        return f"median of n = {self.fits} fits, one per repetition; [min, max]: {ranges}"

    @property
    def worst_residual(self) -> float:
        """The largest |measured - fitted| / measured of the first fit's points."""
        if self.residuals is None or self.residuals.empty:
            return float("nan")
        measured = self.residuals["measured"].clip(lower=1)
        return float(((self.residuals["measured"] - self.residuals["fitted"]).abs() / measured).max())

    def sentence(self) -> str:
        residual = self.worst_residual
        fit = f"largest residual {residual:.0%}" if residual == residual else ""
        note = f"; {self.folded}" if self.folded else ""
        return (f"{self.label}: requests per {self.kind} ≈ {self.formula} "
                f"({len(self.sizes)} sizes N = {_sizes(self.sizes)}, {self.spread}; {fit}{note}"
                f"{left_out_note(self.left_out)})")


@dataclass(frozen=True, kw_only=True)
class NoFit:
    backend: str
    kind: str
    reason: str
    strategy: str = ""
    left_out: int = 0

    @property
    def label(self) -> str:
        return line_label(self.backend, self.strategy)

    def sentence(self) -> str:
        return f"{self.label}: no model for the {self.kind} ({self.reason}{left_out_note(self.left_out)})"


def line_label(backend: str, strategy: str) -> str:
    """A herd line's name: the backend, and in brackets the strategy its runs used."""
    return f"{backend} ({strategy})" if strategy else backend


def left_out_note(count: int) -> str:
    return (f"; {count} overlapped change{'s' if count != 1 else ''} left out (the next began before it was "
            "stable)") if count else ""


def change_rows(runs) -> pd.DataFrame:
    """One row per change to a group of a run's size (RunData.herd_changes; a sweep inside one run gives its
    changes at each size, herd_sizes.by_size): backend, kind, N, P, M, requests, and the cell and order that
    make repetitions."""
    rows = []
    for run in by_size(runs):
        changes = run.herd_changes()
        if run.group_size is None or changes.empty:
            continue
        partitions = int(run.facts.partitions or sum(run.record.topics.values()))
        for change in changes.itertuples():
            rows.append({"run": str(run.run_dir), "backend": run.backend,
                         "strategy": run.strategy, "kind": change.kind,
                         "N": int(run.group_size), "P": partitions,
                         "M": float(getattr(change, "members_moved", np.nan)), "requests": float(change.requests),
                         "last_assignment_s": _float(getattr(change, "last_assignment_s", None)),
                         "settled_s": _float(getattr(change, "settled_s", None)),
                         "stop_the_world_s": _float(getattr(change, "stop_the_world_s", None)),
                         "unowned_partition_s": _float(getattr(change, "unowned_partition_s", None)),
                         "overlapped": bool(getattr(change, "overlapped", False)),
                         "repetition": 0})
    return pd.DataFrame(rows)


def fit_models(rows: pd.DataFrame, kinds: tuple[str, ...] = ("join", "leave")) -> list[HerdModel | NoFit]:
    """Per backend, strategy and kind of change, the model of its profile fitted per repetition."""
    if rows.empty:
        return []
    rows = rows if "strategy" in rows else rows.assign(strategy="")
    models: list[HerdModel | NoFit] = []
    for (backend, strategy, kind), group in rows.groupby(["backend", "strategy", "kind"], sort=True):
        if kind in kinds:
            models.append(fit_one(str(backend), str(kind), group, strategy=str(strategy)))
    return models


def fit_one(backend: str, kind: str, rows: pd.DataFrame, *, strategy: str = "") -> HerdModel | NoFit:
    terms = list(profile(backend).herd_cost_terms)
    overlapped = rows["overlapped"].fillna(False).astype(bool) if "overlapped" in rows else pd.Series(False, rows.index)
    left_out = int(overlapped.sum())
    rows = _with_repetitions(rows[~overlapped])
    named = {"backend": backend, "kind": kind, "strategy": strategy, "left_out": left_out}
    if rows.empty:
        return NoFit(**named, reason="no change that did not overlap another")
    folded = ""
    if "P" in terms and rows["P"].nunique() == 1:
        terms.remove("P")
        folded = f"P = {int(rows['P'].iloc[0])} in every run, so the per-partition term is part of the constant"
    elif "P" in terms and _p_follows_n(rows):
        terms.remove("P")
        ratio = int(round((rows["P"] / rows["N"]).iloc[0]))
        folded = f"P = {ratio}N in every run, so the per-partition term is part of the N term"
    if "moved" in terms and rows["M"].isna().all():
        return NoFit(**named, reason="the runs do not record which members' assignments changed")
    if "moved" in terms and rows["M"].nunique() == 1:
        terms.remove("moved")
        folded = (f"M = {rows['M'].iloc[0]:.0f} in every {kind}, so the per-member term cannot be told from "
                  "the constant")
    sizes = tuple(sorted(rows["N"].unique()))
    if len(sizes) < MIN_SIZES:
        return NoFit(**named, reason=f"{len(sizes)} group sizes; a fit needs at least {MIN_SIZES}")
    fits, first_residuals, largest = [], None, 0
    for _, repetition in rows.groupby("rep"):
        if repetition["N"].nunique() < MIN_SIZES or len(repetition) <= len(terms):
            continue
        design = _design(repetition, terms)
        measured = repetition["requests"].to_numpy(dtype=float)
        solution, *_ = np.linalg.lstsq(design, measured, rcond=None)
        fits.append(solution)
        largest = max(largest, len(repetition))
        if first_residuals is None:
            first_residuals = repetition[["N", "P", "M"]].assign(measured=measured, fitted=design @ solution)
    if not fits:
        return NoFit(**named, reason=f"no repetition covers {MIN_SIZES} group sizes")
    values = np.array(fits)
    coefficients = tuple(Coefficient(term=term, median=float(np.median(values[:, i])), low=float(values[:, i].min()),
                                     high=float(values[:, i].max())) for i, term in enumerate(terms))
    return HerdModel(backend=backend, kind=kind, strategy=strategy, terms=tuple(terms), coefficients=coefficients,
                     fits=len(fits), points=largest, sizes=tuple(int(n) for n in sizes),
                     partitions=tuple(sorted(int(p) for p in rows["P"].unique())), folded=folded,
                     residuals=first_residuals, left_out=left_out)


def curve(model: HerdModel, sizes: np.ndarray, *, partitions: np.ndarray | float | None = None,
          moved: np.ndarray | None = None) -> np.ndarray:
    """The model's requests at group sizes `sizes`, with `partitions` (P; for a folded model, none is needed)
    and `moved` (M; N where not given)."""
    values = {"N2": sizes ** 2, "N": sizes, "P": partitions if partitions is not None else np.zeros_like(sizes),
              "moved": moved if moved is not None else sizes, "1": np.ones_like(sizes)}
    return sum(c.median * values[c.term] for c in model.coefficients)


def _design(rows: pd.DataFrame, terms: list[str]) -> np.ndarray:
    n = rows["N"].to_numpy(dtype=float)
    columns = {"N2": n ** 2, "N": n, "P": rows["P"].to_numpy(dtype=float), "moved": rows["M"].to_numpy(dtype=float),
               "1": np.ones(len(rows))}
    return np.column_stack([columns[term] for term in terms])


def _p_follows_n(rows: pd.DataFrame) -> bool:
    ratio = rows["P"] / rows["N"]
    return bool(np.allclose(ratio, ratio.iloc[0]))


def _with_repetitions(rows: pd.DataFrame) -> pd.DataFrame:
    """`rep`: the campaign's repetition where runs carry one, else the run's rank within its cell (backend,
    N, P) in the order of their folders, so that the first runs of every cell make the first fit."""
    rows = rows.copy()
    if rows["repetition"].nunique() > 1:
        rows["rep"] = rows["repetition"]
        return rows
    order = rows[["backend", "N", "P", "run"]].drop_duplicates().sort_values("run")
    order["rep"] = order.groupby(["backend", "N", "P"]).cumcount()
    return rows.merge(order, on=["backend", "N", "P", "run"])


def _float(value) -> float:
    return float(value) if value is not None and value == value else float("nan")


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _sizes(sizes: tuple[int, ...]) -> str:
    return ", ".join(f"{n:,}" for n in sizes)
