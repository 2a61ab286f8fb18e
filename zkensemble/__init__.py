"""Real ZooKeeper on demand: one node or an ensemble, in Docker or as local Java processes.

    import zkensemble
    with zkensemble.start(nodes=3) as zk:
        client = KazooClient(hosts=zk.chroot())
        zk.isolate(0); ...; zk.heal()

`provider` is "docker" (testcontainers), "local" (java QuorumPeerMain from installed jars) or
"auto" (docker when the engine answers and an image is at hand, else local); when not given,
$LAB_ZK_PROVIDER decides, defaulting to auto.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import EnsembleConfig, Provider
from .ensemble import Ensemble, Node, wait_until
from .errors import (
    AlreadyUp,
    ImageMissing,
    NotReady,
    NotSupported,
    NotUp,
    PortInUse,
    ProviderUnavailable,
    UnknownProvider,
    ZkEnsembleError,
)
from .fourlw import Mode

__all__ = [
    "AlreadyUp", "Ensemble", "EnsembleConfig", "ImageMissing", "Mode", "Node", "NotReady", "NotSupported",
    "NotUp", "PortInUse", "Provider", "ProviderUnavailable", "UnknownProvider", "ZkEnsembleError",
    "choose_provider", "start", "wait_until",
]


def choose_provider(provider: str | Provider | None = None) -> Provider:
    """Resolve "auto" (or nothing: $LAB_ZK_PROVIDER) to the provider that can run here."""
    from . import docker_provider, local_provider

    wanted = Provider.parse(provider or os.environ.get("LAB_ZK_PROVIDER") or "auto")
    if wanted is not Provider.AUTO:
        return wanted
    if docker_provider.available():
        return Provider.DOCKER
    if local_provider.available():
        return Provider.LOCAL
    raise ProviderUnavailable(
        "no way to run ZooKeeper here: neither a Docker engine with a ZooKeeper image nor Java with "
        "ZooKeeper jars; run ./lab setup"
    )


def start(nodes: int = 1, provider: str | Provider | None = None, name: str | None = None,
          workdir: Path | None = None, owner_pid: int | None = None, **options) -> Ensemble:
    """Start a ZooKeeper ensemble and return once every node serves a real client and one leads.

    `options` are further `EnsembleConfig` fields (tick_ms, first_client_port, ...). A failed
    start leaves nothing running. With `owner_pid` (usually `os.getpid()`), a detached reaper
    removes the ensemble once that process is gone, even if it was SIGKILLed (see reaper.py);
    without it the ensemble lives until `stop()` or this process's normal exit.
    """
    from . import docker_provider, local_provider

    chosen = choose_provider(provider)
    config = EnsembleConfig(nodes=nodes, name=name or "", **options)
    resolved = config.resolved_name()
    if chosen is Provider.DOCKER:
        return docker_provider.DockerEnsemble.start(config, resolved, owner_pid=owner_pid)
    return local_provider.LocalEnsemble.start(config, resolved, workdir, owner_pid=owner_pid)


def from_state(state: dict) -> Ensemble:
    """Find again an ensemble another process started (see `state.py`)."""
    from . import docker_provider, local_provider

    if Provider.parse(state["provider"]) is Provider.DOCKER:
        return docker_provider.DockerEnsemble.from_state(state)
    return local_provider.LocalEnsemble.from_state(state)
