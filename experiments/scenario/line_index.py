"""Where a key of a scenario file stands: tomllib keeps no positions, so the lines are found in the text, for
every problem to name its line."""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\".]+)\s*=")


class LineIndex:
    """Where each key sits in the TOML text. tomllib keeps no positions, so scan the text:
    table headers, array-of-tables counters and `key =` lines. Approximate but enough to point
    a reader at the right table entry."""

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple, int] = {}
        table: tuple = ()
        arrays: dict[tuple, int] = {}
        in_multiline = False
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
            if in_multiline:
                if '"""' in line or "'''" in line:
                    in_multiline = False
                continue
            header = _HEADER.match(line)
            if header:
                path = tuple(part.strip().strip('"') for part in header.group(2).split("."))
                if header.group(1) == "[[":
                    arrays[path] = arrays.get(path, -1) + 1
                    table = (*path, arrays[path])
                else:
                    table = path
                self._lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                parts = tuple(part.strip('"') for part in key.group(1).split("."))
                self._lines.setdefault((*table, *parts), number)
                if line.count('"""') == 1 or line.count("'''") == 1:
                    in_multiline = True

    def line_of(self, path: tuple) -> int | None:
        """The line of `path`, or of the nearest enclosing table that has one."""
        for end in range(len(path), 0, -1):
            if path[:end] in self._lines:
                return self._lines[path[:end]]
        return None
