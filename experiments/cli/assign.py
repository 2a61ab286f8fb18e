"""`rebalance-lab assign` and `rebalance-lab movement`: the assignors from the command line.

    rebalance-lab assign --strategy range --topic t0=3 --topic t1=3 --member C0=t0,t1 --member C1=t0,t1
    rebalance-lab assign --strategy uniform --topic t0=5 --member C0=t0 --member C1=t0 --owned C0=t0-0,t0-1
    rebalance-lab movement --partitions 10 --from 4 --to 5

Besides the client-side strategies, the KIP-848 coordinator's own assignors: `uniform` (Kafka 4.0's),
`uniform-4.1` (Kafka 4.1's) and `server-range` (the coordinator's `range`). For them `--owned` is the
previous target assignment, which is what the coordinator hands its assignor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from modern.coordinator.assignors import ASSIGNORS as COORDINATOR_ASSIGNORS
from rebalance.assignors import LEGACY_NAMES, cooperative_rounds, get_assignor
from rebalance.assignors.base import Group
from rebalance.assignors.legacy import legacy_assign
from rebalance.assignors.movement import SCENARIO_STRATEGIES, Movement, member_names, scale_all
from rebalance.types import Assignment, Subscription, TopicPartition

# Command-line name -> the KIP-848 coordinator's name for the same server-side assignor.
SERVER_STRATEGIES = {"uniform": "uniform", "uniform-4.1": "uniform-4.1", "server-range": "range"}
CLI_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "legacy-range", "legacy-roundrobin", "optimal",
                  *SERVER_STRATEGIES)

T = TypeVar("T")


class InputError(ValueError):
    """Bad command-line input: reported as one line, exit status 2."""


def register(app: typer.Typer) -> None:
    app.command("assign")(assign_command)
    app.command("movement")(movement_command)


def assign_command(
    strategy: Annotated[str, typer.Option(help=f"one of {', '.join(CLI_STRATEGIES)}, or package.module:Class")] = "range",
    topic: Annotated[list[str], typer.Option(help="TOPIC=PARTITIONS, repeatable, e.g. t0=3")] = [],  # noqa: B006
    member: Annotated[list[str], typer.Option(help="MEMBER=TOPIC[,TOPIC...], repeatable, e.g. C0=t0,t1")] = [],  # noqa: B006
    owned: Annotated[list[str], typer.Option(help="MEMBER=TP[,TP...] it owns now (server-side strategies: its previous target), e.g. C0=t0-0,t1-1")] = [],  # noqa: B006
    generation: Annotated[list[str], typer.Option(help="MEMBER=N, the generation its owned partitions are from")] = [],  # noqa: B006
    static: Annotated[list[str], typer.Option(help="MEMBER=INSTANCE_ID (static membership)")] = [],  # noqa: B006
    streams: Annotated[list[str], typer.Option(help="MEMBER=N threads per topic (legacy strategies only)")] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object: member -> sorted partitions")] = False,
    rounds: Annotated[bool, typer.Option("--rounds", help="cooperative-sticky: show the follow-up round(s) too")] = False,
) -> None:
    """Compute one assignment and print it."""
    try:
        results = _run_assign(strategy, topic, member, owned, generation, static, streams, rounds)
    except ValueError as error:
        _fail(error)
    if as_json:
        payload = [_as_json(r) for r in results]
        typer.echo(json.dumps({"rounds": payload} if rounds else payload[0]))
        return
    console = Console()
    for index, result in enumerate(results, start=1):
        title = f"{strategy}, round {index}" if len(results) > 1 or rounds else strategy
        table = Table(title=title, title_justify="left")
        table.add_column("member")
        table.add_column("partitions")
        for member_id, partitions in result.items():
            table.add_row(member_id, " ".join(map(str, partitions)) or "-")
        console.print(table)


def _run_assign(strategy, topic_args, member_args, owned_args, generation_args, static_args, stream_args, rounds):
    if strategy not in CLI_STRATEGIES and ":" not in strategy:
        raise InputError(f"unknown --strategy {strategy!r}; choose one of {', '.join(CLI_STRATEGIES)}")
    if not topic_args:
        raise InputError("give at least one --topic TOPIC=PARTITIONS")
    if not member_args:
        raise InputError("give at least one --member MEMBER=TOPIC[,TOPIC...]")
    topics = _pairs("--topic", topic_args, _int("--topic"))
    members = _pairs("--member", member_args, lambda v: tuple(t for t in v.split(",") if t))
    owned = _pairs("--owned", owned_args, lambda v: tuple(TopicPartition.parse(t) for t in v.split(",") if t))
    generations = _pairs("--generation", generation_args, _int("--generation"))
    statics = _pairs("--static", static_args, str)
    stream_counts = _pairs("--streams", stream_args, _int("--streams"))
    for option, values in (("--owned", owned), ("--generation", generations), ("--static", statics),
                           ("--streams", stream_counts)):
        for name in values:
            if name not in members:
                raise InputError(f"{option} names {name!r}, which is not a --member")
    if stream_counts and strategy not in LEGACY_NAMES:
        raise InputError("--streams applies to the legacy strategies only")
    if rounds and strategy != "cooperative-sticky":
        raise InputError("--rounds applies to cooperative-sticky only")
    if generations and strategy in SERVER_STRATEGIES:
        raise InputError("--generation does not apply to server-side assignors: they read the previous target "
                         "(--owned), which has no generations")

    if strategy in LEGACY_NAMES:
        return [_legacy(strategy, topics, members, stream_counts)]
    subscriptions = {
        m: Subscription(ts, owned.get(m, ()), generations.get(m, -1), None, statics.get(m)) for m, ts in members.items()
    }
    if strategy in SERVER_STRATEGIES:
        Group.of(topics, subscriptions)  # the same checks as every strategy: topics, owned partitions, instance ids
        return [_server(strategy, topics, members, owned, statics)]
    if strategy == "cooperative-sticky":
        played = cooperative_rounds(topics, subscriptions)
        chosen = played if rounds else played[:1]
        return [_plain(r) for r in chosen]
    return [_plain(get_assignor(strategy).assign(topics, subscriptions))]


def _server(strategy, topics, members, owned, statics) -> dict[str, list[TopicPartition]]:
    """One computation of a KIP-848 server-side assignor; `owned` is the previous target."""
    result = _server_assignor(strategy)(
        {m: frozenset(ts) for m, ts in members.items()}, topics,
        {m: frozenset((tp.topic, tp.partition) for tp in tps) for m, tps in owned.items()},
        instance_ids=statics)
    return {m: sorted(TopicPartition(t, p) for t, p in result[m]) for m in members}


def _server_assignor(strategy: str):
    """The KIP-848 coordinator's assignor of that name, from the coordinator's own table."""
    return COORDINATOR_ASSIGNORS[SERVER_STRATEGIES[strategy]]


def _legacy(strategy, topics, members, stream_counts) -> dict[str, list[TopicPartition]]:
    subscriptions = {m: dict.fromkeys(ts, stream_counts.get(m, 1)) for m, ts in members.items()}
    by_thread = legacy_assign(strategy.removeprefix("legacy-"), topics, subscriptions)
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for m, ts in subscriptions.items():
        for i in range(max(ts.values(), default=0)):
            result[m].extend(by_thread.get(f"{m}-{i}", []))
    return {m: sorted(tps) for m, tps in result.items()}


def _plain(result: Mapping[str, Assignment]) -> dict[str, list[TopicPartition]]:
    return {m: list(a.partitions) for m, a in result.items()}


def _as_json(result: Mapping[str, list[TopicPartition]]) -> dict[str, list[str]]:
    return {m: [str(tp) for tp in sorted(tps)] for m, tps in result.items()}


def _pairs(option: str, values: list[str], parse: Callable[[str], T]) -> dict[str, T]:
    result: dict[str, T] = {}
    for raw in values:
        name, sep, value = raw.partition("=")
        if not sep or not name:
            raise InputError(f"{option} {raw!r}: expected NAME=VALUE")
        if name in result:
            raise InputError(f"{option} {name!r} given twice")
        try:
            result[name] = parse(value)
        except ValueError as error:
            raise InputError(f"{option} {raw!r}: {error}") from None
    return result


def _int(option: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"not an integer: {value!r}") from None

    return parse


def movement_command(
    partitions: Annotated[int, typer.Option(help="partitions of the one topic")] = 10,
    before: Annotated[int, typer.Option("--from", help="members before")] = 4,
    after: Annotated[int, typer.Option("--to", help="members after")] = 5,
    strategy: Annotated[str, typer.Option(help="a strategy name, or 'all'")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object keyed by strategy name")] = False,
) -> None:
    """How many partitions change owner when the group grows or shrinks, per strategy."""
    strategies = SCENARIO_STRATEGIES if strategy == "all" else (strategy,)
    try:
        if strategy != "all" and strategy not in CLI_STRATEGIES and ":" not in strategy:
            raise InputError(f"unknown --strategy {strategy!r}; choose all or one of {', '.join(CLI_STRATEGIES)}")
        if strategy in SERVER_STRATEGIES:
            movements = [_server_movement(strategy, partitions=partitions, before=before, after=after)]
        else:
            movements = scale_all(strategies, partitions=partitions, before=before, after=after)
    except ValueError as error:
        _fail(error)
    if as_json:
        typer.echo(json.dumps({m.strategy: _movement_json(m) for m in movements}))
        return
    console = Console()
    console.print(f"{partitions} partitions, {before} -> {after} members: partitions that change owner")
    for movement in movements:
        console.print(_movement_table(movement))


def _server_movement(strategy: str, *, partitions: int, before: int, after: int, topic: str = "t0") -> Movement:
    """The same scaling as the client-side strategies, C1..Cn on one topic: the group's first target
    from scratch, then the next one computed from it (the coordinator keeps the previous target)."""
    if partitions < 0:
        raise ValueError(f"--partitions must be >= 0, got {partitions}")
    if before < 1 or after < 1:
        raise ValueError(f"member counts must be >= 1, got {before} -> {after}")
    assignor = _server_assignor(strategy)
    names = member_names(max(before, after))
    first = assignor({m: frozenset({topic}) for m in names[:before]}, {topic: partitions}, {})
    second = assignor({m: frozenset({topic}) for m in names[:after]}, {topic: partitions}, first)

    def owners(result) -> dict[str, tuple[TopicPartition, ...]]:
        return {m: tuple(sorted(TopicPartition(t, p) for t, p in result[m])) for m in sorted(result)}

    return Movement(strategy, owners(first), (owners(second),))


def _movement_json(movement: Movement) -> dict:
    return {
        "moved": len(movement.changes),
        "changes": [
            {"partition": str(c.partition), "from": c.source, "to": c.target} for c in movement.changes
        ],
        "before": _as_json(movement.before),
        "rounds": [_as_json(r) for r in movement.rounds],
    }


def _movement_table(movement: Movement) -> Table:
    """Members as rows; what leaves a member is red in 'before', what arrives is green in 'after'."""
    moved = {c.partition for c in movement.changes}
    rounds = len(movement.rounds)
    title = f"{movement.strategy}: {len(moved)} moved" + (f" over {rounds} rounds" if rounds > 1 else "")
    table = Table(title=title, title_justify="left")
    table.add_column("member")
    table.add_column("before")
    for index in range(rounds):
        table.add_column("after" if rounds == 1 else f"round {index + 1}")
    members = sorted(set(movement.before) | set(movement.after))
    for member in members:
        cells = [_cell(movement.before.get(member), moved, "red")]
        cells += [_cell(r.get(member), moved, "green") for r in movement.rounds]
        table.add_row(member, *cells)
    return table


def _cell(partitions: tuple[TopicPartition, ...] | None, moved: set[TopicPartition], style: str) -> Text:
    if partitions is None:
        return Text("(absent)", style="dim")
    text = Text()
    for i, tp in enumerate(partitions):
        text.append(("" if i == 0 else " ") + str(tp.partition), style=style if tp in moved else "")
    return text if partitions else Text("-", style="dim")


def _fail(error: Exception) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(2)
