"""What a run was, as its lock.json records it: the scenario, the schedule, what was applied, the servers'
addresses, the members' ids and the versions of the lab and its libraries (experiments.folders.run_record writes it)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.folders.run_record import ClusterAddresses, RunRecord, ScenarioSource
from experiments.run.member_configs import native_settings
from experiments.run.provenance import git_commit, jsonable, versions
from rebalance.backends import profile


def describe_run(run: Any, status: str, reason: str = "") -> RunRecord:
    """The run's record now (`run`: an experiments.run.runner.Run; `status`: running, completed, ...)."""
    scenario_text = Path(run.scenario.source).read_text() if Path(run.scenario.source).is_file() else ""
    group = run.scenario.group
    backend = profile(run.backend)
    servers = run.server_processes
    return RunRecord(
        name=run.scenario.name,
        run_id=run.run_id,
        backend=run.backend,
        strategy=group.strategy,
        # the session the members ran with: the brokers' on kip848, where the scenario's is a classic setting
        session_timeout_ms=backend.session_ms(group.session_timeout_ms, native_settings(run.scenario, backend)),
        topics={topic.name: topic.partitions for topic in run.scenario.topics},
        members=len(run.schedule.initial_members),
        group=group.name,
        status=status,
        reason=reason,
        scenario=ScenarioSource(
            name=run.scenario.name, source=run.scenario.source,
            sha256=hashlib.sha256(scenario_text.encode()).hexdigest() if scenario_text else None,
            resolved=jsonable({key: value for key, value in asdict(run.scenario).items() if key != "lines"}),
        ),
        seed=run.scenario.seed,
        schedule=run.schedule.to_json(),
        applied=tuple(run.applied),
        timeline_start_ns=run.t0_ns,
        started_ms=run.started_ms,
        ended_ms=int(time.time() * 1000) if status != "running" else None,
        cluster=ClusterAddresses(
            zookeeper=servers.zk_connect,
            zookeeper_provider=getattr(getattr(servers.ensemble, "provider", None), "value", None),
            zookeeper_ensemble=getattr(servers.ensemble, "name", None),
            brokers=servers.cluster.bootstrap if servers.cluster else None,
            coordinator_broker=run.schedule.coordinator_broker,
        ),
        hosts={host.name: tuple(host.members) for host in run.schedule.hosts},
        member_ids={name: run.member_id(name) for host in run.schedule.hosts for name in host.members},
        proxies=run.members_proxied,
        versions=versions(),
        commit=git_commit(),
        workload={**run.scenario.workload.to_json(), **run.scenario.load().to_json()},
    )
