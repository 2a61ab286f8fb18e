"""`--set KEY=VALUE` overrides (and a campaign's `set` and `sweep`), applied to a parsed scenario before any
check; a problem in a value an override set names the override, not the file's line."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import replace

from experiments.scenario.model import Problem


def field_label(path: tuple) -> str:
    """A field's name as problems give it: group.members, timeline[2].to, topics[0].partitions."""
    return ".".join(f"[{part}]" if isinstance(part, int) else part for part in path).replace(".[", "[")


def blame_override(problem: Problem, overridden: Mapping[str, str]) -> Problem:
    """A problem in a value an override set names the override (`--set KEY=VALUE`), not the file's line."""
    for label, override in overridden.items():
        if problem.field == label or problem.field.startswith((f"{label}.", f"{label}[")):
            return replace(problem, line=None, origin=f"--set {override}")
    return problem


def apply_override(data: dict, override: str, problems: list[Problem]) -> tuple | None:
    """Set one "dotted.key=value" in `data`; the path it set (entries of arrays of tables by index), or None
    when it could not (with the reason in `problems`)."""
    origin = f"--set {override}"
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        problems.append(Problem(key.strip() or override, None,
                                "an override needs KEY=VALUE (no '=' given), e.g. group.members=50", origin))
        return None
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    key = key.strip()
    *parents, last = key.split(".")
    node = data
    path: list[str | int] = []
    for part in parents:
        if isinstance(node, list):   # an array of tables is addressed by its entries' names: topics.t0
            named = [index for index, entry in enumerate(node) if isinstance(entry, dict) and entry.get("name") == part]
            if not named:
                names = ", ".join(str(entry.get("name")) for entry in node if isinstance(entry, dict))
                problems.append(Problem(key, None, f"no entry named {part!r} (there are: {names or 'none'})", origin))
                return None
            node = node[named[0]]
            path.append(named[0])
            continue
        node = node.setdefault(part, {})
        path.append(part)
        if not isinstance(node, dict | list):
            problems.append(Problem(key, None, f"cannot set inside {part!r}: it is not a table", origin))
            return None
    if isinstance(node, list):
        problems.append(Problem(key, None, f"name an entry of {parents[-1]!r}, e.g. topics.t0.partitions=100",
                                origin))
        return None
    # A topic's size is given one way: setting one of the two replaces the other.
    for one, other in _ALTERNATIVES:
        if last == one:
            node.pop(other, None)
    node[last] = value
    return (*path, last)


_ALTERNATIVES = (("partitions", "partitions_per_member"), ("partitions_per_member", "partitions"))


def dotted_names(table: Mapping, prefix: str = "") -> Iterator[tuple[str, object]]:
    """A settings section's entries under their dotted names: TOML reads an unquoted `a.b = 1` as a table `a`
    holding `b`, and so does `--set` (a campaign's `set` and `sweep`), so Kafka's names may come either way.
    A name given twice (quoted and as tables) keeps the later one, an override's."""
    for name, value in table.items():
        if isinstance(value, dict):
            yield from dotted_names(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value
