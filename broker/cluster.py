"""Start a local cluster of broker processes, kill and restart them, stop them all.

    with start_cluster(3) as cluster:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)
        cluster.kill(1)                      # SIGKILL
        cluster.wait_for_live([0, 2])        # until the survivors agree it is gone
        cluster.restart(1)

How fast a death is noticed and leadership moves is `FailoverTiming` (the `failover=` option):
quick by default, Kafka's with `failover=FailoverTiming.kafka()`.

Brokers share one data directory by default (a temporary one, removed on stop), so a
partition's records survive its leader's death: the next leader opens the same segment.
Each broker's log goes to `<log_dir>/broker-<id>.log`; with `events_dir`, its `broker_liveness` events
(broker.liveness) to `<events_dir>/broker-<id>.jsonl`, and its coordinator's `coordinator_event`s (each group's
transitions, and why each rebalance was prepared) to `<events_dir>/coordinator-<id>.jsonl`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import MetadataRequest

from broker.cli import READY_LINE
from broker.peers import PeerClient
from broker.view import ClusterView  # noqa: F401 - re-exported: broker.cluster is where the cluster lives
from rebalance.ports import free_ports

READY_TIMEOUT_S = 60.0
START_ATTEMPTS = 3         # each with fresh ports, when a broker finds its port taken
STOP_TIMEOUT_S = 10.0


class ClusterError(RuntimeError):
    pass


class PortTaken(ClusterError):
    """A broker found its port taken between the choice of the port and its bind."""


@dataclass
class BrokerProcess:
    node_id: int
    host: str
    port: int
    log_path: Path
    process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass(frozen=True, kw_only=True)
class FailoverTiming:
    """How fast the cluster notices a dead broker and moves leadership; the defaults are the lab's
    quick ones (what tests use), `FailoverTiming.kafka()` gives Kafka's."""

    broker_session_timeout_ms: int = 0     # a silent peer is dead after this long (0: first failed probe)
    fail_back_delay_ms: int = 0            # a returning broker leads its partitions again after this long
    coordinator_load_delay_ms: int = 0     # COORDINATOR_LOAD_IN_PROGRESS after taking an offsets partition

    @classmethod
    def kafka(cls) -> FailoverTiming:
        # broker.session.timeout.ms (KRaft); leader.imbalance.check.interval.seconds; the load
        # delay has no Kafka setting (it is the time to read the partition back): an assumption.
        return cls(broker_session_timeout_ms=9_000, fail_back_delay_ms=300_000, coordinator_load_delay_ms=200)

    def args(self) -> list[str]:
        return ["--broker-session-timeout-ms", str(self.broker_session_timeout_ms),
                "--fail-back-delay-ms", str(self.fail_back_delay_ms),
                "--coordinator-load-delay-ms", str(self.coordinator_load_delay_ms)]


class LocalCluster:
    def __init__(self, size: int, *, zk: str | None = None, data_dir: str | os.PathLike | None = None,
                 in_memory: bool = False, host: str = "127.0.0.1", advertise_map: str | os.PathLike | None = None,
                 coordinator: bool = True, log_dir: str | os.PathLike | None = None,
                 extra_args: Iterable[str] = (), default_partitions: int = 1,
                 failover: FailoverTiming = FailoverTiming(), env: Mapping[str, str] | None = None,
                 events_dir: str | os.PathLike | None = None, run_id: str = "") -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        self._own_dirs: list[Path] = []
        self.data_dir = None if in_memory else Path(data_dir) if data_dir else self._temporary("data")
        self.log_dir = Path(log_dir) if log_dir else self._temporary("logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.zk = zk
        self.advertise_map = Path(advertise_map) if advertise_map else None
        self.coordinator = coordinator
        self.failover = failover
        self.env = dict(env or {})   # added to each broker's environment (group settings read from it)
        self.events_dir = Path(events_dir) if events_dir else None   # broker-<id>.jsonl: broker_liveness events
        self.run_id = run_id
        self.extra_args = [*extra_args, "--default-partitions", str(default_partitions), *failover.args()]
        self.brokers = [BrokerProcess(i, host, port, self.log_dir / f"broker-{i}.log")
                        for i, port in enumerate(free_ports(size, host))]
        self.paused: set[int] = set()

    # -- addresses -------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(broker.address for broker in self.brokers)

    @property
    def live_bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers if b.alive and b.node_id not in self.paused)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> LocalCluster:
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    for broker in self.brokers:
                        self._launch(broker)
                    for broker in self.brokers:
                        self._await_ready(broker)
                    break
                except PortTaken:
                    if attempt == START_ATTEMPTS:
                        raise
                    self._stop_processes()   # every broker knows its peers' ports: all move together
                    for broker, port in zip(self.brokers, free_ports(len(self.brokers), self.brokers[0].host), strict=True):
                        broker.port = port
            self.wait_for_live([broker.node_id for broker in self.brokers])
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, index: int) -> None:
        """SIGKILL one broker (no clean shutdown) and reap it."""
        broker = self.brokers[index]
        if broker.alive:
            broker.process.send_signal(signal.SIGKILL)
            broker.process.wait()

    def pause(self, index: int) -> None:
        """SIGSTOP: the broker keeps its sockets and its partition locks, and answers nothing."""
        self.brokers[index].process.send_signal(signal.SIGSTOP)
        self.paused.add(index)

    def resume(self, index: int) -> None:
        self.brokers[index].process.send_signal(signal.SIGCONT)
        self.paused.discard(index)

    def restart(self, index: int, *, wait: bool = True) -> None:
        """Start broker `index` again on its port (stopping it first if it runs)."""
        broker = self.brokers[index]
        if broker.alive:
            broker.process.send_signal(signal.SIGCONT)
            broker.process.terminate()
            self._terminate(broker)
        self.paused.discard(index)
        self._launch(broker)
        self._await_ready(broker)
        if wait:
            self.wait_for_live([b.node_id for b in self.brokers if b.alive and b.node_id not in self.paused])

    def stop(self) -> None:
        self._stop_processes()
        for directory in self._own_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        self._own_dirs.clear()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation -----------------------------------------------------------------
    def metadata(self, index: int, topics: list[str] | None = None, timeout_s: float = 5.0) -> Any:
        """Broker `index`'s Metadata (v4, no auto-creation) answer: `.brokers`, `.topics[].partitions[].leader_id`."""
        return asyncio.run(_metadata(self.brokers[index], topics, timeout_s))

    def live_view(self, index: int, timeout_s: float = 5.0) -> list[int]:
        """The live broker ids that broker `index` reports in its metadata."""
        return sorted(b.node_id for b in self.metadata(index, [], timeout_s).brokers)

    def partition_leaders(self, topic: str, index: int | None = None) -> dict[int, int]:
        """partition -> leader id, as broker `index` (default: the first running one) sees it."""
        if index is None:
            index = next(b.node_id for b in self.brokers if b.alive and b.node_id not in self.paused)
        (answer,) = self.metadata(index, [topic]).topics
        return {p.partition_index: p.leader_id for p in answer.partitions}

    def wait_for_live(self, expected: Iterable[int], timeout_s: float = 30.0) -> None:
        """Until every running, unpaused broker reports exactly `expected` as the live brokers."""
        expected = sorted(expected)
        deadline = time.monotonic() + timeout_s
        views: dict[int, object] = {}
        while True:
            views = {}
            for broker in self.brokers:
                if broker.alive and broker.node_id not in self.paused:
                    try:
                        views[broker.node_id] = self.live_view(broker.node_id)
                    except (OSError, EOFError, TimeoutError) as error:
                        views[broker.node_id] = repr(error)
            if all(view == expected for view in views.values()):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"brokers did not agree on live set {expected} within {timeout_s} s: {views}")
            time.sleep(0.1)  # re-ask: views change as probes run

    # -- internals -------------------------------------------------------------------
    def _stop_processes(self) -> None:
        self.paused.clear()
        for broker in self.brokers:
            if broker.alive:
                broker.process.send_signal(signal.SIGCONT)  # a paused broker cannot act on SIGTERM
                broker.process.terminate()
        for broker in self.brokers:
            if broker.process is not None:
                self._terminate(broker)

    def _temporary(self, kind: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"rebalance-lab-brokers-{kind}-"))
        self._own_dirs.append(path)
        return path

    def _launch(self, broker: BrokerProcess) -> None:
        peers = ",".join(f"{b.node_id}={b.address}" for b in self.brokers if b.node_id != broker.node_id)
        command = [sys.executable, "-m", "broker", "--id", str(broker.node_id), "--port", str(broker.port),
                   "--host", broker.host, "--peers", peers, "--exit-with", str(os.getpid()), *self.extra_args]
        if self.data_dir is not None:
            command += ["--data-dir", str(self.data_dir)]
        if self.zk:
            command += ["--zk", self.zk]
        if self.advertise_map is not None:
            command += ["--advertise-map", str(self.advertise_map)]
        if not self.coordinator:
            command.append("--no-coordinator")
        env = dict(self.env)
        if self.events_dir is not None:
            command += ["--events", str(self.events_dir / f"broker-{broker.node_id}.jsonl"), "--run-id", self.run_id]
            if self.coordinator:   # the groups' transitions and why each rebalance was prepared, a file of their own
                env.update(REBALANCE_LAB_COORDINATOR_EVENTS=str(self.events_dir / f"coordinator-{broker.node_id}.jsonl"),
                           REBALANCE_LAB_RUN_ID=self.run_id)
        with open(broker.log_path, "ab") as log_file:
            broker.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file,
                                              stdin=subprocess.DEVNULL, start_new_session=True,
                                              env={**os.environ, **env} if env else None)

    def _await_ready(self, broker: BrokerProcess) -> None:
        ready = threading.Event()
        process = broker.process

        def read_stdout() -> None:  # keeps draining stdout after READY, so the broker never blocks on it
            for line in process.stdout:
                if line.decode(errors="replace").startswith(READY_LINE):
                    ready.set()

        threading.Thread(target=read_stdout, name=f"broker-{broker.node_id}-stdout", daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.wait(0.2):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = broker.log_path.read_text(errors="replace")[-2000:]
                last_line = (tail.strip().splitlines() or [""])[-1]
                if "cannot listen" in last_line and "already in use" in last_line:
                    raise PortTaken(f"broker {broker.node_id}: {last_line}")
                raise ClusterError(f"broker {broker.node_id} did not start (exit {process.poll()}):\n{tail}")

    def _terminate(self, broker: BrokerProcess) -> None:
        try:
            broker.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            broker.process.kill()
            broker.process.wait()
        if broker.process.stdout:
            broker.process.stdout.close()


def start_cluster(size: int, zk: str | None = None, data_dir: str | os.PathLike | None = None,
                  **options: object) -> LocalCluster:
    """Start `size` broker processes and wait until they all see each other."""
    return LocalCluster(size, zk=zk, data_dir=data_dir, **options).start()


async def _metadata(broker: BrokerProcess, topics: list[str] | None, timeout_s: float) -> Any:
    client = PeerClient(broker.host, broker.port, client_id="rebalance-lab-cluster")
    names = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=name) for name in topics]
    request = MetadataRequest[4](topics=names, allow_auto_topic_creation=False)
    try:
        return await client.request(request, timeout_s)
    finally:
        client.close()
