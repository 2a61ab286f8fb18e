"""A campaign's per-run measures as a small folder in the repository, from which the results page is made
again byte for byte (`rebalance-lab results-data RUNS --out docs/results-data/NAME`, then
`rebalance-lab results docs/results-data/NAME ...`).

    runs.csv        one row per run per metric: run, scenario, backend, strategy, sweep, repetition, seed,
                    the commit that made the run, n (the group's size), at_once (runs made at once), metric,
                    value (Python's shortest round-trip form of the float)
    campaign.json   the campaign: name, repetitions, seeds, the runs completed (by name) of those planned, the
                    commit(s), the largest --parallel, the machine (cores, memory, platform, package versions)
    campaign.toml   the campaign file as it ran (its claims and the shifts it is meant to detect)
    changes.csv     herd campaigns only: one row per membership change the timeline made (run, backend,
                    strategy, kind, N, P, M, requests, overlapped, repetition), what the cost model is
                    fitted from (experiments.summary.herd_model)

A campaign too long for one sitting runs in parts: `campaign FILE --out DIR --data DATA` leaves out the runs
DATA holds and adds its own to DATA when it stops (`merge`), so the folder in the repository carries the
campaign from one machine to the next. Parts must run the same campaign file on the same code (commits that
differ only in what no run executes, `provenance.NOT_RUN`), unless mixed commits are allowed; the page then
says which runs came from which.

The rows keep the campaign's own order (the plan's runs, each run's metrics as the summary reads them), so a
page made from the campaign folder and one made from its data folder are the same bytes; no timestamp is
written.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.campaign.conditions_record import conditions_info, merged
from experiments.campaign.manifest import COMPLETED, Manifest, is_campaign_dir
from experiments.run.provenance import same_code

RUNS_CSV, INFO_JSON, CAMPAIGN_TOML, CHANGES_CSV = "runs.csv", "campaign.json", "campaign.toml", "changes.csv"
CHANGE_COLUMNS = ["run", "backend", "strategy", "kind", "N", "P", "M", "requests", "overlapped", "repetition"]
COLUMNS = ["run", "scenario", "backend", "strategy", "sweep", "repetition", "seed", "commit", "n", "at_once",
           "metric", "value"]


@dataclass(frozen=True)
class CampaignData:
    name: str
    info: dict           # campaign.json
    text: str            # the campaign file
    runs: pd.DataFrame   # `campaign_stats.run_metrics`'s columns
    changes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHANGE_COLUMNS))   # herd only


def is_data_dir(path: Path) -> bool:
    return (path / RUNS_CSV).is_file() and (path / INFO_JSON).is_file()


def read(folder: Path) -> CampaignData:
    """A data folder, or a campaign folder read as its data folder would be."""
    if is_data_dir(folder):
        info = json.loads((folder / INFO_JSON).read_text())
        changes = folder / CHANGES_CSV
        return CampaignData(info["campaign"], info, (folder / CAMPAIGN_TOML).read_text(),
                            parse_runs((folder / RUNS_CSV).read_text(), info["campaign"]),
                            parse_changes(changes.read_text()) if changes.is_file() else _no_changes())
    if is_campaign_dir(folder):
        return from_campaign(folder)
    raise ValueError(f"{folder}: neither a campaign folder (manifest.json) nor a results-data folder "
                     f"({RUNS_CSV} and {INFO_JSON})")


def from_campaign(folder: Path) -> CampaignData:
    from experiments.statistics.campaign_stats import run_metrics

    manifest = Manifest.read(folder)
    name = manifest.campaign["name"]
    text = runs_csv(run_metrics(folder))
    runs = parse_runs(text, name)
    return CampaignData(name, campaign_info(manifest, runs), (folder / CAMPAIGN_TOML).read_text(), runs,
                        parse_changes(changes_csv(herd_changes(folder))))


def herd_changes(folder: Path) -> pd.DataFrame:
    """The membership changes of a campaign folder's completed, summarised herd runs, in the plan's order."""
    from experiments.folders.campaign_folder import CampaignFolder
    from experiments.summary.herd_model import change_rows
    from experiments.summary.read_back import load_run

    manifest = Manifest.read(folder)
    frames = []
    for entry in manifest.runs.values():
        run = CampaignFolder(folder).run(entry.run)
        if entry.status != COMPLETED or not run.is_summarised():
            continue
        rows = change_rows([load_run(run.path)])
        if len(rows):
            frames.append(rows.assign(run=entry.run, repetition=entry.repetition))
    return pd.concat(frames, ignore_index=True) if frames else _no_changes()


def _no_changes() -> pd.DataFrame:
    return pd.DataFrame(columns=CHANGE_COLUMNS)


def export(folder: Path, out: Path) -> CampaignData:
    """Write a campaign folder's data folder to `out`."""
    data = from_campaign(folder)
    _write(data, out)
    return data


def recorded_runs(out: Path, campaign_text: str) -> frozenset[str]:
    """The runs a data folder holds of this campaign file (none when the folder does not exist yet)."""
    if not out.exists():
        return frozenset()
    if not is_data_dir(out):
        raise ValueError(f"{out} exists and is not a results-data folder ({RUNS_CSV} and {INFO_JSON})")
    if not same_runs((out / CAMPAIGN_TOML).read_text(), campaign_text):
        raise ValueError(f"{out} holds the data of another campaign file (or another version of this one)")
    return frozenset(_run_names(read(out)))


def same_runs(ran: str, planned: str) -> bool:
    """Whether two versions of a campaign file make the same runs and declare the same claims: equal but for
    their `[[detect]]` tables (the shifts and spreads the next campaign is sized by, which no run reads) and
    their comments."""
    if ran == planned:
        return True
    try:
        before, after = tomllib.loads(ran), tomllib.loads(planned)
    except tomllib.TOMLDecodeError:
        return False
    before.pop("detect", None)
    after.pop("detect", None)
    return before == after


def other_code(out: Path, commit: str | None) -> list[str]:
    """The commits of a data folder's runs whose code differs from `commit`'s (all of them when it is unknown):
    checked before a part starts, so it does not run for an hour to be refused at the end."""
    if not is_data_dir(out):
        return []
    held = set(json.loads((out / INFO_JSON).read_text()).get("commits") or {})
    return sorted(theirs for theirs in held if not (commit and same_code(theirs, commit)))


def merge(folder: Path, out: Path, *, allow_mixed_commits: bool = False) -> tuple[CampaignData, int]:
    """Add the runs of a campaign folder that `out` does not hold yet (all of them when `out` is new);
    returns the data now in `out` and how many runs were added."""
    if not out.exists():
        data = export(folder, out)
        return data, len(_run_names(data))
    recorded = recorded_runs(out, (folder / CAMPAIGN_TOML).read_text())
    held, part = read(out), from_campaign(folder)
    manifest = Manifest.read(folder)
    added = [entry for entry in manifest.runs.values() if entry.status == COMPLETED and entry.run not in recorded]
    mine = {entry.git_commit or "?" for entry in added}
    theirs = sorted({other for commit in mine for other in other_code(out, commit)})
    if theirs and not allow_mixed_commits:
        raise ValueError(f"{out} holds runs of commit {', '.join(c[:12] for c in theirs)} and these runs "
                         f"come from {', '.join(c[:12] for c in sorted(mine))}, whose code differs: a campaign's "
                         "runs come from one code (allow mixed commits to merge anyway; the page says so)")
    names = {entry.run for entry in added}
    order = {name: index for index, name in enumerate(manifest.runs)}
    runs = _in_plan_order([held.runs, part.runs[part.runs["run"].isin(names)]], order)
    changes = _in_plan_order([held.changes, part.changes[part.changes["run"].isin(names)]], order)
    info = dict(held.info)
    info.update(merged(held.info, conditions_info(entry for entry in manifest.runs.values()
                                                   if entry.run not in recorded)))
    commits = dict(info.get("commits") or {})
    for entry in added:
        commits[entry.git_commit or "?"] = commits.get(entry.git_commit or "?", 0) + 1
    info.update(runs_completed=info["runs_completed"] + len(added),
                runs=sorted(set(_run_names(held)) | names, key=lambda name: order.get(name, len(order))),
                seeds=sorted(set(info.get("seeds") or []) | {entry.seed for entry in added}),
                commits=dict(sorted(commits.items())), runs_with_measures=int(runs["run"].nunique()),
                parallel=max([info.get("parallel") or 1, *(entry.parallel or 1 for entry in added)]),
                runs_beside_another=info.get("runs_beside_another", 0)
                + sum((entry.parallel or 1) > 1 for entry in added))
    if added and part.info["machine"] != held.info.get("machine"):
        machines = [machine for machine in info.get("other_machines", []) if machine != part.info["machine"]]
        info["other_machines"] = [*machines, part.info["machine"]]
    data = CampaignData(held.name, info, held.text, runs, changes)
    _write(data, out)
    return data, len(added)


def withdraw(out: Path, backend: str, reason: str) -> tuple[CampaignData, int]:
    """Take one backend's runs out of a data folder, so that the campaign's next part (`--data`) makes them again
    on today's code: their rows leave runs.csv and changes.csv, their counts leave campaign.json, and the
    campaign.json keeps how many runs of which commits were withdrawn, and why, for the page to say."""
    held = read(out)
    gone = set(held.runs.loc[held.runs["backend"] == backend, "run"])
    if not gone:
        raise ValueError(f"{out} holds no run of backend {backend!r}")
    commits = dict(held.info.get("commits") or {})
    withdrawn_commits: dict[str, int] = {}
    for run, commit in held.runs.drop_duplicates("run")[["run", "commit"]].itertuples(index=False):
        if run in gone:
            commits[commit] -= 1
            withdrawn_commits[commit] = withdrawn_commits.get(commit, 0) + 1
    info = dict(held.info)
    info.update(runs=[name for name in _run_names(held) if name not in gone],
                runs_completed=info["runs_completed"] - len(gone),
                runs_with_measures=int(held.runs.loc[~held.runs["run"].isin(gone), "run"].nunique()),
                commits={commit: count for commit, count in sorted(commits.items()) if count},
                withdrawn=[*(info.get("withdrawn") or []),
                           {"backend": backend, "runs": len(gone), "commits": dict(sorted(withdrawn_commits.items())),
                            "reason": reason}])
    if info.get("commit") not in info["commits"]:
        info["commit"] = next(iter(info["commits"]), info.get("commit"))
    runs = held.runs[~held.runs["run"].isin(gone)].reset_index(drop=True)
    changes = held.changes[~held.changes["run"].isin(gone)].reset_index(drop=True)
    data = CampaignData(held.name, info, held.text, runs, changes)
    _write(data, out)
    return data, len(gone)


def _in_plan_order(frames: list[pd.DataFrame], order: dict[str, int]) -> pd.DataFrame:
    """The rows of both parts, the runs in the plan's order (an empty part adds nothing)."""
    kept = [frame for frame in frames if len(frame)]
    if not kept:
        return frames[0]
    joined = pd.concat(kept, ignore_index=True)
    return joined.sort_values("run", key=lambda column: column.map(order), kind="stable", ignore_index=True)


def _run_names(data: CampaignData) -> list[str]:
    return list(data.info.get("runs") or dict.fromkeys(data.runs["run"]))


def _write(data: CampaignData, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / RUNS_CSV).write_text(runs_csv(data.runs))
    (out / INFO_JSON).write_text(json.dumps(data.info, indent=2, sort_keys=True) + "\n")
    (out / CAMPAIGN_TOML).write_text(data.text)
    if len(data.changes):
        (out / CHANGES_CSV).write_text(changes_csv(data.changes))


def runs_csv(runs: pd.DataFrame) -> str:
    return _csv(runs, COLUMNS)


def changes_csv(changes: pd.DataFrame) -> str:
    return _csv(changes, CHANGE_COLUMNS)


def _csv(frame: pd.DataFrame, columns: list[str]) -> str:
    """The columns as CSV, each float in its shortest round-trip form (the same bytes from the same data)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in frame[columns].itertuples(index=False):
        writer.writerow([_cell(value) for value in row])
    return buffer.getvalue()


def parse_changes(text: str) -> pd.DataFrame:
    """changes.csv as the cost model reads it (the same values, and so the same fits, as from the runs)."""
    rows = [{"run": row["run"], "backend": row["backend"], "strategy": row["strategy"], "kind": row["kind"],
             "N": int(row["N"]), "P": int(row["P"]), "M": float(row["M"]) if row["M"] else math.nan,
             "requests": float(row["requests"]), "overlapped": row["overlapped"] == "True",
             "repetition": int(row["repetition"])} for row in csv.DictReader(io.StringIO(text))]
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() and abs(value) < 2 ** 53 else repr(value)
    return str(value)


def parse_runs(text: str, campaign: str) -> pd.DataFrame:
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        at_once = int(row["at_once"])
        rows.append({"campaign": campaign, "run": row["run"], "scenario": row["scenario"], "backend": row["backend"],
                     "strategy": row["strategy"], "sweep": row["sweep"], "repetition": int(row["repetition"]),
                     "seed": int(row["seed"]), "commit": row["commit"],
                     "n": float(row["n"]) if row["n"] else math.nan, "at_once": at_once, "parallel": at_once > 1,
                     "metric": row["metric"], "value": float(row["value"])})
    columns = ["campaign", *COLUMNS[:10], "parallel", "metric", "value"]
    return pd.DataFrame(rows, columns=columns)


def campaign_info(manifest: Manifest, runs: pd.DataFrame) -> dict:
    """campaign.json: what a reader needs to know of how the runs were made (no timestamps)."""
    done = [entry for entry in manifest.runs.values() if entry.status == COMPLETED]
    commits: dict[str, int] = {}
    for entry in done:
        commit = entry.git_commit or manifest.machine.get("git_commit") or "?"
        commits[commit] = commits.get(commit, 0) + 1
    machine = manifest.machine
    return {"campaign": manifest.campaign["name"], "repetitions": manifest.campaign.get("repetitions"),
            "seed": manifest.campaign.get("seed"), "seeds": sorted({entry.seed for entry in done}),
            "runs_completed": len(done), "runs_planned": len(manifest.runs), "runs": [entry.run for entry in done],
            "runs_with_measures": int(runs["run"].nunique()) if len(runs) else 0,
            "commit": machine.get("git_commit"), "commits": dict(sorted(commits.items())),
            "parallel": max((entry.parallel or 1 for entry in done), default=1),
            "runs_beside_another": sum((entry.parallel or 1) > 1 for entry in done),
            "machine": {"cores": machine.get("cores"), "memory_bytes": machine.get("memory_bytes"),
                        "platform": machine.get("platform"), "versions": machine.get("versions")},
            **conditions_info(manifest.runs.values())}
