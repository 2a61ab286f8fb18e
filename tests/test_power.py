"""Power, computed rather than drawn: the chance the claims' test supports a claim under a stated model.

- the integral is the claims' test: at every n and level it agrees with the share of simulated pairs that
  `inference.claim_p` supports (within three binomial standard deviations), for one pair, for a cell of one
  value, and for a claim of two pairs sharing a cell;
- the integral is exact to 0.01 points: ten times the grid moves no figure further;
- known points: 6 runs a cell never reach 0.05/19, 10 runs find a 3 sd shift 48% of the time there, four
  pairs at once about 5%; with no shift the power is at most the test's level;
- a campaign file's `[[detect]]` tables are read and checked, the campaign loader accepts them, and the
  `power` command prints the n;
- every claim of the results page's campaigns gets its own power, and each file's declared spread is the
  largest its claims' cells showed in its data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.campaign import load_campaign
from experiments.campaign.model import Detect, declared_claims, declared_detections
from experiments.cli.app import app
from experiments.scenario import ScenarioError
from experiments.statistics.inference import claim_p_rows, claim_steps, smallest_claim_p
from experiments.statistics.power import (
    Cell,
    claim_power,
    claim_powers,
    declared_points,
    power,
    runs_for_power,
    separation,
    step_at,
)
from tests.fixtures.scenarios import tiny_join

REPOSITORY = Path(__file__).resolve().parent.parent
DRAWS = 40_000


def _simulated(higher: list[Cell], lower: list[Cell], n: int, threshold: float, seed: int) -> float:
    rng = np.random.default_rng(seed)

    def runs(cell: Cell) -> np.ndarray:
        return cell.mean + cell.sd * rng.normal(size=(DRAWS, n))

    lows, highs = [runs(cell) for cell in lower], [runs(cell) for cell in higher]
    return float(np.all([claim_p_rows(low, high) <= threshold for low in lows for high in highs], axis=0).mean())


@pytest.mark.parametrize(("n", "threshold"), [(6, 0.05), (10, 0.05 / 19), (10, 0.05), (14, 0.05 / 19)])
@pytest.mark.parametrize(("higher", "lower"), [
    ([Cell(2.0, 1.0)], [Cell(0.0, 1.0)]),
    ([Cell(36.5, 1.0)], [Cell(36.0, 0.0)]),                           # a cell of one value
    ([Cell(3.0, 2.0)], [Cell(0.0, 1.0), Cell(0.5, 0.0)]),             # two pairs sharing the higher cell
], ids=["one pair", "a constant lower cell", "two pairs sharing a cell"])
def test_the_integral_is_the_claims_test(higher, lower, n, threshold):
    computed = claim_power([(higher, lower)], n, threshold)
    simulated = _simulated(higher, lower, n, threshold, seed=n)
    error = 3 * np.sqrt(max(computed * (1 - computed), 1e-4) / DRAWS)
    assert simulated == pytest.approx(computed, abs=error), (computed, simulated)


def test_the_integral_is_exact_to_a_hundredth_of_a_point():
    for higher, lower, n, (k_lower, k_higher) in [([Cell(3.0, 1.0)], [Cell(0.0, 1.0)], 10, (1, 1)),
                                                    ([Cell(36.0, 0.0)], [Cell(30.0, 3.0)], 10, (2, 2)),
                                                    ([Cell(103.0, 15.2)], [Cell(100.0, 2.3)], 10, (2, 1))]:
        assert separation(higher, lower, n, k_lower, k_higher) == pytest.approx(
            separation(higher, lower, n, k_lower, k_higher, grid=20_001), abs=1e-4)


def test_known_points():
    assert step_at(6, 6, 0.05 / 19) is None and power(6, 10.0, 1.0, k=19) == 0.0   # 0.031 > 0.0026
    assert step_at(10, 10, 0.05 / 19) == (1, 1) and smallest_claim_p(10, 10) < 0.05 / 19
    assert power(10, 3.0, 1.0, k=19) == pytest.approx(0.4816, abs=1e-3)
    assert power(10, 3.0, 1.0, k=19, pairs=4) == pytest.approx(0.4816 ** 4, abs=1e-3)
    assert runs_for_power(declared_points(3.0, 1.0), 0.05 / 19)[0] == 14
    assert power(10, 0.0, 1.0, k=1) <= claim_steps(10, 10)[step_at(10, 10, 0.05).__len__()][2]


CAMPAIGN = """\
name = "tiny"
repetitions = 5

[[matrix]]
scenario = "tiny-join.toml"
backends = ["legacy", "classic"]

[[detect]]
scenario = "tiny-join"
metric = "join: requests per change"
shift = 30
sd = 15
"""


def test_a_campaign_file_declares_its_shifts_and_the_power_command_prints_the_n(tmp_path):
    (tmp_path / "tiny-join.toml").write_text(tiny_join("tiny-join"))
    (tmp_path / "tiny.toml").write_text(CAMPAIGN)
    campaign = load_campaign(tmp_path / "tiny.toml")
    assert declared_detections(campaign.text) == (Detect("join: requests per change", 30.0, 15.0, "tiny-join"),)
    result = CliRunner().invoke(app, ["power", str(tmp_path / "tiny.toml")])
    assert result.exit_code == 0, result.output
    assert "80% power needs n = 14 a cell (80.0%); the claims' test at 0.05/1 = 0.05, computed" in result.stdout
    assert "the campaign ran n = 5, power 0.0%" in result.stdout            # no claims: k = 1; 5/5 never
    #                                                                         reaches 0.05 (1 - (31/32)^2)
    with pytest.raises(ValueError, match="sd"):
        declared_detections('[[detect]]\nmetric = "m"\nshift = 3\nsd = 0\n')
    # a key that strays into a detect table (TOML puts every key after [[detect]] in it) stops the loader
    (tmp_path / "stray.toml").write_text(CAMPAIGN.replace("sd = 15", "sd = 15\nseed = 7"))
    with pytest.raises(ScenarioError, match=r"detect.*unknown keys \['seed'\]"):
        load_campaign(tmp_path / "stray.toml")


# The campaigns the results page is made from, and so the family its Holm adjustment runs over.
RESULTS_PAGE = ("seed002", "seed002-mixed", "split-brain-ab", "split-brain-cd", "herd-defaults")


def test_every_claim_of_the_results_page_gets_its_own_power_and_each_file_the_spread_its_runs_showed():
    from experiments.campaign import find_campaign
    from experiments.report.results_data import read
    from experiments.statistics.claims import claim_pairs

    campaigns = [load_campaign(find_campaign(name)) for name in RESULTS_PAGE]
    k = sum(len(campaign.claims) for campaign in campaigns)
    assert k == 19
    command = next(line for line in (REPOSITORY / "docs" / "results.md").read_text().splitlines()
                   if line.startswith("./lab results "))
    folders = {path.name: path for path in (REPOSITORY / word for word in command.split()[2:]
                                            if word.startswith("docs/results-data/") and not word.endswith(".csv"))}
    for campaign in campaigns:
        data = read(folders[campaign.name])   # the data folder the page is made from, wherever it lies
        claims = declared_claims(campaign.text)
        powers = claim_powers(campaign.name, data.runs, claims, declared_detections(campaign.text), k)
        assert [power.says for power in powers] == [claim.says for claim in claims]
        for detect in declared_detections(campaign.text):
            assert detect.metric in {claim.metric for claim in claims}, f"{campaign.name}: {detect.metric}"
            spreads = [float(np.std(values, ddof=1)) for claim in claims if claim.metric == detect.metric
                       for pair in claim_pairs(data.runs, claim) for values in (pair.lower_values, pair.higher_values)]
            largest = max(spreads)
            if largest:     # the largest its claims' cells showed, to two digits
                assert detect.sd == pytest.approx(largest, rel=0.05), f"{campaign.name}: {detect.metric}"
