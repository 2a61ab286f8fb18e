"""Scenario files: validation with field and line, and a deterministic resolved schedule."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from experiments import scenario as sc
from rebalance.javahash import coordinator_partition

BASE = """\
name = "t"
seed = 11
duration = 60

[cluster]
zookeeper_nodes = 1
brokers = 2

[[topics]]
name = "t0"
partitions = 6

[producer]
rate = 20

[group]
members = 4
strategy = "range"
"""


def load(timeline: str, base: str = BASE, **kwargs) -> sc.Scenario:
    return sc.loads(base + textwrap.dedent(timeline), source="s.toml", **kwargs)


def problems(timeline: str, base: str = BASE) -> list[sc.Problem]:
    with pytest.raises(sc.ScenarioError) as caught:
        load(timeline, base)
    return caught.value.problems


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_valid_file_loads_with_defaults():
    scenario = load("")
    assert scenario.group.members == 4
    assert scenario.cluster.brokers == 2
    assert scenario.backends == ("classic", "kip848", "legacy")   # every registered backend
    assert scenario.subscribed_topics == ("t0",)
    assert scenario.settle == 10


def test_unknown_fault_kind_names_field_and_line():
    timeline = """
    [[timeline]]
    at = 5
    action = "link"
    member = 0
    link = "coord"
    fault = "blackhole"
    duration = 5
    """
    [problem] = problems(timeline)
    assert problem.field == "timeline[0].fault"
    assert problem.line == line_of(BASE + textwrap.dedent(timeline), 'fault = "blackhole"')
    assert "partition" in problem.message


def test_negative_duration_is_rejected():
    timeline = """
    [[timeline]]
    at = 5
    action = "pause"
    member = 1
    duration = -2
    """
    [problem] = problems(timeline)
    assert problem.field == "timeline[0].duration"
    assert problem.line == line_of(BASE + textwrap.dedent(timeline), "duration = -2")


def test_member_index_out_of_range_is_rejected():
    timeline = """
    [[timeline]]
    at = 5
    action = "crash"
    member = 4
    """
    [problem] = problems(timeline)
    assert problem.field == "timeline[0].member"
    assert "out of range" in problem.message
    assert problem.line == line_of(BASE + textwrap.dedent(timeline), "member = 4")


def test_a_member_that_joined_later_may_be_targeted():
    scenario = load("""
    [[timeline]]
    at = 5
    action = "join"

    [[timeline]]
    at = 10
    action = "crash"
    member = 4
    """)
    steps = sc.resolve(scenario).steps
    assert [step.targets for step in steps] == [("m004",), ("m004",)]


def test_action_after_the_end_is_rejected():
    timeline = """
    [[timeline]]
    at = 60
    action = "crash"
    member = 0
    """
    [problem] = problems(timeline)
    assert problem.field == "timeline[0].at"
    assert "end of the timeline" in problem.message


def test_fault_outlasting_the_run_is_rejected():
    [problem] = problems("""
    [[timeline]]
    at = 50
    action = "link"
    member = 0
    link = "data"
    fault = "partition"
    duration = 20
    """)
    assert problem.field == "timeline[0].duration"


def test_every_problem_is_reported_at_once():
    found = problems("""
    [[timeline]]
    at = 5
    action = "explode"

    [[timeline]]
    at = 6
    action = "crash"
    member = 0
    colour = "red"
    """, base=BASE.replace("brokers = 2", "brokers = 0"))
    fields = {problem.field for problem in found}
    assert {"cluster.brokers", "timeline[0].action", "timeline[1].colour"} <= fields


def test_overlapping_faults_on_one_link_are_rejected():
    [problem] = problems("""
    [[timeline]]
    at = 5
    action = "link"
    member = 0
    link = "coord"
    fault = "partition"
    duration = 10

    [[timeline]]
    at = 8
    action = "link"
    member = 0
    link = "both"
    fault = "latency"
    latency_ms = 100
    duration = 5
    """)
    assert "overlap" in problem.message


def test_a_crashed_member_cannot_be_crashed_again():
    [problem] = problems("""
    [[timeline]]
    at = 5
    action = "crash"
    member = 2

    [[timeline]]
    at = 7
    action = "crash"
    member = 2
    """)
    assert "crashed" in problem.message


def test_legacy_rejects_coordinator_only_strategies_and_isolating_a_single_node():
    found = problems("""
    [[timeline]]
    at = 5
    action = "zk_isolate"
    duration = 5
    """, base=BASE.replace('"range"', '"cooperative-sticky"'))
    assert {problem.field for problem in found} == {"group.strategy", "timeline[0].action"}


def test_random_targets_are_resolved_from_the_seed():
    timeline = """
    [[timeline]]
    at = 5
    action = "crash"
    member = "random"

    [[timeline]]
    at = 10
    action = "link"
    member = "random"
    link = "coord"
    fault = "partition"
    duration = 10
    """
    first = sc.resolve(load(timeline))
    assert first == sc.resolve(load(timeline))
    others = {sc.resolve(load(timeline, BASE.replace("seed = 11", f"seed = {seed}"))).steps[0].targets
              for seed in range(20)}
    assert len(others) > 1, "the seed should change which member is hit"
    crashed = first.steps[0].targets[0]
    link_target = first.steps[1].targets[0]
    assert link_target != crashed, "a crashed member is not picked again"
    assert [step.op for step in first.steps] == ["start", "start", "heal"]
    assert first.steps[2].at == 20


def test_scale_and_rolling_restart_expand_into_steps():
    steps = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "scale"
    to = 8

    [[timeline]]
    at = 15
    action = "scale"
    to = 3

    [[timeline]]
    at = 25
    action = "rolling_restart"
    count = 2
    interval = 4
    """)).steps
    assert steps[0].targets == ("m004", "m005", "m006", "m007")
    assert steps[1].targets == ("m003", "m004", "m005", "m006", "m007")
    assert [(step.at, step.action, step.targets) for step in steps[2:]] == [
        (25, "restart", ("m000",)), (29, "restart", ("m001",))]


def test_shared_hosts_take_member_faults_per_member_and_emulate_them():
    base = BASE.replace("members = 4", "members = 5\nper_process = 2")
    schedule = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "crash"
    member = 1

    [[timeline]]
    at = 6
    action = "pause"
    member = 2
    duration = 3

    [[timeline]]
    at = 7
    action = "crash"
    member = 4

    [[timeline]]
    at = 10
    action = "join"
    count = 2

    [[timeline]]
    at = 12
    action = "restart"
    member = 1

    [[timeline]]
    at = 14
    action = "leave"
    member = 0

    [[timeline]]
    at = 16
    action = "restart"
    member = 4

    [[timeline]]
    at = 20
    action = "scale"
    to = 3
    """, base))
    assert [host.members for host in schedule.hosts] == [("h000-0", "h000-1"), ("h001-0", "h001-1"), ("h002-0",),
                                                         ("h003-0", "h003-1")]
    steps = [(step.at, step.op, step.action, step.targets, step.emulated) for step in schedule.steps]
    assert steps == [
        (5, "start", "crash", ("h000-1",), True),          # one member of a shared host: emulated
        (6, "start", "pause", ("h001-0",), True),
        (7, "start", "crash", ("h002-0",), False),         # a host of its own: a real SIGKILL
        (9, "heal", "pause", ("h001-0",), True),
        (10, "start", "join", ("h003-0", "h003-1"), False),
        (12, "start", "restart", ("h000-1",), True),       # a fresh instance in the running host
        (14, "start", "leave", ("h000-0",), False),        # a clean close, not emulated
        (16, "start", "restart", ("h002-0",), False),      # its host process comes back
        # restarted members count as the latest started: the last three running leave, parts of hosts
        (20, "start", "scale", ("h003-1", "h000-1", "h002-0"), False),
    ]
    # Emulated crashes and pauses black-hole the member's links: it gets proxies of its own.
    assert schedule.proxied_members() == ("h000-1", "h001-0")

    link = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "link"
    member = 3
    link = "coord"
    fault = "partition"
    duration = 5

    [[timeline]]
    at = 20
    action = "scale"
    to = 3
    """, base))
    assert link.steps[0].targets == ("h001-1",), "each member has links of its own"
    assert link.proxied_members() == ("h001-1",)
    assert link.steps[2].targets == ("h001-1", "h002-0"), "a scale down may take part of a host"

    rolling = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "rolling_restart"
    count = 3
    interval = 2
    """, base))
    assert [(step.targets, step.emulated) for step in rolling.steps] == [
        (("h000-0", "h000-1"), False), (("h001-0",), True)]

    # An emulated crash or pause holds the member's links: it must not overlap a link fault there.
    [problem] = problems("""
    [[timeline]]
    at = 5
    action = "link"
    member = 1
    link = "data"
    fault = "latency"
    latency_ms = 50
    duration = 10

    [[timeline]]
    at = 8
    action = "pause"
    member = 1
    duration = 2
    """, base)
    assert "already has a fault" in problem.message and "h000-1 (data)" in problem.message


def test_overrides_change_values_before_validation():
    scenario = load("", overrides=["group.members=50", 'group.strategy="roundrobin"'])
    assert scenario.group.members == 50
    assert scenario.group.strategy == "roundrobin"
    with pytest.raises(sc.ScenarioError) as caught:
        load("", overrides=["group.members=-1"])
    assert caught.value.problems[0].field == "group.members"


def test_a_bad_override_names_set_as_its_source_not_the_files_line():
    with pytest.raises(sc.ScenarioError) as caught:
        load("", overrides=["group.members=abc"])
    assert caught.value.lines() == ["--set group.members=abc: group.members: must be an integer, got 'abc'"]
    with pytest.raises(sc.ScenarioError) as caught:
        load("", overrides=["group.members"])
    assert caught.value.lines()[0].startswith("--set group.members: group.members: an override needs KEY=VALUE")
    with pytest.raises(sc.ScenarioError) as caught:   # an entry of an array of tables, named by its name
        load("", overrides=["topics.t0.partitions=0"])
    assert caught.value.lines()[0].startswith("--set topics.t0.partitions=0: topics[0].partitions: ")


def test_partitions_per_member_scale_with_the_group_and_overrides_name_a_topic():
    scaled = BASE.replace("partitions = 6", "partitions_per_member = 2")
    assert load("", scaled).topics[0].partitions == 8
    assert load("", scaled, overrides=["group.members=300"]).topics[0].partitions == 600
    # one way or the other: an override of one replaces the other
    fixed = load("", scaled, overrides=["group.members=300", "topics.t0.partitions=100"])
    assert fixed.topics[0].partitions == 100
    assert load("", overrides=["topics.t0.partitions_per_member=3"]).topics[0].partitions == 12
    both = BASE.replace("partitions = 6", "partitions = 6\npartitions_per_member = 2")
    assert "not both" in problems("", both)[0].message
    with pytest.raises(sc.ScenarioError) as caught:
        load("", overrides=["topics.t9.partitions=10"])
    assert "no entry named 't9'" in caught.value.problems[0].message
    (problem,) = problems("", scaled.replace("partitions_per_member = 2", "partitions_per_member = 300000"))
    assert (problem.field, problem.message) == (
        "topics[0].partitions_per_member", "300000 x 4 members is 1,200,000 partitions; at most 1,000,000")


def test_herd_scenarios_give_every_member_and_the_newcomer_work():
    folder = Path(sc.__file__).parent.parent / "scenarios"
    for name in ("herd", "demo-herd", "herd-1000"):
        for members in (8, 32, 100, 1000):
            scenario = sc.load(folder / f"{name}.toml", overrides=[f"group.members={members}"])
            assert sum(topic.partitions for topic in scenario.topics) > scenario.group.members + 1, name


def test_coordinator_hash_matches_kafka_vectors():
    assert coordinator_partition("") == 0
    assert coordinator_partition("group-id") == 13
    assert coordinator_partition("my-group") == 12
    assert coordinator_partition("consumer-group") == 38
    assert coordinator_partition("polygenelubricants") == 0


def test_toml_syntax_errors_carry_a_line():
    with pytest.raises(sc.ScenarioError) as caught:
        sc.loads("duration = 30\n[group\n", source="x.toml")
    assert caught.value.problems[0].line == 2


def test_builtin_scenarios_are_valid():
    folder = Path(sc.__file__).parent.parent / "scenarios"
    for path in sorted(folder.glob("*.toml")):
        scenario = sc.load(path)
        sc.resolve(scenario)


def test_last_picks_the_most_recently_started_member():
    steps = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "join"

    [[timeline]]
    at = 10
    action = "leave"
    member = "last"
    """)).steps
    assert steps[1].targets == ("m004",)


def test_churn_scenario_expands_into_whole_hosts():
    folder = Path(sc.__file__).parent.parent / "scenarios"
    schedule = sc.resolve(sc.load(folder / "churn-range.toml"))
    grow, shrink, *restarts = [step for step in schedule.steps if step.action != "phase"]
    assert len(grow.targets) == 50 and grow.targets == shrink.targets
    assert [step.targets for step in restarts] == [tuple(f"h000-{i}" for i in range(5)),
                                                   tuple(f"h001-{i}" for i in range(5))]


def test_a_backends_settings_are_kept_under_its_profiles_name():
    scenario = load("""
    [group.classic]
    "heartbeat.interval.ms" = 1000
    [group.kip848]
    "group.consumer.heartbeat.interval.ms" = 2000
    [group.extra]
    "max.poll.interval.ms" = 60000
    """)
    assert scenario.group.settings_of("classic") == {"max.poll.interval.ms": 60000, "heartbeat.interval.ms": 1000}
    assert scenario.group.settings_of("kip848") == {"max.poll.interval.ms": 60000,
                                                    "group.consumer.heartbeat.interval.ms": 2000}
    assert scenario.group.settings_of("legacy") == {"max.poll.interval.ms": 60000}


def test_a_native_setting_written_as_dotted_keys_or_set_from_the_command_line_keeps_its_kafka_name():
    """TOML reads an unquoted dotted key as nested tables, and so does `--set` (a campaign's `set` and `sweep`):
    a settings section reads them back as the one dotted name, so Kafka's names can be given either way."""
    scenario = load("""
    [group.kip848]
    group.consumer.session.timeout.ms = 10000
    "group.remote.assignor" = "range"
    """, overrides=["group.kip848.group.consumer.min.session.timeout.ms=10000"])
    assert scenario.group.settings_of("kip848") == {"group.consumer.session.timeout.ms": 10000,
                                                    "group.remote.assignor": "range",
                                                    "group.consumer.min.session.timeout.ms": 10000}
    overridden = load("""
    [group.kip848]
    "group.consumer.session.timeout.ms" = 10000
    """, overrides=["group.kip848.group.consumer.session.timeout.ms=12000"])
    assert overridden.group.settings_of("kip848") == {"group.consumer.session.timeout.ms": 12000}


def test_modern_is_accepted_as_an_alias_of_classic():
    scenario = load("""
    [group.modern]
    "heartbeat.interval.ms" = 1000
    """, BASE.replace('name = "t"\n', 'name = "t"\nbackends = ["legacy", "modern"]\n'))
    assert scenario.backends == ("legacy", "classic")
    assert scenario.group.settings_of("classic") == {"heartbeat.interval.ms": 1000}
    assert scenario.group.settings_of("modern") == {"heartbeat.interval.ms": 1000}


def test_a_section_under_its_name_and_its_alias_is_refused():
    [problem] = problems("""
    [group.classic]
    "heartbeat.interval.ms" = 1000
    [group.modern]
    "heartbeat.interval.ms" = 2000
    """)
    assert problem.field == "group.modern" and "[group.classic]" in problem.message


def test_an_unknown_backend_section_is_refused():
    [problem] = problems("""
    [group.kafka4]
    "heartbeat.interval.ms" = 1000
    """)
    assert problem.field == "group.kafka4"


def test_a_scale_down_member_by_member_is_a_mark_then_leaves_or_crashes_newest_first():
    steps = sc.resolve(load("""
    [[timeline]]
    at = 5
    action = "scale"
    to = 8

    [[timeline]]
    at = 15
    after = "stable"
    timeout = 30
    action = "scale"
    to = 5
    interval = 0.5

    [[timeline]]
    at = 20
    action = "scale"
    to = 3
    how = "crash"
    name = "killed"
    """)).steps
    assert [(s.at, s.action, s.targets, s.params.get("name")) for s in steps[1:]] == [
        (15, "phase", (), "scale-to-5"), (15, "leave", ("m007",), None), (15.5, "leave", ("m006",), None),
        (16, "leave", ("m005",), None),
        (20, "phase", (), "killed"), (20, "crash", ("m004",), None), (20, "crash", ("m003",), None)]
    assert steps[1].params["after"] == "stable" and "after" not in steps[2].params   # the wait is the mark's
    assert len({s.fault_id for s in steps[2:5]}) == 3


@pytest.mark.parametrize("entry, message", [
    ('to = 8\ninterval = 1', "`interval` and `how` shape a scale down"),
    ('to = 1\ninterval = 30', "the last of 3 departures would fall at 65.0 s"),
    ('to = 1\nhow = "vanish"', "unknown value 'vanish' (expected one of: leave, crash)"),
])
def test_a_scale_down_member_by_member_is_checked(entry, message):
    found = problems('[[timeline]]\nat = 5\naction = "scale"\n' + entry + "\n")
    assert any(message in problem.message for problem in found), found


REFERENCE_TIMELINE = """
[[timeline]]
at = 0
action = "phase"
name = "steady"

[[timeline]]
at = 10
action = "scale"
to = 6

[reference]
source = "an article"
phases = { "4 → 6" = "scale-to-6" }

[reference.strategies.range]
"4 → 6" = [10, 2000, 3000]
total = 10
"""


def test_a_reference_reads_its_figures_under_its_own_phase_names():
    reference = load(REFERENCE_TIMELINE).reference
    assert reference.phases == (("4 → 6", "scale-to-6"),) and reference.name_of("scale-to-6") == "4 → 6"
    assert reference.figure("range", "4 → 6", "max latency, ms") == 2000 and reference.totals == {"range": 10}
    assert load("").reference is None


@pytest.mark.parametrize(("change", "field", "words"), [
    (('"4 → 6" = [10, 2000, 3000]', '"4 → 6" = [10, 2000]'), 'reference.strategies.range.4 → 6', "three numbers"),
    (('"4 → 6" = [10, 2000, 3000]', '"6 → 4" = [1, 2, 3]'), "reference.strategies.range.6 → 4", "not a phase"),
    (("strategies.range]", "strategies.rangee]"), "reference.strategies.rangee", "unknown strategy"),
    (('"scale-to-6" }', '"scale-to-9" }'), "reference.phases.4 → 6", "the timeline plays no phase 'scale-to-9'"),
    (('source = "an article"', ""), "reference.source", "missing"),
    (("total = 10", "total = -1"), "reference.strategies.range.total", "a number of records"),
])
def test_a_bad_reference_is_refused_naming_its_key(change, field, words):
    found = problems(REFERENCE_TIMELINE.replace(*change))
    assert [(problem.field, words in problem.message) for problem in found] == [(field, True)], found
