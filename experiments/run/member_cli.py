"""`rebalance-lab member`: run one or more group members in the foreground.

Any backend, chosen by name: the command builds a `MemberConfig` per member, asks the backend's
profile (`rebalance.backends`) to make each, starts the member(s), polls records, prints each member's
assignment whenever it changes, and writes events. Ctrl-C or SIGTERM leaves the group cleanly
(close), flushes the events and exits 0: the experiment runner relies on that.

With `--count K` the members run in one process (`experiments.run.member_host`): each is polled by a
thread of its own and may have its own ZooKeeper connect string or bootstrap list (`--zk`/`--bootstrap`
given K times, in member order), so that each member's links can pass fault proxies of its own.
The runner starts its hosts as `python -m experiments.run.member_cli` (this command alone, without the
whole command line's imports: a host starts on less CPU, benchmarks/bench_process_start.py) and gives them
`--member-configs FILE` instead: a JSON list of the members' configs
(`MemberConfig.to_json`), which replaces every member option. `--control-fd` names a socket on which
the runner sends commands for single members of the process (the protocol is described in
`experiments.run.member_host`). `--workload JSON` gives the members' application a service time per
record and a way to commit (the scenario's `[workload]` as `WorkloadSpec.to_json` writes it, with the
scenario's `seed`; experiments.run.handling).
"""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer

from experiments.run.member_host import Host
from experiments.scenario.model import WorkloadSpec
from rebalance.backends import BackendProfile, backend_names, canonical_name, profile
from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig


def register(app: typer.Typer) -> None:
    app.command("member")(member)


def member(
    group: Annotated[str | None, typer.Option("--group", help="Consumer group id.")] = None,
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Topic to subscribe to (repeatable).")] = None,
    backend: Annotated[str, typer.Option(help="; ".join(f"{name}: {profile(name).summary}"
                                                         for name in backend_names()) + ".")] = "legacy",
    zk: Annotated[list[str] | None, typer.Option(
        help="ZooKeeper HOST:PORT or HOST:PORT/chroot (legacy); with --count K, once for all members "
             "or K times, one per member in order.")] = None,
    bootstrap: Annotated[list[str] | None, typer.Option(
        help="Broker HOST:PORT[,HOST:PORT] (classic and kip848; legacy finds brokers in ZooKeeper); with --count K, "
             "once for all members or K times, one per member in order.")] = None,
    strategy: Annotated[str | None, typer.Option(
        help="Assignment strategy (legacy: range, roundrobin); default range.")] = None,
    name: Annotated[str | None, typer.Option("--id", help="Member name, and the id it registers under (legacy "
                                                           "consumer.id, else client.id).")] = None,
    instance_id: Annotated[str | None, typer.Option(help="Static membership id (classic and kip848).")] = None,
    session_timeout_ms: Annotated[int | None, typer.Option(min=1, help="Session timeout in ms.")] = None,
    config: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE backend setting by its Kafka name (repeatable).")
    ] = None,
    member_configs: Annotated[Path | None, typer.Option(
        help="A JSON file listing each member's config (the runner's); replaces the member options.")] = None,
    events: Annotated[Path | None, typer.Option(help="Write events (JSON lines) to this file.")] = None,
    run_id: Annotated[str, typer.Option(help="Run id written into every event.")] = "",
    count: Annotated[int, typer.Option(min=1, help="Run this many members in this process (NAME-0..NAME-K-1).")] = 1,
    control_fd: Annotated[int | None, typer.Option(
        help="A connected socket (file descriptor) carrying per-member commands, one JSON per line "
             "(the experiment runner's).")] = None,
    armed: Annotated[bool, typer.Option(
        "--armed", help="Make the members and wait: each joins only on its start command (needs --control-fd).")] = False,
    workload: Annotated[str | None, typer.Option(
        help='The application\'s handling of each record, as JSON: e.g. \'{"service": "fixed", "service_ms": 20, '
             '"commit": "batch", "seed": 1}\' (a scenario\'s [workload] table; default: no service time).')] = None,
) -> None:
    """Run group member(s) in the foreground, printing assignments as they change."""
    if canonical_name(backend) not in backend_names():
        _fail(f"--backend {backend!r}: choose one of {', '.join(backend_names())}")
    chosen = profile(backend)   # by its name or an alias (`modern` is `classic`)
    backend = chosen.name
    if member_configs is not None:
        given = [option for option, value in (("--group", group), ("--topic", topic), ("--zk", zk),
                 ("--bootstrap", bootstrap), ("--strategy", strategy), ("--id", name), ("--instance-id", instance_id),
                 ("--session-timeout-ms", session_timeout_ms), ("--config", config)) if value]
        if given or count != 1:
            _fail(f"--member-configs replaces {', '.join(given or ['--count'])}: give one or the other")
        configs = _read_configs(member_configs)
    else:
        if not group or not topic:
            _fail("--group and --topic are required (or --member-configs FILE)")
        configs = _configs_from_options(
            group=group, topics=tuple(topic), zk=_per_member("--zk", zk, count),
            bootstrap=_per_member("--bootstrap", bootstrap, count), strategy=strategy, name=name,
            instance_id=instance_id, session_timeout_ms=session_timeout_ms, extra=_parse_settings(config or []),
            count=count, id_setting=chosen.id_setting)
    _check_addresses(chosen, configs.values())
    spec, seed = _read_workload(workload)
    control = None
    if control_fd is not None:
        try:
            control = socket.socket(fileno=control_fd)
        except OSError as error:
            _fail(f"--control-fd {control_fd}: not a socket ({error.strerror})")
    if armed and control is None:
        _fail("--armed needs --control-fd: the members wait for start commands on it")
    recorder = EventRecorder(events, run_id=run_id, backend=backend) if events else NullRecorder()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        host = Host(chosen.make, configs, recorder, stop, workload=spec, seed=seed, armed=armed)
        try:
            for member_name in configs:
                host.make(member_name)
            if armed:
                host.arm()
        except ValueError as error:
            _fail(str(error))
        if control is not None:
            threading.Thread(target=host.read_commands, args=(control,), daemon=True).start()
        code = host.run()
    finally:
        recorder.close()
    raise typer.Exit(code)


def _configs_from_options(*, group: str, topics: tuple[str, ...], zk: list[str | None], bootstrap: list[str | None],
                          strategy: str | None, name: str | None, instance_id: str | None,
                          session_timeout_ms: int | None, extra: dict[str, object], count: int,
                          id_setting: str) -> dict[str, MemberConfig]:
    """One config per member; options left out keep `MemberConfig`'s defaults.

    A member named with `--id` registers under that name (0.8: `<group>_<name>`), as a consumer whose
    consumer.id or client.id is set does, so that a group started by hand orders its members by the names
    typed; an explicit `--config` of the same setting wins. Without `--id`, names are drawn."""
    names = [name] if count == 1 else [f"{name or 'member'}-{index}" for index in range(count)]
    given = {"strategy": strategy, "session_timeout_ms": session_timeout_ms}
    common = {key: value for key, value in given.items() if value is not None}
    return {
        member_name: MemberConfig(
            group=group, topics=topics, member_name=member_name,
            group_instance_id=f"{instance_id}-{index}" if instance_id and count > 1 else instance_id,
            zk_connect=zk[index], bootstrap=bootstrap[index],
            extra={id_setting: member_name, **extra} if name else extra, **common,
        )
        for index, member_name in enumerate(names)
    }


def _read_configs(path: Path) -> dict[str, MemberConfig]:
    try:
        documents = json.loads(path.read_text())
        if not isinstance(documents, list) or not documents:
            raise ValueError("expected a non-empty JSON list of member configs")
        configs = [MemberConfig.from_json(document) for document in documents]
    except OSError as error:
        _fail(f"--member-configs {path}: {error.strerror}")
    except (ValueError, TypeError) as error:
        _fail(f"--member-configs {path}: {error}")
    names = [config.member_name for config in configs]
    if None in names or len(set(names)) != len(names):
        _fail(f"--member-configs {path}: every member needs a name of its own, got {names}")
    return {config.member_name: config for config in configs}


def _read_workload(text: str | None) -> tuple[WorkloadSpec, int]:
    if not text:
        return WorkloadSpec(), 0
    try:
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError("expected a JSON object")
        seed = document.pop("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        return WorkloadSpec.from_json(document), seed
    except (ValueError, TypeError) as error:
        _fail(f"--workload: {error}")
        raise AssertionError from None  # unreachable


def _check_addresses(chosen: BackendProfile, configs) -> None:
    server = chosen.connects_to
    if not all(chosen.address(config) for config in configs):
        _fail(f"{server.option} {server.form} is required for the {chosen.name} backend")


def _per_member(option: str, values: list[str] | None, count: int) -> list[str | None]:
    """One address list per member: given once (shared) or once per member."""
    if not values:
        return [None] * count
    if len(values) == 1:
        return list(values) * count
    if len(values) != count:
        _fail(f"{option} was given {len(values)} times: give it once (shared by all members) or once per member "
              f"(--count {count})")
    return list(values)


def _parse_settings(pairs: list[str]) -> dict[str, object]:
    settings: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"--config {pair!r}: expected KEY=VALUE, e.g. rebalance.max.retries=4")
        settings[key.strip()] = _typed(value.strip())
    return settings


def _typed(text: str) -> object:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


if __name__ == "__main__":    # python -m experiments.run.member_cli: the member command alone
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command.command()(member)
    command()
