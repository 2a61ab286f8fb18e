"""Terminals for a lab that a student runs in several at once: real shells in tmux, typed into, read back.

Each terminal is a tmux window running an interactive bash, so job control works as it does for a student
(Ctrl-Z stops the foreground job, `kill -9 %1` kills it). Everything a terminal shows is copied to a log
file (`pipe-pane`); `lines()` returns what it printed so far, colours removed, each line with the
monotonic time at which the reader first saw it. The tmux server has a socket of its own in the scratch
folder and is killed, with every shell and every process they started, by `close()`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PROMPT = "walk$ "
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")


def _is_prompt(text: str) -> bool:
    return text.strip() == PROMPT.strip()


@dataclass
class Seen:
    at: float            # time.monotonic() when first read
    text: str


@dataclass
class Terminal:
    tmux: Tmux
    name: str
    log: Path
    seen: list[Seen] = field(default_factory=list)
    _read: int = 0
    _partial: str = ""

    def type(self, line: str) -> float:
        """Type a line and press Enter; returns the monotonic time it was sent."""
        self.tmux.call("send-keys", "-t", self.target, "-l", line)
        self.tmux.call("send-keys", "-t", self.target, "Enter")
        return time.monotonic()

    def key(self, key: str) -> float:
        """Press one key, tmux's name for it: C-c, C-z, Up."""
        self.tmux.call("send-keys", "-t", self.target, key)
        return time.monotonic()

    def run(self, line: str, timeout: float = 120) -> list[str]:
        """Type a command and wait for the prompt to come back; returns the lines it printed."""
        before = len(self.lines())
        self.type(line)
        self.wait(lambda lines: any(_is_prompt(text) for _, text in lines[before + 1:]), timeout,
                  f"the prompt after {line!r}")
        return [text for _, text in self.lines()[before + 1:] if not _is_prompt(text)]

    def at_prompt(self) -> bool:
        lines = self.lines()
        return bool(lines) and _is_prompt(lines[-1][1])

    @property
    def target(self) -> str:
        return f"{self.tmux.session}:{self.name}"

    def lines(self) -> list[tuple[float, str]]:
        """Every complete line shown so far, with the time it was first read; the prompt, though it ends no
        line, counts as one once shown."""
        data = self.log.read_bytes()[self._read:] if self.log.exists() else b""
        if data:
            self._read += len(data)
            now = time.monotonic()
            text = self._partial + _ANSI.sub("", data.decode("utf-8", "replace"))
            *complete, self._partial = text.split("\n")
            self.seen.extend(Seen(now, line.rstrip()) for line in complete)
            if _is_prompt(self._partial):
                self.seen.append(Seen(now, self._partial))
                self._partial = ""
        return [(entry.at, entry.text) for entry in self.seen]

    def wait(self, condition, timeout: float, what: str) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if condition(lines):
                return lines
            if time.monotonic() > deadline:
                shown = "\n".join(text for _, text in lines[-30:])
                raise AssertionError(f"terminal {self.name}: no {what} within {timeout:.0f} s; it shows:\n{shown}")
            time.sleep(0.2)


class Tmux:
    def __init__(self, folder: Path, env: dict[str, str], session: str = "walk") -> None:
        self.folder = folder
        self.socket = folder / "tmux.sock"
        self.session = session
        self.env = {**env, "PS1": PROMPT, "HISTFILE": "/dev/null", "TERM": "xterm-256color"}
        self.terminals: dict[str, Terminal] = {}
        rcfile = folder / ".walk-bashrc"
        rcfile.write_text(f"PS1={shlex.quote(PROMPT)}\nunset PROMPT_COMMAND\n")
        self._shell = f"bash --noprofile --rcfile {shlex.quote(str(rcfile))} -i"
        subprocess.run(["tmux", "-S", str(self.socket), "-f", "/dev/null", "new-session", "-d", "-s", session,
                        "-n", "idle", "-x", "220", "-y", "50", "-c", str(folder), self._shell],
                       env=self.env, check=True, capture_output=True)

    def call(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True,
                                env=self.env)
        if result.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def terminal(self, name: str) -> Terminal:
        """A new window with a fresh interactive bash in the folder, logged from its first byte."""
        log = self.folder / f"terminal-{name}.log"
        exports = [f"{key}={value}" for key, value in self.env.items()
                   if key in ("PATH", "LAB_STATE_DIR", "COLUMNS", "PS1", "HISTFILE", "TERM", "HOME", "LANG")]
        # a window starts detached from the log: the shell waits until pipe-pane is in place
        ready = self.folder / f".ready-{name}"
        command = f"while [ ! -e {shlex.quote(str(ready))} ]; do sleep 0.05; done; exec {self._shell}"
        self.call("new-window", "-d", "-t", self.session, "-n", name, "-c", str(self.folder),
                  *[item for export in exports for item in ("-e", export)], command)
        self.call("pipe-pane", "-t", f"{self.session}:{name}", "-o", f"cat >> {shlex.quote(str(log))}")
        ready.touch()
        terminal = Terminal(self, name, log)
        terminal.wait(lambda lines: any(_is_prompt(text) for _, text in lines), 30, "first prompt")
        self.terminals[name] = terminal
        return terminal

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)
