"""`rebalance-lab demo` from the command line to the published files: the campaign executor is replaced by one
that writes simulated runs (a herd sweep inside one run per backend, split brain), and the rest is real: the
Spark summary, the report, the printed herd table and verdicts, `--publish DIR`."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli import demo as cli
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.report_folder import ReportFolder

SIZES = (4, 8, 16, 32)


def _sweep_timeline():
    """As demo-herd-sweep: at each size a herd-N mark, a join, its leave; between sizes a bulk growth."""
    from experiments.synthetic.simulation import Change

    steps, t, size = [], 1.0, SIZES[0]
    for n in SIZES:
        if n != size:
            steps += [Change(at_s=t, action="phase", name=f"scale-to-{n}"),
                      Change(at_s=t + 0.1, action="join", count=n - size)]
            size, t = n, t + 2.0
        steps += [Change(at_s=t, action="phase", name=f"herd-{n}"), Change(at_s=t + 0.5, action="join"),
                  Change(at_s=t + 2.5, action="leave")]
        t += 4.5
    return tuple(steps), t


def _fake_execute(campaign, folder, **_):
    from experiments.campaign.execute import Outcome, open_folder
    from experiments.campaign.manifest import COMPLETED
    from experiments.folders.campaign_folder import CampaignFolder
    from experiments.synthetic.anomalies import Anomaly
    from experiments.synthetic.simulation import SyntheticRun, write_run

    manifest = open_folder(campaign, folder)
    timeline, end = _sweep_timeline()
    for planned in campaign.plan():
        cell = planned.cell
        if cell.scenario == cli.SPLIT_BRAIN_SCENARIO:
            config = SyntheticRun(name=cell.scenario, backend=cell.backend, strategy=cell.strategy, duration_s=12.0,
                                  rate=60.0, anomalies=frozenset({Anomaly.DOUBLE_OWNERSHIP}))
        else:
            config = SyntheticRun(name=cell.scenario, backend=cell.backend, strategy=cell.strategy, members=SIZES[0],
                                  partitions=2 * SIZES[-1], duration_s=end + 1.0, rate=60.0, timeline=timeline)
        write_run(CampaignFolder(folder).run(planned.name).path, config)
        manifest.runs[planned.name].status = COMPLETED
    manifest.write(folder)
    return Outcome(folder=folder, manifest=manifest, interrupted=False)


@pytest.mark.spark
def test_the_demo_runs_its_campaign_then_prints_and_publishes_the_sweep_at_every_size(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.campaign.execute", _fake_execute)
    monkeypatch.chdir(tmp_path)   # publish_demo rewrites ./README.md only where it has the markers: none here
    app = typer.Typer()
    cli.register(app)
    app.command("unused")(lambda: None)   # two commands: typer then takes `demo` as a subcommand
    out, published = tmp_path / "demo", tmp_path / "published"
    result = CliRunner().invoke(app, ["demo", "--out", str(out), "--publish", str(published),
                                      "--backends", "legacy,classic", "--master", "local[2]"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "4 runs, 3 at a time" in text
    for backend in ("legacy", "classic"):   # a row per size, from one run per backend
        rows = [line.split() for line in text.splitlines() if line.split()[:2] == [backend, "range"]]
        assert [row[2] for row in rows] == [str(n) for n in SIZES] and {row[3] for row in rows} == {"64"}
    assert "legacy (range): requests per join ≈" in text and "P = 64 in every run" in text
    assert "Split brain" in text and "double-ownership" in text
    assert CampaignFolder(out).manifest.is_file() and ReportFolder(out).html.is_file()
    assert (published / "herd.png").is_file()
    demo_md = (published / "demo.md").read_text()
    assert "| legacy | range | 32 |" in demo_md and "| classic | range | 4 |" in demo_md
