"""The local provider: each node is `java ... QuorumPeerMain zoo.cfg` from installed ZooKeeper jars.

Jars come from $ZOOKEEPER_HOME (an Apache release: lib/*.jar, conf/) or from Debian's
`zookeeper` package (/usr/share/java/zookeeper.jar, whose manifest names its dependencies).
Every node has its own directory (zoo.cfg, data/myid, server.log) and fixed client port, so a
restarted node is reachable at the same address. Between peers, each directed link goes
through a cuttable `LinkProxies` link owned by the starting process: node a's zoo.cfg names
node b at the port of link a->b, which is how `isolate` cuts one node off from the others.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from .config import EnsembleConfig, Provider
from .ensemble import ELECTION_OPTIONS, HOST, Ensemble, Node, wait_until
from .errors import NotReady, NotSupported, PortInUse, ProviderUnavailable
from .leftovers import MARKER
from .linkproxy import LinkProxies
from .ports import client_ports, free_ports

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_CONF = Path("/etc/zookeeper/conf")
DEBIAN_LOGGER = Path("/usr/share/java/slf4j-simple.jar")  # Debian's jar names no logging backend
JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def find_java() -> str:
    if home := os.environ.get("JAVA_HOME"):
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    if java := shutil.which("java"):
        return java
    raise ProviderUnavailable("no Java found: install openjdk-17-jre-headless (./lab setup does) or set JAVA_HOME")


def zookeeper_classpath() -> str:
    if home := os.environ.get("ZOOKEEPER_HOME"):
        jars = sorted(glob.glob(f"{home}/lib/*.jar") + glob.glob(f"{home}/zookeeper-*.jar"))
        if not any(Path(jar).name.startswith("zookeeper-") for jar in jars):
            raise ProviderUnavailable(f"ZOOKEEPER_HOME={home} holds no zookeeper-*.jar (expected lib/ of a release)")
        return os.pathsep.join([f"{home}/conf", *jars])
    if DEBIAN_JAR.exists():
        logger = [str(DEBIAN_LOGGER)] if DEBIAN_LOGGER.exists() else []
        return os.pathsep.join([str(DEBIAN_CONF), str(DEBIAN_JAR), *logger])
    raise ProviderUnavailable("no ZooKeeper jars: apt-get install zookeeper (./lab setup does) or set ZOOKEEPER_HOME")


def available() -> bool:
    try:
        find_java()
        zookeeper_classpath()
    except ProviderUnavailable:
        return False
    return True


class LocalEnsemble(Ensemble):
    provider = Provider.LOCAL

    def __init__(self, *, name: str, config: EnsembleConfig, nodes: list[Node], workdir: Path,
                 commands: list[list[str]], pids: list[int | None], links: LinkProxies | None) -> None:
        super().__init__(name=name, config=config, nodes=nodes)
        self.workdir = workdir
        self._commands = commands
        self._pids = pids
        self._popens: dict[int, subprocess.Popen] = {}
        self._links = links

    # -- starting ----------------------------------------------------------------------------

    @classmethod
    def start(cls, config: EnsembleConfig, name: str, workdir: Path | None = None,
              owner_pid: int | None = None) -> LocalEnsemble:
        java, classpath = find_java(), zookeeper_classpath()
        picked = config.first_client_port is None
        for attempt in range(3):  # picked ports can be taken by someone else before java binds them
            ensemble = cls._launch(config, name, java, classpath, workdir, owner_pid)
            try:
                ensemble.wait_ready()
                return ensemble
            except PortInUse:
                ensemble.stop()
                if not picked or attempt == 2:
                    raise
            except BaseException:
                ensemble.stop()
                raise
        raise AssertionError("unreachable")

    @classmethod
    def _launch(cls, config: EnsembleConfig, name: str, java: str, classpath: str,
                workdir: Path | None, owner_pid: int | None = None) -> LocalEnsemble:
        n = config.nodes
        ports = client_ports(n, config.first_client_port)
        peer_ports = free_ports(2 * n) if n > 1 else []
        quorum = {i: peer_ports[2 * i] for i in range(n)} if n > 1 else {}
        election = {i: peer_ports[2 * i + 1] for i in range(n)} if n > 1 else {}

        workdir = workdir or Path(tempfile.mkdtemp(prefix=f"lab-{name}-"))
        links = LinkProxies() if (n > 1 and config.peer_links) else None
        # dial[i][k]: the (quorum, election) ports node i dials to reach node k.
        dial = {i: {k: (quorum.get(k), election.get(k)) for k in range(n)} for i in range(n)}
        if links is not None:
            for i, k in itertools.permutations(range(n), 2):  # i reaches k only through link i->k
                dial[i][k] = (links.add(f"{i}->{k}/quorum", quorum[k]), links.add(f"{i}->{k}/election", election[k]))
            for i, k in itertools.permutations(range(n), 2):  # k dials back to i through link k->i
                links.advertise(f"{i}->{k}/election", f"{HOST}:{dial[k][i][1]}")
        commands: list[list[str]] = []
        for i in range(n):
            node_dir = workdir / f"node{i + 1}"
            (node_dir / "data").mkdir(parents=True, exist_ok=True)
            (node_dir / "data" / "myid").write_text(f"{i + 1}\n")
            servers = [f"server.{k + 1}={HOST}:{dial[i][k][0]}:{dial[i][k][1]}" for k in range(n)]
            cfg = node_dir / "zoo.cfg"
            cfg.write_text(_zoo_cfg(config, node_dir / "data", ports[i], servers if n > 1 else []))
            commands.append([
                java, *JVM_OPTIONS, *ELECTION_OPTIONS, f"{MARKER}{name}", "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                "-cp", classpath, MAIN_CLASS, str(cfg),
            ])
        nodes = [Node(index=i, client_port=ports[i]) for i in range(n)]
        ensemble = cls(name=name, config=config, nodes=nodes, workdir=workdir, commands=commands,
                       pids=[None] * n, links=links)
        if owner_pid is not None:  # before the first server, so that none can be orphaned
            try:
                ensemble._start_reaper(owner_pid, workdir)
            except BaseException:
                ensemble.stop()
                raise
        for i in range(n):
            ensemble._spawn(i)
        return ensemble

    def _spawn(self, index: int) -> None:
        log = open(self._log_path(index), "ab")  # noqa: SIM115 - handed to the child
        try:
            # A session of its own: Ctrl-C in a terminal reaches the lab, not the servers.
            popen = subprocess.Popen(self._commands[index], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        self._popens[index] = popen
        self._pids[index] = popen.pid

    # -- faults ------------------------------------------------------------------------------

    def kill(self, index: int) -> None:
        self._signal(index, signal.SIGKILL)
        self._reap(index, timeout_s=10)

    def pause(self, index: int) -> None:
        self._signal(index, signal.SIGSTOP)
        # SIGSTOP is delivered to each of the JVM's threads as it is next scheduled; on a loaded
        # machine one can still answer a request after kill() returns. The fault is in place
        # only once every thread is stopped.
        if self._alive(index):
            wait_until(lambda: self._all_threads_stopped(index), 10, f"node {index + 1} to stop", interval_s=0.01)

    def resume(self, index: int) -> None:
        self._signal(index, signal.SIGCONT)

    def restart(self, index: int, wait: bool = True) -> None:
        if self._alive(index):
            self._signal(index, signal.SIGTERM)
            self._signal(index, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            if not self._reap(index, timeout_s=15):
                self.kill(index)
        self._spawn(index)
        if wait:
            self.wait_serving(index)

    def isolate(self, index: int) -> None:
        for name in self._link_names(index):
            self._links.cut(name)

    def heal(self, index: int | None = None) -> None:
        indices = range(len(self.nodes)) if index is None else [index]
        for i in indices:
            for name in self._link_names(i):
                if self._links.is_cut(name):
                    self._links.heal(name)

    def _link_names(self, index: int) -> list[str]:
        if self._links is None:
            raise NotSupported(
                f"ensemble {self.name} has no cuttable peer links: only an ensemble started in this "
                "process with more than one node can be partitioned"
            )
        others = [k for k in range(len(self.nodes)) if k != index]
        return [f"{a}->{b}/{kind}" for k in others for a, b in ((index, k), (k, index))
                for kind in ("quorum", "election")]

    # -- lifetime ----------------------------------------------------------------------------

    def running(self) -> bool:
        return any(self._alive(i) for i in range(len(self.nodes)))

    def stop(self) -> None:
        for i in range(len(self.nodes)):
            if self._alive(i):
                self._signal(i, signal.SIGKILL)
                self._reap(i, timeout_s=10)
        if self._links is not None:
            links, self._links = self._links, None
            links.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self._stop_reaper()

    def to_state(self) -> dict:
        return {
            "provider": self.provider.value, "name": self.name, "workdir": str(self.workdir),
            "nodes": [{"index": n.index, "client_port": n.client_port, "pid": self._pids[n.index],
                       "command": self._commands[n.index]} for n in self.nodes],
            "config": {"nodes": self.config.nodes, "tick_ms": self.config.tick_ms},
        }

    @classmethod
    def from_state(cls, state: dict) -> LocalEnsemble:
        nodes = [Node(index=n["index"], client_port=n["client_port"]) for n in state["nodes"]]
        config = EnsembleConfig(nodes=len(nodes), name=state["name"], peer_links=False)
        return cls(name=state["name"], config=config, nodes=nodes, workdir=Path(state["workdir"]),
                   commands=[n["command"] for n in state["nodes"]], pids=[n["pid"] for n in state["nodes"]],
                   links=None)

    # -- processes ---------------------------------------------------------------------------

    def _alive(self, index: int) -> bool:
        pid = self._pids[index]
        if pid is None:
            return False
        if (popen := self._popens.get(index)) is not None:
            return popen.poll() is None
        # Started by another process: trust the pid only while its command line is still ours.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return status != "Z" and f"{MARKER}{self.name}".encode() in cmdline

    def _all_threads_stopped(self, index: int) -> bool:
        states = []
        for stat in glob.glob(f"/proc/{self._pids[index]}/task/*/stat"):
            try:
                states.append(Path(stat).read_text().rsplit(")", 1)[1].split()[0])
            except OSError:  # a thread that ended meanwhile
                continue
        return bool(states) and all(state in ("T", "t", "Z", "X") for state in states)

    def _signal(self, index: int, signum: int) -> None:
        if self._alive(index):
            os.kill(self._pids[index], signum)

    def _reap(self, index: int, timeout_s: float) -> bool:
        if (popen := self._popens.get(index)) is not None:
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        try:
            wait_until(lambda: not self._alive(index), timeout_s, f"node {index + 1} to exit")
        except NotReady:
            return False
        return True

    def _log_path(self, index: int) -> Path:
        return self.workdir / f"node{index + 1}" / "server.log"

    def _log_tail(self, index: int, lines: int = 5) -> str:
        try:
            text = self._log_path(index).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _check_running(self, index: int) -> None:
        if self._alive(index):
            return
        log = self._log_tail(index, 200)
        node = self.nodes[index]
        if "Address already in use" in log:
            raise PortInUse(f"ZooKeeper node {node.myid} could not bind its ports (client {node.client_port}): "
                            "port in use")
        raise NotReady(f"ZooKeeper node {node.myid} exited during start-up{self._log_hint(index)}")

    def _log_hint(self, index: int) -> str:
        tail = self._log_tail(index, 3)
        return f"; log {self._log_path(index)} ends:\n{tail}" if tail else ""


def _zoo_cfg(config: EnsembleConfig, data_dir: Path, client_port: int, servers: list[str]) -> str:
    lines = [
        f"tickTime={config.tick_ms}",
        f"initLimit={config.init_limit}",
        f"syncLimit={config.sync_limit}",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={HOST}",
        "maxClientCnxns=0",
        f"maxSessionTimeout={config.max_session_timeout_ms}",
        "4lw.commands.whitelist=*",
        "admin.enableServer=false",
        "standaloneEnabled=true",
        "reconfigEnabled=false",
        *servers,
    ]
    return "\n".join(lines) + "\n"
