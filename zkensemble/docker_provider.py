"""The docker provider: one container per node, started with testcontainers, driven with docker-py.

Image: $LAB_ZK_IMAGE, else the official `zookeeper:3.8` when present or pullable, else the
lab's own `rebalance-lab/zookeeper:3.8` built offline by docker/zookeeper/build.sh (`./lab setup`
and the first `./lab test` build it; the demo does not need it). Both images read the same ZOO_*
variables. "auto" picks this provider only when an image is already here: it never pulls.

Networking: every container sits on Docker's default bridge with its client port published
on a fixed 127.0.0.1 port (so the address survives restarts), and, in an ensemble, also on an
internal network of its own where the peers find each other as zk1, zk2, ... Cutting a node
off from its peers is `docker network disconnect` from that internal network: its clients
still reach it and see it stop serving, as they would in a real partition.
"""

from __future__ import annotations

import os

from .config import EnsembleConfig, Provider
from .ensemble import ELECTION_OPTIONS, HOST, Ensemble, Node
from .errors import ImageMissing, NotReady, PortInUse, ProviderUnavailable
from .leftovers import LABEL, docker_client, labelled, remove_labelled
from .ports import client_ports

OFFICIAL_IMAGE = "zookeeper:3.8"
LOCAL_IMAGE = "rebalance-lab/zookeeper:3.8"
BUILD_HINT = "build it offline with docker/zookeeper/build.sh (./lab setup does)"

# Ryuk (testcontainers' reaper) would remove containers when the starting process exits, which
# `zk up` must survive; and its image cannot be pulled without a registry. Cleanup is ours.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def available() -> bool:
    """Whether "auto" may pick Docker: the engine answers and a ZooKeeper image is already here.
    Nothing is pulled: a first `./lab demo` on a machine without an image runs the Debian jars at once
    instead of waiting on (or timing out against) a registry, once per run."""
    try:
        return present_image(docker_client(timeout_s=5)) is not None
    except ProviderUnavailable:
        return False


def _present(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _pulled(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.pull(tag)
        return True
    except docker.errors.APIError:
        return False


def present_image(client) -> str | None:
    """The image this provider would use that is already here, without pulling, or None."""
    wanted = os.environ.get("LAB_ZK_IMAGE")
    for tag in (wanted,) if wanted else (OFFICIAL_IMAGE, LOCAL_IMAGE):
        if _present(client, tag):
            return tag
    return None


def resolve_image(client) -> str:
    """The image to start: one already here, else one pulled (docker was asked for by name)."""
    if tag := present_image(client):
        return tag
    if wanted := os.environ.get("LAB_ZK_IMAGE"):
        if _pulled(client, wanted):
            return wanted
        raise ImageMissing(f"LAB_ZK_IMAGE={wanted} is not present and cannot be pulled")
    if _pulled(client, OFFICIAL_IMAGE):
        return OFFICIAL_IMAGE
    raise ImageMissing(f"no ZooKeeper image: {OFFICIAL_IMAGE} cannot be pulled and {LOCAL_IMAGE} is missing; {BUILD_HINT}")


class DockerEnsemble(Ensemble):
    provider = Provider.DOCKER

    def __init__(self, *, name: str, config: EnsembleConfig, nodes: list[Node], client, image: str,
                 container_ids: list[str], network_id: str | None) -> None:
        super().__init__(name=name, config=config, nodes=nodes)
        self._client = client
        self.image = image
        self._container_ids = container_ids
        self._network_id = network_id

    @classmethod
    def start(cls, config: EnsembleConfig, name: str, owner_pid: int | None = None) -> DockerEnsemble:
        client = docker_client()
        image = resolve_image(client)
        n = config.nodes
        ports = client_ports(n, config.first_client_port)
        nodes = [Node(index=i, client_port=ports[i]) for i in range(n)]
        ensemble = cls(name=name, config=config, nodes=nodes, client=client, image=image,
                       container_ids=[], network_id=None)
        try:
            if owner_pid is not None:  # before the first container: a start cut short is covered too
                ensemble._start_reaper(owner_pid)
            ensemble._launch()
            ensemble.wait_ready()
        except BaseException:
            ensemble.stop()
            raise
        return ensemble

    def _launch(self) -> None:
        from testcontainers.core.container import DockerContainer

        n = len(self.nodes)
        labels = {LABEL: self.name}
        if n > 1:
            network = self._client.networks.create(f"lab-{self.name}-peers", driver="bridge",
                                                   internal=True, labels=labels)
            self._network_id = network.id
        servers = " ".join(f"server.{k + 1}=zk{k + 1}:2888:3888;2181" for k in range(n))
        for node in self.nodes:
            env = {
                "ZOO_MY_ID": str(node.myid),
                "ZOO_SERVERS": servers,
                "ZOO_4LW_COMMANDS_WHITELIST": "*",
                "ZOO_TICK_TIME": str(self.config.tick_ms),
                "ZOO_INIT_LIMIT": str(self.config.init_limit),
                "ZOO_SYNC_LIMIT": str(self.config.sync_limit),
                "ZOO_STANDALONE_ENABLED": "true",
                "ZOO_ADMINSERVER_ENABLED": "false",
                # Peers' names resolve only once every container has joined the peer network;
                # Java would otherwise remember a failed lookup for 10 s.
                "JVMFLAGS": " ".join([*ELECTION_OPTIONS, "-Dsun.net.inetaddr.negative.ttl=0"]),
                # Listen on all addresses: after a disconnect/reconnect the node's address changes.
                "ZOO_CFG_EXTRA": f"maxSessionTimeout={self.config.max_session_timeout_ms} quorumListenOnAllIPs=true",
            }
            container = DockerContainer(self.image, env=env, name=f"lab-{self.name}-zk{node.myid}", labels=labels)
            # Published on loopback only (with_bind_ports would publish on every interface).
            container.ports["2181/tcp"] = (HOST, node.client_port)
            try:
                container.start()
            except Exception as error:
                text = str(error)
                if "port is already allocated" in text or "address already in use" in text:
                    raise PortInUse(f"port {node.client_port} is already in use: pick another with --client-port") from None
                raise
            self._container_ids.append(container.get_wrapped_container().id)
            if self._network_id:
                self._network().connect(self._container_ids[-1], aliases=[f"zk{node.myid}"])

    # -- faults ------------------------------------------------------------------------------

    def kill(self, index: int) -> None:
        container = self._container(index)
        if container.status == "paused":
            container.unpause()  # the engine refuses to kill a paused container
        container.kill()
        container.wait(timeout=30)

    def pause(self, index: int) -> None:
        self._container(index).pause()

    def resume(self, index: int) -> None:
        self._container(index).unpause()

    def restart(self, index: int, wait: bool = True) -> None:
        container = self._container(index)
        if container.status == "paused":
            container.unpause()
        container.restart(timeout=10)
        if wait:
            self.wait_serving(index)

    def isolate(self, index: int) -> None:
        self._require_network()
        self._network().disconnect(self._container_ids[index])

    def heal(self, index: int | None = None) -> None:
        self._require_network()
        network = self._network()
        network.reload()
        attached = {c.id for c in network.containers}
        indices = range(len(self.nodes)) if index is None else [index]
        for i in indices:
            if self._container_ids[i] not in attached:
                network.connect(self._container_ids[i], aliases=[f"zk{i + 1}"])

    def _require_network(self) -> None:
        if self._network_id is None:
            from .errors import NotSupported

            raise NotSupported(f"ensemble {self.name} has one node: there are no peers to cut it off from")

    # -- lifetime ----------------------------------------------------------------------------

    def running(self) -> bool:
        containers, networks = labelled(self._client, self.name)
        return bool(containers or networks)

    def stop(self) -> None:
        """Remove the containers (with their volumes) and the network, found by label as well."""
        remove_labelled(self._client, self.name)
        self._stop_reaper()

    def to_state(self) -> dict:
        return {
            "provider": self.provider.value, "name": self.name, "image": self.image,
            "network_id": self._network_id,
            "nodes": [{"index": n.index, "client_port": n.client_port, "container_id": self._container_ids[n.index]}
                      for n in self.nodes],
            "config": {"nodes": self.config.nodes, "tick_ms": self.config.tick_ms},
        }

    @classmethod
    def from_state(cls, state: dict) -> DockerEnsemble:
        nodes = [Node(index=n["index"], client_port=n["client_port"]) for n in state["nodes"]]
        config = EnsembleConfig(nodes=len(nodes), name=state["name"])
        return cls(name=state["name"], config=config, nodes=nodes, client=docker_client(), image=state["image"],
                   container_ids=[n["container_id"] for n in state["nodes"]], network_id=state["network_id"])

    # -- docker objects ----------------------------------------------------------------------

    def _container(self, index: int):
        return self._client.containers.get(self._container_ids[index])

    def _network(self):
        return self._client.networks.get(self._network_id)

    def _check_running(self, index: int) -> None:
        if index >= len(self._container_ids):
            return
        container = self._container(index)
        if container.status in ("exited", "dead"):
            raise NotReady(f"ZooKeeper container {container.name} exited during start-up{self._log_hint(index)}")

    def _log_hint(self, index: int) -> str:
        try:
            tail = self._container(index).logs(tail=3).decode(errors="replace").strip()
        except Exception:
            return ""
        return f"; its log ends:\n{tail}" if tail else ""
