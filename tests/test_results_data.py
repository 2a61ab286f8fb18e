"""The results page made again from the repository alone, byte for byte.

- a campaign folder (manifest, campaign file, per-run summaries) exported as a data folder (runs.csv with
  seeds and commits, campaign.json with the machine and --parallel, campaign.toml) gives the same page as
  the campaign folder itself;
- `rebalance-lab results DATA` prints that page, and again the same bytes; the page states the command on one
  line; Holm's k is every claim of every file pooled; the power a file asks for is printed;
- a small data folder written by hand regenerates byte for byte through the command line;
- docs/results.md, when it names data folders under docs/results-data/, is what they give.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.campaign import load_campaign
from experiments.campaign.execute import open_folder
from experiments.campaign.manifest import COMPLETED, Manifest
from experiments.cli.app import app
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.report.results_data import (
    CAMPAIGN_TOML,
    export,
    merge,
    other_code,
    read,
    recorded_runs,
    runs_csv,
    withdraw,
)
from experiments.report.results_doc import results_markdown
from tests.fixtures.scenarios import tiny_join

REPOSITORY = Path(__file__).resolve().parent.parent

CAMPAIGN = """\
name = "tiny"
repetitions = 5
seed = 40

[[matrix]]
scenario = "tiny-join.toml"
backends = ["legacy", "classic"]

[[claims]]
says = "legacy's requests per join exceed classic's"
scenario = "tiny-join"
metric = "join: requests per change"
higher = ["legacy"]
lower = ["classic"]

[[claims]]
says = "legacy duplicates more than classic"
scenario = "tiny-join"
metric = "duplicates"
higher = ["legacy"]
lower = ["classic"]

[[detect]]
scenario = "tiny-join"
metric = "join: requests per change"
shift = 30
sd = 15
"""


def _summaries(run: RunFolder, backend: str, repetition: int) -> None:
    """A run's summary tables as `summarize` writes them, with values that differ run to run."""
    run.summary.mkdir(parents=True)
    legacy = backend == "legacy"
    pd.DataFrame({"check": ["duplicates", "offset-regressions", "fenced-commits"],
                  "count": [(600 + 7 * repetition) if legacy else 640 + repetition % 2, 2 if legacy else 0,
                            0 if legacy else 1]}).to_parquet(run.summary_table("verdicts"))
    pd.DataFrame({"phase": ["setup", "warmup", "stable", "teardown"], "start_s": [0.0, 2.0, 8.0, 30.0],
                  "end_s": [2.0, 8.0, 30.0, 31.0], "records_lost": 0, "max_latency_ms": [1.0, 2.0, 3.5 + repetition, 1.0],
                  "rebalance_ms": 0.0, "double_ownership_s": [0.0, 0.0, 0.1 * (repetition + 1) / 3, 0.0],
                  }).to_parquet(run.summary_table("phases"))
    pd.DataFrame([{"t": 10.0, "kind": "join", "live_before": 4, "requests": (300 + repetition) if legacy else 36,
                   "notifications": 19 if legacy else 0, "stable_s": 0.2 + repetition / 7, "stop_the_world_s": 0.01,
                   "unowned_partition_s": 2.5}]).to_parquet(run.summary_table("herd"))
    run.summary_record.write_text('{"info": {}, "facts": {}}\n')   # written last, as the summary does


def _made_folder(tmp_path: Path, scenario: str, text: str, name: str, repetitions, summarise, *,
                 commit: str = "f" * 40, parallel: int = 1) -> Path:
    """A campaign folder whose chosen repetitions completed, each run's summary written by `summarise`."""
    (tmp_path / f"{scenario}.toml").write_text(tiny_join(scenario))
    (tmp_path / "tiny-campaign.toml").write_text(text)
    campaign = load_campaign(tmp_path / "tiny-campaign.toml")
    folder = tmp_path / name
    manifest = open_folder(campaign, folder)
    for planned in campaign.plan():
        if planned.repetition not in repetitions:
            continue
        entry = manifest.runs[planned.name]
        entry.status, entry.git_commit, entry.parallel = COMPLETED, commit, parallel
        summarise(CampaignFolder(folder).run(planned.name), planned)
    manifest.machine.update({"git_commit": "f" * 40, "cores": 2, "memory_bytes": 24 * 2 ** 30})
    manifest.write(folder)
    return folder


def _campaign_folder(tmp_path: Path, parallel: int = 1, *, name: str = "campaign", repetitions=range(5),
                     commit: str = "f" * 40) -> Path:
    return _made_folder(tmp_path, "tiny-join", CAMPAIGN, name, repetitions,
                        lambda path, planned: _summaries(path, planned.cell.backend, planned.repetition),
                        commit=commit, parallel=parallel)


def test_a_campaign_folder_and_its_exported_data_give_the_same_page_byte_for_byte(tmp_path):
    folder = _campaign_folder(tmp_path)
    data = tmp_path / "results-data" / "tiny"
    export(folder, data)
    page = results_markdown([folder])
    assert results_markdown([data]) == page
    assert "./lab results docs/results-data/tiny > docs/results.md\n" in page          # the command, on one line

    runs = pd.read_csv(data / "runs.csv")
    assert set(runs["seed"]) == {40, 41, 42, 43, 44} and set(runs["commit"]) == {"f" * 40}
    info = json.loads((data / "campaign.json").read_text())
    assert info["commit"] == "f" * 40 and info["seeds"] == [40, 41, 42, 43, 44] and info["parallel"] == 1
    assert info["machine"]["cores"] == 2 and "created_ms" not in json.dumps(info)
    assert (data / CAMPAIGN_TOML).read_text() == CAMPAIGN

    # the claims: both declared, k = 2; requests per join separate completely, and 5 runs a side give the
    # claims' test no p below 1 - (31/32)^2 = 0.062: not supported
    assert "| Holm p (k = 2) |" in page
    assert ("| legacy's requests per join exceed classic's | join: requests per change | **not supported** | "
            "0.062 (one-sided) | 0.12 |") in page
    # its power, at the 5 runs a cell the campaign made: a shift of 30, the file's sd of 15, the runs' own
    assert "| tiny | legacy's requests per join exceed classic's | 1 | 5 | 30 | sd 15: 0.0% | sd 0 to 1.6: 0.0% | 7 |" in page


def test_a_campaign_run_in_parts_carried_by_its_data_folder_gives_the_page_of_one_sitting(tmp_path):
    whole = results_markdown([_campaign_folder(tmp_path)])
    data = tmp_path / "results-data" / "tiny"
    first = _campaign_folder(tmp_path, name="part-1", repetitions=(0, 1, 2))
    assert merge(first, data)[1] == 6
    assert recorded_runs(data, CAMPAIGN) == {name for name, entry in Manifest.read(first).runs.items()
                                             if entry.repetition < 3}
    second = _campaign_folder(tmp_path, name="part-2", repetitions=(2, 3, 4))   # run 2 again: not counted twice
    held, added = merge(second, data)
    assert added == 4 and held.info["runs_completed"] == 10 and held.info["seeds"] == [40, 41, 42, 43, 44]
    assert results_markdown([data]) == whole
    assert merge(second, data)[1] == 0 and (data / "runs.csv").read_text() == runs_csv(held.runs)


def test_a_data_folder_refuses_another_campaign_file_and_other_code_unless_mixed_commits_are_allowed(tmp_path):
    data = tmp_path / "results-data" / "tiny"
    merge(_campaign_folder(tmp_path, name="part-1", repetitions=(0,)), data)
    with pytest.raises(ValueError, match="another campaign file"):
        recorded_runs(data, CAMPAIGN.replace("repetitions = 5", "repetitions = 6"))
    # the shifts and spreads the next campaign is sized by, and comments, are not what the runs ran
    assert recorded_runs(data, CAMPAIGN.replace("sd = 15", "sd = 4") + "\n# resized\n") == recorded_runs(data, CAMPAIGN)
    other = _campaign_folder(tmp_path, name="part-2", repetitions=(1,), commit="a" * 40)
    with pytest.raises(ValueError, match="whose code differs"):
        merge(other, data)
    assert other_code(data, "a" * 40) == ["f" * 40] and other_code(data, "f" * 40) == []   # before a part runs
    held, added = merge(other, data, allow_mixed_commits=True)
    assert added == 2 and held.info["commits"] == {"a" * 40: 2, "f" * 40: 2}
    assert "2 runs from commit `aaaaaaaaaaaa`" in results_markdown([data])
    (tmp_path / "not-data").mkdir()
    (tmp_path / "not-data" / "x").write_text("")
    with pytest.raises(ValueError, match="not a results-data folder"):
        recorded_runs(tmp_path / "not-data", CAMPAIGN)


def test_a_backends_withdrawn_runs_are_made_again_by_the_next_part_and_the_page_says_so(tmp_path):
    data = tmp_path / "results-data" / "tiny"
    merge(_campaign_folder(tmp_path, name="part-1"), data)
    held, gone = withdraw(data, "classic", "its client changed")
    assert gone == 5 and held.info["runs_completed"] == 5 and set(held.runs["backend"]) == {"legacy"}
    assert recorded_runs(data, CAMPAIGN) == {name for name in held.info["runs"]} and len(held.info["runs"]) == 5
    assert held.info["withdrawn"] == [{"backend": "classic", "runs": 5, "commits": {"f" * 40: 5},
                                       "reason": "its client changed"}]
    with pytest.raises(ValueError, match="no run of backend 'classic'"):
        withdraw(data, "classic", "again")
    refused = CliRunner().invoke(app, ["results-withdraw", str(data), "--backend", "classic", "--reason", "again"])
    assert refused.exit_code == 2 and "no run of backend 'classic'" in refused.output
    refused = CliRunner().invoke(app, ["results-withdraw", str(tmp_path), "--backend", "legacy", "--reason", "x"])
    assert refused.exit_code == 2 and "not a data folder" in refused.output
    # the next part, on other code, makes the classic runs again; the page names both commits and the withdrawal
    again = _campaign_folder(tmp_path, name="part-2", commit="a" * 40)
    held, added = merge(again, data, allow_mixed_commits=True)
    assert added == 5 and held.info["commits"] == {"a" * 40: 5, "f" * 40: 5}
    assert set(held.runs.loc[held.runs["backend"] == "classic", "commit"]) == {"a" * 40}
    page = results_markdown([data])
    assert ("5 runs from commit `aaaaaaaaaaaa`; 5 earlier runs of classic (commit `ffffffffffff` 5) withdrawn and "
            "made again: its client changed") in page
    # a look at the remade runs is a look on their code: both claims name classic, so both are new looks
    from experiments.report.results_doc import page_claims
    _, currents = page_claims([read(data)], [str(data)], [])
    assert [current.commit for current in currents] == ["a" * 40, "a" * 40]


def test_the_results_command_regenerates_the_page_from_the_data_folders_alone(tmp_path):
    data = tmp_path / "docs" / "results-data" / "tiny"
    export(_campaign_folder(tmp_path), data)
    first = CliRunner().invoke(app, ["results", str(data)])
    assert first.exit_code == 0, first.output
    (tmp_path / "results.md").write_text(first.stdout)
    second = CliRunner().invoke(app, ["results", str(data)])
    assert second.stdout.encode() == (tmp_path / "results.md").read_bytes()


def test_runs_made_beside_another_keep_their_counts_and_leave_their_timings_uncompared(tmp_path):
    data = tmp_path / "data"
    export(_campaign_folder(tmp_path, parallel=2), data)
    page = results_markdown([data])
    assert json.loads((data / "campaign.json").read_text())["parallel"] == 2
    assert "| legacy duplicates more than classic | duplicates | **undetermined (timings of parallel runs)** |" in page
    assert "| legacy's requests per join exceed classic's | join: requests per change | **not supported** | 0.062" in page
    assert "./lab campaign tiny --out runs/tiny --data docs/results-data/tiny --parallel 2\n" in page


RUNS_CSV = """\
run,scenario,backend,strategy,sweep,repetition,seed,commit,n,at_once,metric,value
{rows}"""


def _hand_made(folder: Path, name: str, claims: int) -> None:
    folder.mkdir(parents=True)
    rows = []
    for repetition in range(5):
        for backend, base in (("legacy", 640), ("classic", 671)):
            run = f"{name}-{backend}-range-r{repetition}"
            rows.append(f"{run},{name},{backend},range,-,{repetition},{2000 + repetition},abc,4,1,duplicates,"
                        f"{base + (repetition * 13) % 23}")
            rows.append(f"{run},{name},{backend},range,-,{repetition},{2000 + repetition},abc,4,1,"
                        f"offset regressions,{2 if backend == 'legacy' else 0}")
    (folder / "runs.csv").write_text(RUNS_CSV.format(rows="\n".join(rows) + "\n"))
    (folder / "campaign.json").write_text(json.dumps({
        "campaign": name, "repetitions": 5, "seed": 2000, "seeds": [2000, 2001, 2002, 2003, 2004],
        "runs_completed": 10, "runs_planned": 10, "runs_with_measures": 10, "commit": "abc", "commits": {"abc": 10},
        "parallel": 1, "runs_beside_another": 0, "machine": {"cores": 2, "memory_bytes": 2 ** 34}}))
    claim = ('[[claims]]\nsays = "{says} {index}"\nscenario = "{name}"\nmetric = "{metric}"\n'
             'higher = ["{higher}"]\nlower = ["{lower}"]\n')
    CampaignFolder(folder).campaign_file.write_text(f'name = "{name}"\n\n' + "\n".join(
        claim.format(says=f"only legacy regresses offsets in {name}", index=index, name=name,
                     metric="offset regressions", higher="legacy", lower="classic") if index % 2 else
        claim.format(says=f"classic duplicates more in {name}", index=index, name=name, metric="duplicates",
                     higher="classic", lower="legacy") for index in range(claims)))


def test_a_hand_made_data_folder_regenerates_byte_for_byte_and_pooled_files_make_one_family(tmp_path):
    first, second = tmp_path / "docs/results-data/a", tmp_path / "docs/results-data/b"
    _hand_made(first, "a", 2)
    _hand_made(second, "b", 3)
    page = results_markdown([first, second])
    assert results_markdown([first, second]) == page
    assert "./lab results docs/results-data/a docs/results-data/b > docs/results.md\n" in page
    assert "| Holm p (k = 5) |" in page and page.count("(one-sided)") == 5
    # a constant pair is tested, not waved through: the floor p, described, in the family
    assert ("| only legacy regresses offsets in a 1 | offset regressions | **not supported** | 0.062 (one-sided) | "
            "0.31 |") in page
    assert "one value in every run of each cell, n = 5/5" in page
    assert "97%" not in page
    result = CliRunner().invoke(app, ["results", str(first), str(second)])
    assert result.exit_code == 0 and result.stdout == page
    assert read(first).runs["seed"].tolist()[:2] == [2000, 2000]


def test_a_superseded_data_folder_is_named_where_it_lies_and_a_folder_elsewhere_by_its_campaign(tmp_path):
    earlier, elsewhere = tmp_path / "docs/results-data/earlier/a", tmp_path / "scratch/b"
    _hand_made(earlier, "a", 1)
    _hand_made(elsewhere, "b", 1)
    page = results_markdown([earlier, elsewhere])
    assert "./lab results docs/results-data/earlier/a docs/results-data/b > docs/results.md\n" in page
    assert "./lab campaign a --out runs/a --data docs/results-data/earlier/a\n" in page
    assert "./lab campaign b --out runs/b --data docs/results-data/b\n" in page


def test_the_published_page_is_what_the_published_data_gives(monkeypatch):
    monkeypatch.chdir(REPOSITORY)   # the page's command names its folders relative to the checkout
    page = (REPOSITORY / "docs" / "results.md").read_text()
    command = re.search(r"^\./lab results (docs/results-data/\S+.*?) > docs/results\.md$", page, re.MULTILINE)
    if command is None:   # a page made from campaign folders before the data were shipped: it must say so
        assert re.search(r"^\./lab results runs/\S+.* > docs/results\.md$", page, re.MULTILINE), \
            "docs/results.md names neither the data folders nor the campaign folders it was made from"
        return
    words = shlex.split(command.group(1))
    notes = words[words.index("--notes") + 1] if "--notes" in words else None
    looks = words[words.index("--looks") + 1] if "--looks" in words else None
    folders = [REPOSITORY / word for word in words if word.startswith("docs/results-data/") and word != looks]
    assert results_markdown(folders, Path(notes) if notes else None, Path(looks) if looks else None) == page


def test_every_look_at_the_published_claims_is_in_the_ledger_and_on_the_page(monkeypatch):
    """docs/results-data/looks.csv holds a row for each claim of the published page, tested on its runs by
    the current test, with the page's p and verdict; every earlier row names its data, code, date, n, test
    and verdict; the page states its rule and shows every look."""
    from experiments.report.looks import DECISIONS, read_looks
    from experiments.report.results_data import read as read_data
    from experiments.report.results_doc import page_claims, page_path
    from experiments.statistics.inference import CLAIM_TEST

    monkeypatch.chdir(REPOSITORY)
    page = (REPOSITORY / "docs" / "results.md").read_text()
    words = shlex.split(re.search(r"^\./lab results (.*?) > docs/results\.md$", page, re.MULTILINE).group(1))
    looks = Path(words[words.index("--looks") + 1])
    ledger = read_looks(looks)
    folders = [Path(word) for word in words if word.startswith("docs/results-data/") and Path(word) != looks]
    campaigns = [read_data(folder) for folder in folders]
    results, currents = page_claims(campaigns, [page_path(data.name, folder) for data, folder in
                                                zip(campaigns, folders, strict=True)], ledger)
    for current, result in zip(currents, results, strict=True):
        (row,) = [look for look in ledger if look.runs == (current.campaign, current.claim, current.data)
                  and look.test == CLAIM_TEST]
        assert (row.n, row.verdict, row.k) == (result.n, result.verdict, result.k), current.claim
        assert row.p == pytest.approx(result.p), current.claim
    for look in ledger:
        assert look.data and look.date and look.n and look.test and look.verdict in DECISIONS, look
    assert "Every look at a claim is on the record" in page and "## Every look at these claims" in page
    assert page.count("| this page |") == len(currents)
    # split brain b's duplicates: supported now, not supported on both earlier looks (earlier code)
    (line,) = [line for line in page.splitlines() if line.startswith("| split-brain-ab | the paused classic member")
               and "| duplicates | **supported**;" in line]   # the claims' table, not the claims in figures
    assert "**supported**; on its latest look only: not supported on 2026-11-26 (5/5, p = 0.65), 2026-11-28" in line


def test_every_shipped_data_folder_belongs_to_its_built_in_campaign_file_and_makes_a_page():
    """A data folder carries its campaign from one part to the next only while the built-in file makes the
    runs its runs ran (its `[[detect]]` tables, which size the next campaign, may change); a page from it
    names every run's n."""
    from experiments.campaign import find_campaign
    from experiments.report.results_data import CAMPAIGN_TOML, is_data_dir, same_runs

    shipped = sorted(path for path in (REPOSITORY / "docs" / "results-data").glob("*") if is_data_dir(path))
    assert shipped, "docs/results-data holds no data folder"
    for folder in shipped:
        data = read(folder)
        assert same_runs((folder / CAMPAIGN_TOML).read_text(), find_campaign(data.name).read_text()), folder.name
        assert len(data.info["runs"]) == data.info["runs_completed"] == data.runs["run"].nunique()
        assert f"./lab results docs/results-data/{folder.name} > docs/results.md" in results_markdown([folder])


def test_the_results_command_draws_each_campaigns_figures_from_its_data_folder(tmp_path):
    """The docs' figures are drawn again from the repository alone, as the page is."""
    folder = REPOSITORY / "docs" / "results-data" / "earlier" / "seed002"
    result = CliRunner().invoke(app, ["results", str(folder), "--figures", str(tmp_path / "figures"),
                                      "--out", str(tmp_path / "page.md")])
    assert result.exit_code == 0, result.output
    drawn = sorted(path.name for path in (tmp_path / "figures" / "seed002").iterdir())
    assert "scale-to-50-records-lost.png" in drawn and "whole-run-records-lost.png" in drawn, drawn
    assert "utilisation.png" not in drawn, "one utilisation is not a curve"


HERD_CAMPAIGN = """\
name = "tiny-herd"
repetitions = 5
seed = 70

[[matrix]]
scenario = "tiny-herd.toml"
backends = ["classic"]
sweep = { "group.members" = [2, 4, 6, 8] }
"""


def _herd_summaries(run: RunFolder, members: int, repetition: int) -> None:
    """A classic herd run's summary: a join into N costs 3N + 6 requests (the coordinator's barrier), a leave
    3N + 2 + the repetition (a spread from one fit to the next)."""
    run.summary.mkdir(parents=True)
    pd.DataFrame({"check": ["duplicates"], "count": [0]}).to_parquet(run.summary_table("verdicts"))
    pd.DataFrame({"phase": ["setup", "warmup", "join", "teardown"], "start_s": [0.0, 2.0, 8.0, 30.0],
                  "end_s": [2.0, 8.0, 30.0, 31.0], "records_lost": 0, "max_latency_ms": 1.0, "rebalance_ms": 0.0,
                  "double_ownership_s": 0.0}).to_parquet(run.summary_table("phases"))
    pd.DataFrame([{"t": 10.0, "kind": "join", "live_before": members, "live_after": members + 1,
                   "requests": 3 * members + 6, "members_moved": members + 1, "notifications": 0, "stable_s": 0.2,
                   "stop_the_world_s": 0.01, "unowned_partition_s": 1.0},
                  {"t": 20.0, "kind": "leave", "live_before": members + 1, "live_after": members,
                   "requests": 3 * members + 2 + repetition, "members_moved": members, "notifications": 0,
                   "stable_s": 0.2, "stop_the_world_s": 0.01, "unowned_partition_s": 1.0}]).to_parquet(
        run.summary_table("herd"))
    info = {"members": members, "backend": "classic", "strategy": "range", "repetition": repetition}
    run.summary_record.write_text(json.dumps({"info": info, "facts": {"partitions": 2 * members}}) + "\n")


def _herd_folder(tmp_path: Path, name: str, repetitions=range(5)) -> Path:
    return _made_folder(tmp_path, "tiny-herd", HERD_CAMPAIGN, name, repetitions, lambda path, planned: (
        _herd_summaries(path, dict(planned.cell.sweep)["group.members"], planned.repetition)))


def test_a_herd_campaigns_changes_travel_in_its_data_folder_and_give_its_cost_model(tmp_path):
    folder = _herd_folder(tmp_path, "campaign")
    data = tmp_path / "results-data" / "tiny-herd"
    export(folder, data)
    changes = pd.read_csv(data / "changes.csv")
    assert len(changes) == 40 and set(changes["kind"]) == {"join", "leave"} and set(changes["N"]) == {2, 4, 6, 8}
    page = results_markdown([data])
    assert results_markdown([folder]) == page                   # the same fits from the data as from the runs
    assert "## The herd's cost model" in page
    (join,) = [line for line in page.splitlines() if line.startswith("| tiny-herd | classic (range) | join |")]
    assert "3.00·N + 6.00" in join and "per member 3 [3, 3]" in join and "| 5 |" in join and "| 0% |" in join
    (leave,) = [line for line in page.splitlines() if line.startswith("| tiny-herd | classic (range) | leave |")]
    assert "constant 4 [2, 6]" in leave and "| 5 |" in leave      # one fit per repetition: n = 5, its spread

    parts = tmp_path / "results-data" / "in-parts"
    merge(_herd_folder(tmp_path, "part-1", repetitions=(0, 1, 2)), parts)
    merge(_herd_folder(tmp_path, "part-2", repetitions=(2, 3, 4)), parts)
    assert (parts / "changes.csv").read_text() == (data / "changes.csv").read_text()


def test_the_looks_command_records_a_pages_looks_once_and_the_page_counts_looks_on_its_code(tmp_path):
    """`./lab looks` adds a row for each claim of the page the ledger lacks (again: none); an earlier look at
    a claim on the same code, from other runs, counts in the page's k; one on other code is shown, not
    counted; a claim supported now whose earlier looks were not says so."""
    from experiments.report.looks import Look, looks_csv, read_looks

    data, ledger = tmp_path / "docs/results-data/a", tmp_path / "looks.csv"
    _hand_made(data, "a", 2)
    ledger.write_text(looks_csv([]))
    first = CliRunner().invoke(app, ["looks", str(data), "--looks", str(ledger), "--date", "2026-12-05"])
    assert first.exit_code == 0, first.output
    rows = read_looks(ledger)
    assert len(rows) == 2 and {row.date for row in rows} == {"2026-12-05"} and rows[0].code == "abc"
    assert rows[0].data == "docs/results-data/a" and rows[0].test == "two medians, one-sided"
    again = CliRunner().invoke(app, ["looks", str(data), "--looks", str(ledger), "--date", "2026-12-06"])
    assert again.exit_code == 0 and len(read_looks(ledger)) == 2
    page = results_markdown([data], looks=ledger)
    assert "k = 2" in page and page.count("| this page |") == 2 and "--looks " in page

    claim = rows[1].claim              # "only legacy regresses offsets in a 1": 5/5, never supported
    earlier = [Look(claim, "a", "a", "", "runs/a-old (not in the repository)", code, "2026-11-01", "1234567", "5/5",
                    "Mann-Whitney, one-sided", 0.5, 2, "not supported") for code in ("abc", "0ld")]
    ledger.write_text(looks_csv([*earlier, *rows]))
    page = results_markdown([data], looks=ledger)
    assert "| Holm p (k = 3) |" in page                          # the look on the same code counts, the other not
    assert "holds every test run on a declared claim since 2026-11-01 (4 rows)" in page
    assert page.count("| 2026-11-01 | a | runs/a-old (not in the repository) |") == 2


def test_the_published_page_opens_with_the_claims_in_figures_and_keeps_designs_and_long_tables_apart():
    page = (REPOSITORY / "docs" / "results.md").read_text()
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## The claims in figures", "## Claims declared before the runs"]
    opening = page[:page.index("## Claims declared before the runs")]
    assert "12,125 [12,029-12,261], n = 6 against classic/range 306 [306-306], n = 6" in opening
    assert "![herd-defaults:" in opening and (REPOSITORY / "docs" / "figures" / "herd-defaults" / "herd.png").is_file()
    # the herd's P = 2N design and the legacy grid's fixed P are separate tables
    assert "### join: P = 2N, every member has work" in page and "### join: P fixed whatever N" in page
    two_n = page.split("### join: P = 2N", 1)[1].split("###", 1)[0]
    assert "| 80 |" not in two_n and "| 320 |" not in two_n
    # the full list of differences is folded
    differences = page.split("## Which differences hold up", 1)[1]
    assert differences.index("<details>") < differences.index("| where | metric |")


def test_the_claims_change_command_sets_each_claims_verdict_p_and_cells_before_beside_after(tmp_path):
    before, after = tmp_path / "before/a", tmp_path / "after/a"
    _hand_made(before, "a", 2)
    _hand_made(after, "a", 2)
    runs = after / "runs.csv"   # after: classic duplicates far fewer than legacy in every run
    runs.write_text(re.sub(r"(classic,range,.*,duplicates,)\d+", r"\g<1>100", runs.read_text()))
    result = CliRunner().invoke(app, ["claims-change", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "classic duplicates more in a 0" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[3] == "not supported"                      # 5 runs a side cannot pass Holm over k = 2
    assert cells[4] == "0.062 / 0.12 (k = 2)" and cells[5] == "1 / 1 (k = 2)"
    assert cells[6] == "classic range: 677 [671-687], n = 5" and cells[7] == "classic range: 100 [100-100], n = 5"
    assert cells[8].startswith("legacy range: 6") and cells[9] == cells[8]
    refused = CliRunner().invoke(app, ["claims-change", "--before", str(tmp_path), "--after", str(after)])
    assert refused.exit_code == 2 and "not a data folder" in refused.output
