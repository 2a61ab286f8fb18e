"""Lab 4 (three terminals), walked as a student would: four real shells in tmux, five processes (a broker,
a producer, three members) besides ZooKeeper, keys pressed where the text says to press them, and every
claim checked against what the members printed.

The walk follows the text's steps in order; the lab's own commands are typed, with the ports replaced by
free ones (the lab's `test: replace` comments) so that the walk never meets a server of someone else's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.labs.terminals import Terminal, Tmux
from tests.labs.walk import _PY_WARNING, VENV_BIN, Claim, Lab, Walk, kill_all, prepare, write_measured

pytestmark = [pytest.mark.labs, pytest.mark.timeout(1200)]


@pytest.fixture(autouse=True)
def _tmux():
    assert shutil.which("tmux"), "the three-terminal walk needs tmux (scripts/setup installs it)"

LAB = Lab("04-three-terminals.md")
NAMES = ("alice", "bob", "carol")
_OWNS = re.compile(r"^\d\d:\d\d:\d\d (?P<member>\S+) owns (?P<owned>.+?)\s+\(consumed so far: (?P<consumed>\d+)\)")
QUIET_S = 60        # no member printed anything for this long: nothing is under way any more
SETTLE_CAP_S = 600  # a limit on one wait however busy the members stay


@dataclass
class Step:
    """What the members printed during one step of the lab, and the moments that matter in it."""

    name: str
    started: float
    ended: float = 0.0
    moments: dict[str, float] = field(default_factory=dict)


@dataclass
class ThreeTerminals(Walk):
    terminals: dict[str, Terminal] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)

    def owns(self, name: str, since: float = 0.0, until: float = float("inf")) -> list[tuple[float, list[str], int]]:
        """Every 'owns' line of a member's terminal in the time window: (seen at, partitions, consumed)."""
        result = []
        for at, text in self.terminals[name].lines():
            match = _OWNS.match(text)
            if match and since <= at <= until:
                owned = [] if match["owned"] == "nothing" else match["owned"].split(", ")
                result.append((at, owned, int(match["consumed"])))
        return result

    def current(self, name: str, since: float = 0.0) -> list[str] | None:
        """The partitions a member's last line (since that time) shows, or None if it printed none."""
        lines = self.owns(name, since=since)
        return lines[-1][1] if lines else None


def _split(value: str) -> list[str]:
    return value.split(",")


def _wait_for(walk: ThreeTerminals, names, expected, what: str, *, since: float,
              wanted: dict[str, str] | str) -> float:
    """Wait until each named member's last line (since that time) shows what `expected(name, owned)` accepts.

    How long a rebalance takes depends on the machine (a busy two-core one takes several times longer), so the
    wait is not a fixed budget: it goes on while the members are still at work, and gives up once none of them
    has printed a line for QUIET_S (0.8 retries a failed rebalance within seconds, the coordinator's members
    within a session), or after SETTLE_CAP_S in all. `wanted` says, per member or for all, what the wait waits
    for, for the message when it gives up."""
    started = time.monotonic()
    last_change, printed = started, None
    while True:
        now = time.monotonic()
        current = {name: walk.current(name, since) for name in names}
        if all(owned is not None and expected(name, owned) for name, owned in current.items()):
            return time.monotonic()     # after the lines were read: the step ends with the line that settled it
        lines = sum(len(walk.terminals[name].lines()) for name in names)
        if lines != printed:
            last_change, printed = now, lines
        if now - last_change > QUIET_S or now - started > SETTLE_CAP_S:
            break
        time.sleep(0.2)
    waited = time.monotonic() - started
    reason = f"none printed a line for {QUIET_S:.0f} s" if waited < SETTLE_CAP_S else f"{SETTLE_CAP_S:.0f} s in all"
    expectation = wanted if isinstance(wanted, dict) else dict.fromkeys(names, wanted)
    rows = "; ".join(f"{name}: expected {expectation[name]}, last printed {current[name]}" for name in names)
    raise AssertionError(f"no {what} after {waited:.0f} s ({reason}): {rows}")


def _member_lines(block) -> dict[str, str]:
    """A block of one member command per terminal: member name -> its command line."""
    lines = {}
    for command in block:
        match = re.search(r"--id (\w+)", command)
        assert match, f"a member command without --id: {command}"
        lines[match[1]] = command
    assert tuple(lines) == NAMES, f"expected commands for {NAMES}, got {tuple(lines)}"
    return lines


def _drive(walk: ThreeTerminals, tmux: Tmux) -> None:
    servers_block, legacy_block, kill_block, classic_block, cleanup_block = walk.text.blocks
    two_each = {"alice": ["t0-0", "t0-1"], "bob": ["t0-2", "t0-3"], "carol": ["t0-4", "t0-5"]}

    # 1. the servers, typed line by line in terminal 1
    servers = tmux.terminal("servers")
    for command in walk.commands(servers_block):
        output = servers.run(command, timeout=180)
        assert not any(line.startswith("error:") for line in output), f"{command}:\n" + "\n".join(output)

    # 2. one legacy member per terminal, started in name order
    step = walk.steps["started"] = Step("started", time.monotonic())
    legacy = _member_lines(walk.commands(legacy_block))
    for name in NAMES:
        walk.terminals[name] = tmux.terminal(name)
        walk.terminals[name].type(legacy[name])
        walk.terminals[name].wait(lambda lines: any("started" in text for _, text in lines), 120, "start")
    step.ended = _wait_for(walk, NAMES, lambda name, owned: owned == two_each[name], "two partitions each",
                           since=step.started, wanted={name: str(parts) for name, parts in two_each.items()})

    # a clean leave: Ctrl-C in carol's terminal
    step = walk.steps["leave"] = Step("leave", time.monotonic())
    time.sleep(5)          # the members read for a while: their counts grow before the leave
    step.moments["ctrl-c"] = walk.terminals["carol"].key("C-c")
    walk.terminals["carol"].wait(lambda lines: any("left the group" in text for _, text in lines), 60, "leave")
    step.ended = _wait_for(walk, ("alice", "bob"), lambda name, owned: len(owned) == 3, "three partitions each",
                           since=step.moments["ctrl-c"], wanted="three partitions")

    # a crash: carol again (up arrow, Enter), then Ctrl-Z and kill -9 %1
    walk.terminals["carol"].wait(lambda lines: walk.terminals["carol"].at_prompt(), 60, "prompt")
    restarted = time.monotonic()
    walk.terminals["carol"].key("Up")
    walk.terminals["carol"].key("Enter")
    _wait_for(walk, NAMES, lambda name, owned: owned == two_each[name], "two partitions each again",
              since=restarted, wanted={name: str(parts) for name, parts in two_each.items()})
    time.sleep(2)
    step = walk.steps["crash"] = Step("crash", time.monotonic())
    step.moments["ctrl-z"] = walk.terminals["carol"].key("C-z")
    walk.terminals["carol"].wait(lambda lines: any("Stopped" in text for _, text in lines[-5:]), 30, "Stopped")
    (kill,) = walk.commands(kill_block)
    walk.terminals["carol"].run(kill, timeout=30)
    step.ended = _wait_for(walk, ("alice", "bob"), lambda name, owned: len(owned) == 3, "takeover",
                           since=step.moments["ctrl-z"], wanted="three partitions")

    # stop alice and bob (Ctrl-C), then the coordinator's members in the same three terminals
    for name in ("alice", "bob"):
        walk.terminals[name].key("C-c")
    for name in ("alice", "bob"):
        walk.terminals[name].wait(lambda lines, name=name: walk.terminals[name].at_prompt(), 60, "prompt")
    step = walk.steps["cooperative"] = Step("cooperative", time.monotonic())
    classic = _member_lines(walk.commands(classic_block))
    for name in NAMES:
        walk.terminals[name].type(classic[name])
        _wait_for(walk, (name,), lambda member, owned: bool(owned), f"{name}'s first partitions",
                  since=step.started, wanted="some partitions")
        time.sleep(1)
    step.ended = _wait_for(walk, NAMES, lambda name, owned: len(owned) == 2, "two partitions each",
                           since=step.started, wanted="two partitions")
    time.sleep(3)          # anything printed after the group settled belongs to the step too
    step.ended = time.monotonic()

    # 4. clean up: Ctrl-C the members, then terminal 1's own commands
    for name in NAMES:
        walk.terminals[name].key("C-c")
    for name in NAMES:
        walk.terminals[name].wait(lambda lines: any("left the group" in text for _, text in lines), 60, "leave")
    for command in walk.commands(cleanup_block):
        output = servers.run(command, timeout=120)
        assert not any(line.startswith("error:") for line in output), f"{command}:\n" + "\n".join(output)


def _own_processes(folder: Path) -> list[int]:
    """Processes still running in the scratch folder (every one the walk's shells started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory):
    folder = prepare(tmp_path_factory.mktemp("04-three-terminals")).resolve()
    walk = ThreeTerminals(text=LAB.text(), folder=folder)
    assert len(walk.text.blocks) == 5, "the walk expects the lab's five sh blocks (servers, members, kill, " \
                                       "coordinator members, clean-up)"
    tmux = Tmux(folder, walk.env())
    try:
        _drive(walk, tmux)
        yield walk
    finally:
        # Each clean-up step on its own: one that fails must not hide the failure the walk may have raised.
        problems = []
        for step in (lambda: write_measured(walk), tmux.close, lambda: kill_all(_own_processes(folder)),
                     lambda: subprocess.run([str(VENV_BIN / "rebalance-lab"), "zk", "down"], env=walk.env(),
                                            cwd=folder, capture_output=True, timeout=120)):
            try:
                step()
            except Exception as error:     # noqa: BLE001 - reported below, after every step had its turn
                problems.append(f"{type(error).__name__}: {error}")
        if problems:
            warnings.warn("lab 4's clean-up: " + "; ".join(problems), stacklevel=1)


def test_every_step_runs_clean(walked: ThreeTerminals) -> None:
    for name, terminal in walked.terminals.items():
        shown = [text for _, text in terminal.lines()]
        bad = [text for text in shown if text.startswith("error:") or "Traceback" in text
               or _PY_WARNING.match(text)]
        assert not bad, f"terminal {name} printed:\n" + "\n".join(bad)


def test_claim(walked: ThreeTerminals, claim: Claim) -> None:
    LAB.checks[claim.name](walked, claim)


@LAB.check("shares")
def _shares(walked: ThreeTerminals, claim: Claim) -> None:
    step = walked.steps["started"]
    got = {name: walked.owns(name, until=step.ended)[-1][1] for name in claim.args}
    walked.note(claim, got)
    assert got == {name: _split(parts) for name, parts in claim.args.items()}, claim.sentence


@LAB.check("leave-splits")
def _leave_splits(walked: ThreeTerminals, claim: Claim) -> None:
    step = walked.steps["leave"]
    args = dict(claim.args)
    within = float(args.pop("within_s"))
    for name, parts in args.items():
        lines = walked.owns(name, since=step.moments["ctrl-c"], until=step.ended)
        assert lines, f"{name} printed no change after carol's Ctrl-C"
        assert lines[-1][1] == _split(parts), f"{claim.sentence}\n{name} ended with {lines[-1][1]}"
        took = lines[-1][0] - step.moments["ctrl-c"]
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[name] = \
            f"{lines[-1][1]} {took:.1f} s after Ctrl-C"
        assert took <= within, f"{name} took {took:.1f} s after Ctrl-C to settle (the lab says a few seconds)"
        before = walked.owns(name, until=step.moments["ctrl-c"])
        assert lines[-1][2] > before[-1][2] > 0, f"{name}'s record count did not grow: {before[-1]} {lines[-1]}"


@LAB.check("crash-waits-for-session")
def _crash(walked: ThreeTerminals, claim: Claim) -> None:
    step = walked.steps["crash"]
    args = dict(claim.args)
    at_least = float(args.pop("at_least_s"))
    for name, parts in args.items():
        lines = walked.owns(name, since=step.moments["ctrl-z"], until=step.ended)
        assert lines, f"{name} printed no change after carol was killed"
        first = lines[0][0] - step.moments["ctrl-z"]
        walked.measured.setdefault(f"line {claim.line}: {claim.id}", {})[name] = \
            f"first change {first:.1f} s after Ctrl-Z, ended with {lines[-1][1]}"
        assert first >= at_least, f"{name} changed {first:.1f} s after Ctrl-Z: before carol's session could end"
        assert lines[-1][1] == _split(parts), f"{claim.sentence}\n{name} ended with {lines[-1][1]}"


@LAB.check("cooperative-keeps")
def _cooperative(walked: ThreeTerminals, claim: Claim) -> None:
    step = walked.steps["cooperative"]
    for name, count in claim.args.items():
        assert len(walked.owns(name, until=step.ended)[-1][1]) == int(count), claim.sentence
    alice = walked.owns("alice", since=step.started, until=step.ended)
    first = next(index for index, (_, owned, _) in enumerate(alice) if owned)
    after = [owned for _, owned, _ in alice[first:]]
    walked.note(claim, {"alice in turn": after, **{name: walked.owns(name, until=step.ended)[-1][1] for name in claim.args}})
    assert all(after), f"alice owned nothing during a cooperative rebalance: {after}"
    assert [len(owned) for owned in after] == [6, 3, 2], f"alice's partitions went {after}"
    for earlier, later in zip(after, after[1:], strict=False):
        assert set(later) <= set(earlier), f"alice took a partition from someone: {earlier} -> {later}"
