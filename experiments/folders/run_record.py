"""A run's record: what RUN_DIR/lock.json says about a run, as one frozen type from the runner to the report.

The runner writes it when a run starts and again when it ends (status, reason, end time); the
synthetic generator writes one for its simulated runs; the summary reads it and keeps it, the group's size
filled in where the record could not say, in summary/run.json for the report. `write_record` is the only
writer of lock.json and `read_record` the only reader.

The reader also accepts what earlier versions wrote: runs from before the run-at-a-glance fields
(name, strategy, session timeout, topics, group) kept them only inside the resolved scenario and
used "members" for the host table; hand-written files may give topics as a list of
{name, partitions} tables and the timeout as "session_timeout".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from rebalance.backends import canonical_name


@dataclass(frozen=True, kw_only=True)
class ScenarioSource:
    """The scenario a run played: its file, the file's digest, and the scenario as resolved."""

    name: str = ""
    source: str = ""
    sha256: str | None = None
    resolved: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ClusterAddresses:
    """Where the run's servers listened (None: the backend had no such server)."""

    zookeeper: str | None = None            # connect string, chroot included
    zookeeper_provider: str | None = None   # how the ensemble was started (e.g. docker, local)
    zookeeper_ensemble: str | None = None   # its name, which its containers carry
    brokers: str | None = None              # bootstrap list
    coordinator_broker: int | None = None   # the broker the coordinator formula picks for the group


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    # The run at a glance (what the summary reads first); "" or None where an older file did not say.
    name: str
    run_id: str
    backend: str
    strategy: str
    session_timeout_ms: int | None
    topics: Mapping[str, int]
    members: int | None                 # the group's size when the timeline starts
    group: str
    status: str                         # running, completed, failed or interrupted
    reason: str = ""
    # How it was played.
    scenario: ScenarioSource = field(default_factory=ScenarioSource)
    seed: int | None = None
    schedule: Mapping[str, object] | None = None
    applied: tuple[Mapping[str, object], ...] = ()      # fault steps as they were carried out
    timeline_start_ns: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    cluster: ClusterAddresses = field(default_factory=ClusterAddresses)
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # host process -> its members
    member_ids: Mapping[str, str] = field(default_factory=dict)          # member name -> its protocol id
    proxies: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    commit: str | None = None           # the checkout's commit that made the run (None: not recorded, or no checkout)
    # The members' work: the scenario's [workload] with the offered load, the capacity (members that can own a
    # partition x 1 / mean service time) and the utilisation ({} in runs from before it was recorded).
    workload: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self, dict_factory=lambda items: {key: _plain(value) for key, value in items})

    @classmethod
    def from_json(cls, document: Mapping[str, object]) -> RunRecord:
        """A record as lock.json or summary/run.json holds it, in any shape an earlier version wrote."""
        return _from_json(document)

    def partitions(self) -> list[str]:
        """Every partition of the run's topics, `topic-p`."""
        return [f"{topic}-{p}" for topic, n in sorted(self.topics.items()) for p in range(n)]


# What a folder without a lock.json says: nothing (its readers then judge from events alone).
NO_RECORD = RunRecord(name="", run_id="", backend="", strategy="", session_timeout_ms=None, topics={}, members=None,
                      group="", status="")


class NoRunRecord(ValueError):
    """The folder has events but no usable lock.json: nothing says what the run was."""


def write_record(path: Path, record: RunRecord) -> Path:
    """Write RUN_DIR/lock.json whole: a reader never sees half a file (through RunFolder.write_record)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    temporary.replace(path)
    return path


def read_record(path: Path, *, strict: bool = True) -> RunRecord | None:
    """RUN_DIR/lock.json as a RunRecord, or None when the folder has none (through RunFolder.record)."""
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a JSON object")
    try:
        return _from_json(document, strict=strict)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


# Top-level keys the synthetic generator once wrote; its settings now live in scenario.resolved.
_RETIRED = {"timeline", "anomalies"}


def _from_json(document: Mapping[str, object], *, strict: bool = True) -> RunRecord:
    """`strict`: a key no version wrote is refused by name (a hand-written file's typo); else left out, for a
    glance at a folder a later version may have written."""
    known = {f.name for f in fields(RunRecord)}
    unknown = set(document) - known - _RETIRED - {"session_timeout", "run_dir"}
    if unknown and strict:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    document = {key: value for key, value in document.items() if key not in unknown}
    scenario = _scenario(document)
    resolved = scenario.resolved
    group = resolved.get("group") if isinstance(resolved.get("group"), Mapping) else {}
    members, hosts = document.get("members"), document.get("hosts")
    if isinstance(members, Mapping) and hosts is None:   # the host table, before "hosts" had its name
        hosts, members = members, None
    if members is None:
        initial = (document.get("schedule") or {}).get("initial_members")
        members = initial if initial is not None else group.get("members")
    session = document.get("session_timeout_ms") or document.get("session_timeout") or group.get("session_timeout_ms")
    return RunRecord(
        name=str(document.get("name") or scenario.name or ""),
        run_id=str(document.get("run_id") or ""),
        backend=canonical_name(str(document.get("backend") or "")),   # an older run's `modern` is `classic`
        strategy=str(document.get("strategy") or group.get("strategy") or ""),
        session_timeout_ms=int(session) if session else None,
        topics=_topics(document.get("topics") or resolved.get("topics")),
        members=_count(members),
        group=str(document.get("group") or group.get("name") or ""),
        status=str(document.get("status") or ""),
        reason=str(document.get("reason") or ""),
        scenario=scenario,
        seed=document.get("seed"),
        schedule=document.get("schedule"),
        applied=tuple(document.get("applied") or ()),
        timeline_start_ns=document.get("timeline_start_ns"),
        started_ms=document.get("started_ms"),
        ended_ms=document.get("ended_ms"),
        cluster=ClusterAddresses(**(document.get("cluster") or {})),
        hosts={str(host): tuple(names) for host, names in (hosts or {}).items()},
        member_ids=dict(document.get("member_ids") or {}),
        proxies=dict(document.get("proxies") or {}),
        versions=dict(document.get("versions") or {}),
        commit=document.get("commit"),
        workload=dict(document.get("workload") or {}),
    )


def _scenario(document: Mapping[str, object]) -> ScenarioSource:
    scenario = document.get("scenario")
    if isinstance(scenario, Mapping):
        return ScenarioSource(**scenario)
    retired = {key: document[key] for key in sorted(_RETIRED) if key in document}
    return ScenarioSource(name=str(document.get("name") or ""), resolved=retired)


def _topics(value: object) -> dict[str, int]:
    """Topics as {name: partitions}, {name: {partitions: n}} or a list of {name, partitions} tables."""
    if isinstance(value, Mapping):
        return {str(name): int(n["partitions"] if isinstance(n, Mapping) else n) for name, n in value.items()}
    if isinstance(value, list):
        return {str(t["name"]): int(t["partitions"]) for t in value if isinstance(t, Mapping) and "name" in t}
    return {}


def _count(value: object) -> int | None:
    """A group size given as a number, or as the list or table of its members."""
    if isinstance(value, (list, tuple, Mapping)):
        return len(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plain(value: object) -> object:
    """JSON's shapes: tuples as lists, mappings as dicts."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
