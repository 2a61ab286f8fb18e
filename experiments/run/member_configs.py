"""A scenario's group as each member sees it: one `MemberConfig` per member, checked by the backend's
profile before anything starts, and handed to each member host as one JSON file."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from experiments.scenario import Problem, Scenario, ScenarioError
from experiments.scenario.model import DEFAULT_MAX_POLL_RECORDS, WorkloadSpec
from rebalance.backends import BackendProfile, Server
from rebalance.member import MemberConfig


def native_settings(scenario: Scenario, profile: BackendProfile) -> Mapping[str, object]:
    """[group.extra] overlaid with the backend's own section ([group.<its name>])."""
    return scenario.group.settings_of(profile.name)


def workload_settings(scenario: Scenario) -> Mapping[str, object]:
    """What the workload asks of the client: max.poll.records when it is not Kafka's default (every client
    hands out at most 500 records a poll already)."""
    records = scenario.workload.max_poll_records
    return {} if records == DEFAULT_MAX_POLL_RECORDS else {"max.poll.records": records}


def workload_of(scenario: Scenario, profile: BackendProfile) -> WorkloadSpec:
    """The scenario's [workload] as the backend's application runs it: a generation whose application committed
    through the client's auto-commit (`BackendProfile.commits_after_batch` false: 0.8) does so whatever
    `commit` the scenario asks for."""
    workload = scenario.workload
    return workload if profile.commits_after_batch else replace(workload, commit="auto")


def member_config(scenario: Scenario, profile: BackendProfile, name: str, address: str | None, *,
                  workload: bool = True) -> MemberConfig:
    group = scenario.group
    extra = {**native_settings(scenario, profile), **(workload_settings(scenario) if workload else {})}
    return MemberConfig(group=group.name, topics=scenario.subscribed_topics,
                        strategy=profile.strategy(group.strategy),   # "default": the backend's own
                        member_name=name, group_instance_id=name if group.static else None,
                        session_timeout_ms=group.session_timeout_ms, extra=extra,
                        auto_commit=workload_of(scenario, profile).commit == "auto",
                        **{profile.connects_to.config_field: address})


def check_member_settings(scenario: Scenario, profile: BackendProfile) -> None:
    """The backend's own check of the group's settings, before anything starts: a typo in
    [group.legacy] fails here, naming its line, not later in a member process."""
    placeholder = "127.0.0.1:2181" if profile.connects_to is Server.ZOOKEEPER else "127.0.0.1:9092"
    try:
        profile.check(member_config(scenario, profile, "m000", placeholder, workload=False))
    except (ValueError, TypeError) as error:
        # the section as the file spells it: the backend's name or an alias of it
        section = next((key for key in (profile.name, *profile.aliases)
                        if scenario.line_of("group", key) != scenario.line_of("group")), profile.name)
        line = scenario.line_of("group", section) or scenario.line_of("group", "extra") or scenario.line_of("group")
        raise ScenarioError(scenario.source, [Problem(f"group.{section}", line, str(error))]) from None
    if workload_settings(scenario):
        try:
            profile.check(member_config(scenario, profile, "m000", placeholder))
        except (ValueError, TypeError):
            line = scenario.line_of("workload", "max_poll_records")
            raise ScenarioError(scenario.source, [Problem(
                "workload.max_poll_records", line, f"the {profile.name} client does not take max.poll.records: its "
                f"polls hand out at most {DEFAULT_MAX_POLL_RECORDS} records (leave it at that)")]) from None


def host_argv(scenario: Scenario, profile: BackendProfile, members: tuple[str, ...], *, config_path: Path,
              address_of: Callable[[str], str | None], events: Path, run_id: str) -> list[str]:
    """The command of one member host process; writes its members' configs to `config_path` first."""
    configs = [member_config(scenario, profile, name, address_of(name)).to_json() for name in members]
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(configs, indent=1))
    argv = [sys.executable, "-m", "experiments.run.member_cli", "--backend", profile.name,
            "--member-configs", str(config_path), "--events", str(events), "--run-id", run_id]
    workload = workload_of(scenario, profile)
    if workload.handles:
        argv += ["--workload", json.dumps({**workload.to_json(), "seed": scenario.seed})]
    return argv
