"""The coverage-guided fuzz targets: a short libFuzzer run of each finds nothing, a failure is written to a
file that replays it, and the inputs the fuzzers once broke the code with stay answered."""

from __future__ import annotations

import time

import pytest

from experiments.campaign.model import BUILTIN_SCENARIOS
from experiments.fuzz import libfuzzer
from experiments.fuzz.frames import join_frames, split_frames
from experiments.fuzz.scenario import ScenarioHarness
from experiments.fuzz.wire import WireHarness
from experiments.scenario import ScenarioError, load, loads, resolve
from rebalance.kafka_frames import FrameError, decode_request

pytestmark = pytest.mark.broker

SHORT_RUN_S = 5
# The suite shares a loaded machine: an input gets more than the commands' one second before it is a hang.
INPUT_TIMEOUT_S = 5


@pytest.mark.parametrize("target", libfuzzer.TARGETS)
def test_a_short_run_from_the_stored_corpus_finds_nothing(target, tmp_path):
    result = libfuzzer.run(target, tmp_path, seconds=SHORT_RUN_S, input_timeout_s=INPUT_TIMEOUT_S)
    assert result.ok, f"{result.failures} (log {result.log}):\n{result.log.read_text()[-3000:]}"
    assert result.runs > len(list(libfuzzer.stored_corpus(target).iterdir()))  # the seeds, then mutations


def test_a_failure_is_read_back_with_the_file_that_replays_it(tmp_path):
    log = tmp_path / "fuzz.log"
    log.write_text("#4096\tpulse  cov: 10 ft: 10 corp: 3/10b exec/s: 100 rss: 60Mb\n"
                   " === Uncaught Python exception: ===\nValueError: x\n"
                   f"artifact_prefix='{tmp_path}/failures/'; Test unit written to {tmp_path}/failures/crash-0a1b\n")
    result = libfuzzer.read_result("wire", log, exit_code=1, seconds=3.0)
    assert not result.ok
    assert result.failures == (tmp_path / "failures" / "crash-0a1b",)
    assert result.runs == 4096


def test_replaying_an_input_runs_it_once(tmp_path):
    saved = tmp_path / "input"
    saved.write_bytes(b"boom")   # a TOML error, which the loader names: no failure
    result = libfuzzer.run("scenario", tmp_path / "out", replay=[saved])
    assert result.ok, result.log.read_text()[-2000:]


def test_the_stored_corpus_holds_recorded_frames_of_both_clients_and_the_shipped_scenarios():
    wire = [path.name for path in libfuzzer.stored_corpus("wire").iterdir()]
    assert any(name.startswith("session-kp-") for name in wire)
    assert any(name.startswith("session-ck-consumer") for name in wire)   # KIP-848 heartbeats from librdkafka
    for path in libfuzzer.stored_corpus("wire").iterdir():
        frames = list(split_frames(path.read_bytes()))
        assert frames and join_frames(frames) == path.read_bytes(), path.name
    assert len(list(libfuzzer.stored_corpus("scenario").glob("*.toml"))) >= 10


def test_every_stored_input_goes_through_the_broker_cleanly():
    harness = WireHarness()
    for path in sorted(libfuzzer.stored_corpus("wire").iterdir()):
        harness.run(path.read_bytes())


def test_a_scenario_file_that_is_not_utf8_is_a_scenario_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ScenarioError) as raised:
        load(path)
    assert "UTF-8" in str(raised.value)
    ScenarioHarness().run(path.read_bytes())   # the fuzz target's own check agrees


def test_a_null_in_an_array_of_strings_is_a_malformed_request():
    # found by the wire fuzzer: DescribeGroups naming a null group reached the coordinator, which hashed None
    found = libfuzzer.stored_corpus("wire") / "found-describe-null-group-id"
    frame = next(split_frames(found.read_bytes()))
    with pytest.raises(FrameError, match=r"groups\[\]"):
        decode_request(frame)
    WireHarness().run(found.read_bytes())


def test_a_group_scaled_down_by_tens_of_thousands_resolves_at_once():
    # found by the scenario fuzzer: taking 9,962 members away cost the resolver 6 s (a hang to the fuzzer);
    # it took time in the square of the group's size, so 40,000 would take minutes
    found = libfuzzer.stored_corpus("scenario") / "found-scale-down-10012.toml"
    text = found.read_text().replace("to = 10012", "to = 40000")
    started = time.monotonic()
    with pytest.raises(ScenarioError):
        loads(text)
    assert time.monotonic() - started < 15   # about a second; generous on a shared machine


def test_a_group_or_a_timeline_too_big_to_expand_is_refused_at_once():
    # found by the scenario fuzzer: a member count of many digits kept the resolver naming members for
    # seconds (a hang to the fuzzer); so would a timeline scaling up and down by tens of thousands
    herd = (BUILTIN_SCENARIOS / "herd.toml").read_text()
    huge_group = herd.replace("members = 10", "members = 100000000000", 1)
    seesaw = herd + "".join(f"\n[[timeline]]\nat = {second}\naction = \"scale\"\nto = {to}\n"
                            for second, to in zip(range(1, 41), [90000, 10] * 20, strict=True))
    for text, complaint in ((huge_group, "group.members: must be at most 100,000"),
                            (seesaw, "members in all by 3.0 s; at most 100,000")):
        started = time.monotonic()
        with pytest.raises(ScenarioError, match=complaint):
            loads(text)
        assert time.monotonic() - started < 15   # well under a second; generous on a shared machine


def test_a_rolling_restart_of_tens_of_thousands_resolves_at_once():
    # a rolling restart grouped its members by host in time the square of their number: 60,000 took minutes
    herd = (BUILTIN_SCENARIOS / "herd.toml").read_text().replace("members = 10", "members = 60000", 1)
    text = herd + '\n[[timeline]]\nat = 40\naction = "rolling_restart"\ncount = 60000\ninterval = 0\n'
    started = time.monotonic()
    scenario = loads(text)
    assert time.monotonic() - started < 15   # under a second; generous on a shared machine
    assert sum(1 for step in resolve(scenario).steps if step.action == "restart") == 60000 // scenario.group.per_process
