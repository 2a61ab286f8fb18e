"""Power: the runs a cell needs to detect a declared shift 80% of the time with the lab's own test.

- the simulation's rejections are exactly those of `inference.exact_p` (one-sided) on the same draws;
- known points: a shift of 2 sd at Holm's first step over 6 claims needs 8 runs a cell, 5 give about half;
  a 1 sd shift needs 15 at alpha 0.05;
- a campaign file's `[[detect]]` tables are read and checked, the campaign loader accepts them, and the
  `power` command prints the n.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.campaign import load_campaign
from experiments.campaign.model import Detect, declared_detections
from experiments.cli.app import app
from experiments.scenario import ScenarioError
from experiments.summary.inference import ONE_SIDED, exact_p
from experiments.summary.power import detected, power, runs_for_power
from tests.fixtures.scenarios import tiny_join


@pytest.mark.parametrize("n", [5, 7])
def test_the_simulated_test_is_the_exact_one_sided_test(n):
    rng = np.random.default_rng(n)
    a, b = rng.normal(size=(300, n)), rng.normal(1.0, size=(300, n))
    threshold = 0.05 / 6
    expected = [exact_p(a[i], b[i], sides=ONE_SIDED) <= threshold for i in range(len(a))]
    assert list(detected(a, b, threshold)) == expected


def test_known_points():
    assert runs_for_power(30, 15, k=6)[0] == 8
    assert 0.4 < power(5, 30, 15, k=6) < 0.65
    assert runs_for_power(1, 1, k=1)[0] == 15
    assert power(5, 0.0, 1.0, k=1) <= 0.06                    # no shift: the test's own size


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
    assert "80% power needs n = 5 a cell (86%); one-sided exact test at 0.05/1" in result.stdout   # no claims: k = 1
    assert "the campaign ran n = 5" in result.stdout
    with pytest.raises(ValueError, match="sd"):
        declared_detections('[[detect]]\nmetric = "m"\nshift = 3\nsd = 0\n')
    # a key that strays into a detect table (TOML puts every key after [[detect]] in it) stops the loader
    (tmp_path / "stray.toml").write_text(CAMPAIGN.replace("sd = 15", "sd = 15\nseed = 7"))
    with pytest.raises(ScenarioError, match=r"detect.*unknown keys \['seed'\]"):
        load_campaign(tmp_path / "stray.toml")


# The campaigns the results page is made from, and so the family its Holm adjustment runs over.
RESULTS_PAGE = ("seed002", "seed002-mixed", "split-brain-ab", "split-brain-cd", "herd-defaults")


def test_every_campaign_of_the_results_page_is_sized_for_the_shift_it_declares():
    from experiments.campaign import find_campaign

    campaigns = [load_campaign(find_campaign(name)) for name in RESULTS_PAGE]
    k = sum(len(campaign.claims) for campaign in campaigns)
    assert k == 19
    for campaign in campaigns:
        detections = declared_detections(campaign.text)
        assert detections, f"{campaign.name} declares no shift to size it by"
        claimed = {claim.metric for claim in campaign.claims}
        for detect in detections:
            assert detect.metric in claimed, f"{campaign.name}: {detect.metric} is no claim's metric"
            needed, _ = runs_for_power(detect.shift, detect.sd, k=k)
            assert needed is not None and min(cell.repetitions for cell in campaign.cells) >= needed, \
                f"{campaign.name}: {detect.metric} needs {needed} runs a cell at k = {k}"
