"""The pages the lab writes, opened in a real browser (headless Chromium) at 1,366 x 768, as a reader
first sees them: the demo's report, a campaign's report and a single run's report.

For each page: nothing scrolls sideways, with every <details> closed and with all of them open; the
findings ("What these runs show") are on the first screen; and no table outside a collapsed section
has more columns than the backends plus two. A screenshot of each first screen is kept in
.lab/artefacts/report-pages/ (the path is printed).

The inputs are synthetic runs (experiments.synthetic.simulation) laid out as the demo and a campaign lay out real
ones, summarised by Spark, so the test takes seconds rather than the demo's minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.synthetic.anomalies import Anomaly
from experiments.synthetic.simulation import Change, SyntheticRun, write_run
from tests.fixtures.page_check import Browser
from tests.fixtures.scenarios import tiny_join
from tests.fixtures.spark import layout_summarised_with_the_suite

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ARTEFACTS = Path(__file__).resolve().parent.parent / ".lab" / "artefacts" / "report-pages"
HERD_TIMELINE = (Change(at_s=4.0, action="join"), Change(at_s=8.0, action="leave"))
SPLIT_ANOMALIES = {   # what the demo's split brain shows: double ownership everywhere, the rest apart
    "legacy": frozenset({Anomaly.DOUBLE_OWNERSHIP, Anomaly.DUPLICATE, Anomaly.OFFSET_REGRESSION}),
    "classic": frozenset({Anomaly.DOUBLE_OWNERSHIP, Anomaly.FENCED_COMMIT}),
    "kip848": frozenset({Anomaly.DOUBLE_OWNERSHIP, Anomaly.FENCED_COMMIT}),
}


@pytest.fixture(scope="module")
def browser():
    with Browser() as opened:
        yield opened


def _look(browser: Browser, page: Path, name: str, columns: int) -> None:
    view = browser.view(page, screenshot=ARTEFACTS / f"{name}.png")
    print("\n".join(view.lines()))
    assert view.fits, view.lines()
    assert view.findings_first, view.lines()
    assert view.widest_table <= columns + 2, view.lines()


def _pages_runs(tmp_path: Path) -> list[Path]:
    """The demo's runs (in `tmp_path`/demo, 9 of them) and a small campaign's (in `tmp_path`/campaign), written
    synthetic: their folders, the demo's first, for the suite's Spark pass."""
    from experiments.campaign import load_campaign
    from experiments.campaign.execute import open_folder
    from experiments.campaign.manifest import COMPLETED
    from experiments.folders.campaign_folder import CampaignFolder

    tmp_path.mkdir(parents=True)
    root = tmp_path / "demo"
    backends = ("legacy", "classic", "kip848")
    runs = [(root / "split-brain" / backend, None, backend) for backend in backends]
    runs += [(root / f"herd-{size}" / backend, size, backend) for size in (8, 4) for backend in backends]
    for run_dir, size, backend in runs:
        if size is None:
            config = SyntheticRun(name="demo-split-brain", backend=backend, duration_s=16.0, rate=60.0,
                                  anomalies=SPLIT_ANOMALIES[backend])
        else:
            config = SyntheticRun(name="demo-herd", backend=backend, members=size, partitions=2 * size,
                                  duration_s=12.0, rate=60.0, timeline=HERD_TIMELINE)
        write_run(run_dir, config)

    (tmp_path / "small-herd.toml").write_text(SCENARIO)
    (tmp_path / "pages.toml").write_text(CAMPAIGN)
    campaign = load_campaign(tmp_path / "pages.toml")
    folder = tmp_path / "campaign"
    manifest = open_folder(campaign, folder)
    for planned in campaign.plan():
        size = int(dict(planned.cell.sweep)["group.members"])
        anomalies = frozenset({Anomaly.DUPLICATE}) if planned.cell.backend == "legacy" else frozenset()
        write_run(CampaignFolder(folder).run(planned.name).path, SyntheticRun(
            name=planned.name, backend=planned.cell.backend, seed=planned.seed, members=size, partitions=2 * size,
            duration_s=12.0, rate=60.0, timeline=HERD_TIMELINE, anomalies=anomalies))
        manifest.runs[planned.name].status = COMPLETED
    manifest.write(folder)
    return [run_dir for run_dir, _, _ in runs] + [CampaignFolder(folder).run(name).path for name in manifest.runs]


layout_summarised_with_the_suite("report-pages", _pages_runs)


@pytest.fixture(scope="module")
def summarised(synthetic_runs):
    """The demo's runs and a small campaign's, summarised in the suite's Spark pass: (the demo's folder, its run
    folders, the campaign folder)."""
    layout = synthetic_runs["report-pages"]
    return layout.root / "demo", [summary.folder.path for summary in layout.summaries[:9]], layout.root / "campaign"


def test_the_demo_report_opens_on_its_findings_and_fits_the_screen(summarised, browser):
    from experiments.report.run_report import write_report

    root, runs, _ = summarised
    report = write_report(runs, root)

    page = report.html.read_text()
    assert page.index("id=findings") < page.index("class=scenario")
    split, herd = report.findings
    assert split.scenario == "demo-split-brain" and "on all three backends" in split.text
    assert "offset regressions" in split.text.lower() and "only on legacy" in split.text
    assert "Requests per join at N = 4 / 8: legacy" in herd.text and "Requests per leave at N = 4 / 8" in herd.text
    markdown = report.markdown.read_text()
    assert (markdown.index("## What these runs show") < markdown.index("## demo-split-brain")
            < markdown.index("### Checks") < markdown.index("<details>") < markdown.index("## demo-herd"))
    _look(browser, report.html, "demo-report", 3)


def test_a_single_run_report_opens_on_its_findings_and_fits_the_screen(synthetic_runs, browser, tmp_path):
    from experiments.report.run_report import write_report

    report = write_report([synthetic_runs["planted"].folder.path], tmp_path / "one")
    assert "VIOLATED (" in report.html.read_text()
    _look(browser, report.html, "run-report", 1)


def test_a_campaign_report_opens_on_its_findings_and_fits_the_screen(summarised, browser):
    from experiments.report.campaign_report import write_campaign_report
    from experiments.statistics.campaign_stats import write_statistics

    folder = summarised[2]
    write_statistics(folder)
    report = write_campaign_report(folder)

    text = report.markdown.read_text()
    assert text.index("## What these runs show") < text.index("## small-herd")
    assert "Requests per join at N = 2 / 4" in text and "Duplicates (1) only on legacy." in text
    _look(browser, report.html, "campaign-report", 2)


SCENARIO = tiny_join("small-herd")

CAMPAIGN = """\
name = "pages"
repetitions = 2
seed = 40

[[matrix]]
scenario = "small-herd.toml"
backends = ["legacy", "classic"]
sweep = { "group.members" = [2, 4] }
"""
