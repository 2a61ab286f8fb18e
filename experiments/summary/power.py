"""The power a campaign is sized by: the smallest shift it is meant to detect, declared in its file before
the runs (`experiments.campaign.model.Detect`), and the number of runs a cell that detects it 80% of the
time with the lab's own test.

    [[detect]]                       # any number of them
    scenario = "split-brain-a"       # optional: the scenario the shift is expected in
    metric = "duplicates"
    shift = 30                       # the smallest shift worth finding, in the metric's unit
    sd = 15                          # the run-to-run standard deviation expected (from earlier runs)

The test is a declared claim's: the one-sided exact Mann-Whitney test of one pair, at Holm's strictest
step over the file's k claims, alpha / k (a claim's first step; later steps are easier, so the power errs
low). Runs are drawn from normal distributions `shift` apart with standard deviation `sd`, and a pair is
detected when its U reaches the exact test's critical value (`inference._u_cdf`, the distribution
`inference.exact_p` uses for untied data). The draws are seeded: the figures are the same on every machine.
"""

from __future__ import annotations

import numpy as np

from experiments.campaign.model import Detect
from experiments.summary.inference import ALPHA, MIN_RUNS, _u_cdf

TARGET = 0.80
SIMULATIONS = 2000
MOST_RUNS = 50
SEED = 34


def critical_u(n: int, threshold: float) -> int:
    """The smallest U (pairs where the higher cell's run is above the lower's) whose one-sided exact p,
    P(U >= u), is at most `threshold`; n * n + 1 when none is."""
    cdf = _u_cdf(n, n)
    for u in range(n * n + 1):
        upper = 1.0 - (cdf[u - 1] if u else 0.0)
        if upper <= threshold + 1e-12:
            return u
    return n * n + 1


def detected(a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
    """Per row of a and b (simulated pairs of cells of n runs), whether the one-sided exact test rejects."""
    u = (b[:, :, None] > a[:, None, :]).sum(axis=(1, 2))
    return u >= critical_u(a.shape[1], threshold)


def power(n: int, shift: float, sd: float, *, k: int = 1, simulations: int = SIMULATIONS, seed: int = SEED) -> float:
    """The share of simulated pairs of n runs a cell, `shift` apart, that the test detects at ALPHA / k."""
    rng = np.random.default_rng([seed, n])
    a = rng.normal(0.0, sd, size=(simulations, n))
    b = rng.normal(shift, sd, size=(simulations, n))
    return float(detected(a, b, ALPHA / max(k, 1)).mean())


def runs_for_power(shift: float, sd: float, *, k: int = 1, target: float = TARGET,
                   most: int = MOST_RUNS) -> tuple[int | None, float]:
    """The fewest runs a cell (at least MIN_RUNS) whose power reaches `target`, and that power; None when
    even `most` runs do not."""
    reached = 0.0
    for n in range(MIN_RUNS, most + 1):
        reached = power(n, shift, sd, k=k)
        if reached >= target:
            return n, reached
    return None, reached


def power_line(detect: Detect, k: int, ran: int | None = None) -> str:
    """One sentence: the shift, the n that gives it 80% power and the power of the n the campaign ran."""
    n, reached = runs_for_power(detect.shift, detect.sd, k=k)
    where = f" in {detect.scenario}" if detect.scenario else ""
    needs = (f"{TARGET:.0%} power needs n = {n} a cell ({reached:.0%})" if n is not None
             else f"{MOST_RUNS} runs a cell reach only {reached:.0%} power")
    line = (f"{detect.metric}{where}: a shift of {detect.shift:,.6g} with a run-to-run sd of {detect.sd:,.6g} "
            f"({detect.shift / detect.sd:.2g} sd): {needs}; one-sided exact test at {ALPHA:g}/{max(k, 1)} = "
            f"{ALPHA / max(k, 1):.2g}")
    if ran is not None:
        line += (f"; the campaign ran n = {ran}, power {power(ran, detect.shift, detect.sd, k=k):.0%}"
                 if ran >= 2 else f"; the campaign ran n = {ran}")
    return line + "."


def power_markdown(detections: list[Detect], k: int, ran: dict[Detect, int | None] | None = None) -> str:
    if not detections:
        return ""
    lines = ["## Power\n",
             f"The smallest shift each campaign file says it is meant to detect, and the runs a cell that detect it "
             f"{TARGET:.0%} of the time: {SIMULATIONS:,} simulated pairs of normal runs per n, the one-sided exact "
             f"test at Holm's strictest step over the k = {k} declared claims (later steps are easier, so the "
             f"figures err low). A claim of several pairs needs every pair: its power is lower.\n"]
    lines += [f"- {power_line(detect, k, (ran or {}).get(detect))}" for detect in detections]
    return "\n".join(lines) + "\n"
