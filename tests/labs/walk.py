"""A lab's Markdown as a test: its commands, its claims, and a scratch folder to run them in.

A lab (labs/NN-*.md) runs the commands of its fenced `sh` blocks and says what they show. Each thing it
says that a change in the lab's behaviour could make false is declared right after the sentence, in an
HTML comment the reader does not see:

    Sticky moves only what balance requires (2).
    <!-- claim: moved strategy=sticky count=2 -->

`claim:` names a check, and the words after it are its arguments (`key=value`, quoted like a shell's).
Each lab's test module registers one function per check name (`Lab.check`); a claim without a check, or a
check that no claim uses, fails the fast tests (tests/test_labs_text.py), so the text and its checks
cannot drift apart. A lab may also tell the test how to run it smaller or on free ports:

    <!-- test: replace "group.members=25" "group.members=12" -->

replaces the first text by the second in every command of the lab before the test runs it; `{port:NAME}`
in the second text is a free TCP port, the same one for the same NAME. A block that the lab runs to show a
refusal says so just before it, with the exit status it expects:

    <!-- test: exit 2 -->

The commands run literally (`./lab COMMAND` is `rebalance-lab COMMAND`, as the README says) in a scratch
folder that stands in for the checkout: `./lab`, `.venv` and `benchmarks` are there, and `runs/` is the
scratch folder's own, so a lab's test never touches the checkout's runs or a ZooKeeper that `zk up`
started outside it ($LAB_STATE_DIR is the scratch folder's too).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rebalance.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
VENV_BIN = ROOT / ".venv" / "bin"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*$")
_PY_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: .*$", re.MULTILINE)   # what Python's warnings module prints
_COMMENT = re.compile(r"<!--\s*(?P<kind>claim|test):\s*(?P<body>.*?)\s*-->", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced `sh` block: its commands, in order, one per logical line."""

    index: int
    line: int                     # of the opening fence, 1-based
    text: str
    exit: int = 0                 # the exit status the lab expects (a `test: exit N` just before it)

    @property
    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, blank lines dropped, comments kept."""
        joined = re.sub(r"[ \t]*\\\n[ \t]*", " ", self.text)
        return [line.strip() for line in joined.splitlines() if line.strip()]


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One `<!-- claim: NAME key=value ... -->`: the check's name, its arguments, where it stands."""

    name: str
    args: dict[str, str]
    line: int
    after_block: int | None       # the last sh block before it, or None
    sentence: str                 # the text just before it, for failure messages

    @property
    def id(self) -> str:
        words = [self.name] + [f"{key}={value}" for key, value in self.args.items()]
        return " ".join(words)


@dataclass(frozen=True, kw_only=True)
class Replacement:
    old: str
    new: str
    line: int


@dataclass(frozen=True, kw_only=True)
class LabText:
    path: Path
    blocks: tuple[Block, ...]
    claims: tuple[Claim, ...]
    replacements: tuple[Replacement, ...]

    @property
    def name(self) -> str:
        return self.path.stem


def parse(path: Path) -> LabText:
    """Read a lab's sh blocks, claims and test directives. Malformed comments raise ValueError."""
    text = path.read_text()
    blocks: list[Block] = []
    fences: list[tuple[int, int]] = []          # character spans of every fenced block (any language)
    lines = text.splitlines(keepends=True)
    offset, opened, lang, body = 0, None, "", []
    for number, line in enumerate(lines, start=1):
        match = _FENCE.match(line.rstrip("\n"))
        if match and opened is None:
            opened, lang, body, indent = (number, offset), match["lang"], [], len(match["indent"])
        elif match and opened is not None:
            if lang == "sh":
                blocks.append(Block(index=len(blocks), line=opened[0], text="".join(body),
                                    exit=_expected_exit(text[:opened[1]])))
            fences.append((opened[1], offset + len(line)))
            opened = None
        elif opened is not None:
            body.append(line[indent:] if line[:indent].strip() == "" else line)
        offset += len(line)
    if opened is not None:
        raise ValueError(f"{path.name}:{opened[0]}: a fenced block is never closed")

    block_starts = [(_offset_of_line(lines, block.line), block.index) for block in blocks]
    claims: list[Claim] = []
    replacements: list[Replacement] = []
    for match in _COMMENT.finditer(text):
        start = match.start()
        if any(begin <= start < end for begin, end in fences):
            continue
        number = text.count("\n", 0, start) + 1
        where = f"{path.name}:{number}"
        try:
            words = shlex.split(match["body"])
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if match["kind"] == "test":
            if len(words) == 3 and words[0] == "replace":
                replacements.append(Replacement(old=words[1], new=words[2], line=number))
            elif not (len(words) == 2 and words[0] == "exit" and words[1].isdigit()):
                raise ValueError(f'{where}: expected <!-- test: replace "OLD" "NEW" --> or <!-- test: exit N -->, '
                                 f'got {match["body"]!r}')
            continue
        if not words:
            raise ValueError(f"{where}: a claim needs a check name")
        args = {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if not sep or not key:
                raise ValueError(f"{where}: claim argument {word!r} is not key=value")
            args[key] = value
        before = [index for begin, index in block_starts if begin < start]
        claims.append(Claim(name=words[0], args=args, line=number, after_block=before[-1] if before else None,
                            sentence=_sentence_before(text, start)))
    return LabText(path=path, blocks=tuple(blocks), claims=tuple(claims), replacements=tuple(replacements))


def _expected_exit(head: str) -> int:
    """The status of a `test: exit N` comment with nothing but blank lines between it and the fence."""
    match = re.search(r"<!--\s*test:\s*exit\s+(\d+)\s*-->\s*\Z", head)
    return int(match[1]) if match else 0


def _offset_of_line(lines: list[str], number: int) -> int:
    return sum(len(line) for line in lines[:number - 1])


def _sentence_before(text: str, end: int) -> str:
    """The paragraph (or list item) that ends where the comment starts, on one line."""
    head = text[:end].rstrip()
    head = _COMMENT.sub("", head).rstrip()
    paragraph = re.split(r"\n\s*\n|\n\s*- ", head)[-1]
    return " ".join(paragraph.split()).removeprefix("- ")


def lab_files() -> list[Path]:
    return sorted(LABS.glob("[0-9][0-9]-*.md"))


# ---- the checks a lab's test module registers

Check = Callable[["Walk", Claim], None]


class Lab:
    """One lab's checks, by claim name. A test module makes one and registers a function per claim name."""

    registry: dict[str, Lab] = {}

    def __init__(self, filename: str) -> None:
        self.path = LABS / filename
        self.checks: dict[str, Check] = {}
        Lab.registry[self.path.name] = self

    def check(self, name: str) -> Callable[[Check], Check]:
        def register(function: Check) -> Check:
            if name in self.checks:
                raise ValueError(f"{self.path.name}: check {name!r} registered twice")
            self.checks[name] = function
            return function
        return register

    def text(self) -> LabText:
        return parse(self.path)


# ---- running a lab's commands

@dataclass
class Outcome:
    """What one block printed and how it ended."""

    block: Block
    commands: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Walk:
    """A lab walked in a scratch folder: what each of its blocks printed, and the folder itself."""

    text: LabText
    folder: Path
    ports: dict[str, int] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    measured: dict[str, object] = field(default_factory=dict)    # claim id -> what its check measured

    def note(self, claim: Claim, value: object) -> None:
        """Keep what a check measured for a claim; the walk writes them to walk/measured.json at its end."""
        self.measured[f"line {claim.line}: {claim.id}"] = value

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LAB_STATE_DIR"] = str(self.folder / ".lab")
        env["COLUMNS"] = "120"        # rich's width when not a terminal: tables unwrapped
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        return env

    def commands(self, block: Block) -> list[str]:
        """The block's commands with the lab's test replacements applied."""
        result = []
        for command in block.commands:
            for replacement in self.text.replacements:
                command = command.replace(replacement.old, self.expand(replacement.new))
            result.append(command)
        return result

    def expand(self, text: str) -> str:
        def port(match: re.Match) -> str:
            name = match[1]
            if name not in self.ports:
                self.ports[name] = free_port()
            return str(self.ports[name])
        return re.sub(r"\{port:(\w+)\}", port, text)

    def run(self, block: Block, timeout: float) -> Outcome:
        """Run one block's commands in one bash (so a loop or a variable spans lines), stopping at the first
        failure."""
        commands = self.commands(block)
        script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
        started = time.monotonic()
        process = subprocess.Popen(["bash", "-c", script], cwd=self.folder, env=self.env(), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_all([process.pid], signal.SIGTERM, group=True)
            stdout, stderr = process.communicate(timeout=60)
            stderr += f"\n(walk: killed after {timeout:.0f} s)"
        outcome = Outcome(block=block, commands=commands, returncode=process.returncode, stdout=stdout,
                          stderr=stderr, seconds=time.monotonic() - started)
        log = self.folder / "walk"
        log.mkdir(exist_ok=True)
        (log / f"block-{block.index}.txt").write_text(
            "\n".join(commands) + f"\n--- exit {outcome.returncode} after {outcome.seconds:.1f} s\n--- stdout\n"
            + stdout + "\n--- stderr\n" + stderr)
        self.outcomes.append(outcome)
        return outcome

    def output(self, claim: Claim) -> str:
        """What the block just before the claim printed (stdout and stderr)."""
        if claim.after_block is None:
            raise AssertionError(f"line {claim.line}: claim {claim.name!r} follows no sh block")
        for outcome in self.outcomes:
            if outcome.block.index == claim.after_block:
                return outcome.output
        raise AssertionError(f"line {claim.line}: block {claim.after_block} was not run")


def write_measured(result: Walk) -> None:
    """What the checks measured, by claim: walk/measured.json in the scratch folder."""
    out = result.folder / "walk"
    out.mkdir(exist_ok=True)
    (out / "measured.json").write_text(json.dumps(result.measured, indent=1, default=str) + "\n")


def prepare(folder: Path) -> Path:
    """Make `folder` stand in for the checkout: ./lab, .venv and benchmarks, nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    lab = folder / "lab"
    lab.write_text(
        "#!/usr/bin/env bash\n"
        "# The checkout's ./lab without its setup step and without its cd: commands run here.\n"
        "case \"${1:-}\" in setup|test) echo \"./lab $1: not in a lab's walk\" >&2; exit 2;; esac\n"
        "export LAB_COMMAND=./lab\n"
        f"exec {shlex.quote(str(VENV_BIN / 'rebalance-lab'))} \"$@\"\n")
    lab.chmod(0o755)
    for name in (".venv", "benchmarks"):
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    (folder / ".lab").mkdir(exist_ok=True)
    return folder


def walk(lab: Lab, folder: Path, *, timeout: float = 1800) -> Walk:
    """Run every sh block of the lab in order. A block that exits otherwise than the lab expects stops the
    walk (what follows needs it); anything else it printed that a student should not see (an error line, a
    traceback, a Python warning) is kept in `problems` for the lab's "runs clean" test."""
    result = Walk(text=lab.text(), folder=prepare(folder))
    for block in result.text.blocks:
        outcome = result.run(block, timeout)
        if outcome.returncode != block.exit:
            raise AssertionError(f"block at line {block.line} exited {outcome.returncode}, the lab expects "
                                 f"{block.exit}:\n" + "\n".join(outcome.commands) + "\n" + _tail(outcome.output))
        result.problems.extend(problems(outcome))
    return result


def problems(outcome: Outcome) -> list[str]:
    """What a block printed that a student should not meet: a traceback, an error line (unless the lab shows a
    refusal on purpose), a Python warning."""
    where = f"block at line {outcome.block.line}"
    found = []
    if "Traceback (most recent call last)" in outcome.output:
        found.append(f"{where} printed a traceback:\n{_tail(outcome.output)}")
    if not outcome.block.exit:
        found.extend(f"{where} printed {line!r}" for line in outcome.output.splitlines() if line.startswith("error: "))
    found.extend(f"{where} printed a Python warning: {line}" for line in _PY_WARNING.findall(outcome.output))
    return found


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


# ---- reading what commands print

def rich_tables(output: str) -> list[tuple[str, list[list[str]]]]:
    """Every rich table in the output: (its title, its body rows as lists of cells), in order."""
    tables: list[tuple[str, list[list[str]]]] = []
    title: list[str] = []
    rows: list[list[str]] | None = None
    for line in output.splitlines():
        stripped = line.strip()
        if stripped.startswith("┏"):
            rows = []
        elif stripped.startswith("└"):
            tables.append((" ".join(title), rows or []))
            title, rows = [], None
        elif rows is not None:
            if stripped.startswith("│"):
                rows.append([cell.strip() for cell in stripped.strip("│").split("│")])
        elif stripped and not stripped.startswith(("┃", "┡")):
            title.append(stripped)
    return tables


def kill_all(pids, sig: int = signal.SIGKILL, *, group: bool = False) -> list[int]:
    """Send `sig` to each process (or its process group); one already gone is no error, since a clean-up
    often races the process's own exit. Returns the ones that were still there."""
    reached = []
    for pid in pids:
        try:
            (os.killpg if group else os.kill)(pid, sig)
        except ProcessLookupError:
            continue
        reached.append(pid)
    return reached
