"""The results page sets seed 002's published table beside the lab's classic cells, phase by phase."""

from __future__ import annotations

import pandas as pd

from experiments.report.seed002_table import ARTICLE, seed002_section
from experiments.statistics.campaign_stats import WHOLE_RUN_LOST, cell_statistics


def _runs(strategy: str, values: list[float], metric: str, backend: str = "classic") -> list[dict]:
    return [{"campaign": "seed002", "run": f"{strategy}-{i}", "scenario": "seed002", "backend": backend,
             "strategy": strategy, "sweep": "-", "repetition": i, "seed": i, "commit": "f" * 40, "n": 50,
             "at_once": 1, "parallel": False, "metric": metric, "value": value} for i, value in enumerate(values)]


def test_each_article_figure_sits_beside_the_lab_cell_of_its_strategy():
    runs = pd.DataFrame([*_runs("range", [5000, 5200, 4800, 6100, 5900], "scale-to-50: records lost"),
                         *_runs("range", [5100, 5300, 4900, 6200, 6000], WHOLE_RUN_LOST),
                         *_runs("cooperative-sticky", [0, 0, 3, 0, 1], "scale-to-50: records lost"),
                         *_runs("range", [9, 9, 9, 9, 9], "scale-to-50: records lost", backend="legacy")])
    text = "\n".join(seed002_section(cell_statistics(runs)))
    lines = {line.split("|")[1].strip() + "/" + line.split("|")[2].strip(): line for line in text.splitlines()
             if line.startswith("| ") and not line.startswith("| phase")}
    assert len(lines) == len(ARTICLE)
    down = lines["100 → 50/records over 3 s"]
    assert "| 5,977 | 5,200 [4,800-6,100], n = 5 |" in down          # the article's range, then the lab's
    assert "| 0 | 0 [0-3], n = 5 |" in down                          # cooperative-sticky
    assert "| 114 | - |" in down                                     # roundrobin: no lab cell
    assert "5,300 [4,900-6,200], n = 5" in lines["total/records over 3 s"]
    assert "9 [" not in text                                         # legacy is not the article's protocol


def test_each_seed002_scenario_gets_its_own_table_named_by_how_its_scale_down_leaves():
    runs = pd.DataFrame([*_runs("range", [5000, 5200, 4800, 6100, 5900], "scale-to-50: records lost"),
                         *_runs("range", [0, 0, 0, 1, 0], "scale-to-50: records lost")])
    runs.loc[5:, "scenario"] = "seed002-mixed"
    text = "\n".join(seed002_section(cell_statistics(runs)))
    assert text.count("## Seed 002") == 1 and text.index("### seed002:") < text.index("### seed002-mixed: 49 leavers")
    clean, mixed = text.split("### seed002-mixed")
    assert "5,200 [4,800-6,100], n = 5" in clean and "0 [0-1], n = 5" in mixed


def test_no_section_without_classic_seed002_cells():
    runs = pd.DataFrame(_runs("range", [1, 2, 3, 4, 5], "join: requests per change"))
    runs["scenario"] = "herd"
    assert seed002_section(cell_statistics(runs)) == []
