"""What an ensemble is asked to be: frozen, keyword-only, checked when made."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from .errors import UnknownProvider, ZkEnsembleError


class Provider(Enum):
    AUTO = "auto"
    DOCKER = "docker"
    LOCAL = "local"

    @classmethod
    def parse(cls, text: str | Provider) -> Provider:
        if isinstance(text, Provider):
            return text
        try:
            return cls(text.strip().lower())
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise UnknownProvider(f"unknown ZooKeeper provider {text!r}: choose one of {choices}") from None


@dataclass(frozen=True, kw_only=True)
class EnsembleConfig:
    nodes: int = 1
    name: str = ""
    # A short tick makes failure detection inside the ensemble quick (syncLimit * tick);
    # maxSessionTimeout is raised so clients can still ask for Kafka 0.8's 6 s and more.
    tick_ms: int = 500
    init_limit: int = 20
    sync_limit: int = 4
    max_session_timeout_ms: int = 60_000
    first_client_port: int | None = None  # None: free ports are picked; else ports N, N+1, ...
    peer_links: bool = True  # route peer traffic through cuttable links (needed by isolate)
    start_timeout_s: float = 90.0

    def __post_init__(self) -> None:
        if self.nodes not in (1, 3, 5):
            raise ZkEnsembleError(f"an ensemble has 1, 3 or 5 nodes, not {self.nodes}")
        if self.name and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,40}", self.name):
            raise ZkEnsembleError(f"ensemble name {self.name!r}: use lower-case letters, digits, '-', '_', '.'")
        if self.first_client_port is not None and not 1024 <= self.first_client_port <= 65535 - self.nodes:
            raise ZkEnsembleError(f"client port {self.first_client_port} is outside 1024..65535")

    def resolved_name(self) -> str:
        """The given name, or a fresh unique one (every test run gets its own containers and dirs)."""
        return self.name or f"zk-{uuid.uuid4().hex[:8]}"


def state_dir() -> Path:
    """Where `zk up` records what it started: $LAB_STATE_DIR, else .lab/ in the checkout (or cwd)."""
    if env := os.environ.get("LAB_STATE_DIR"):
        return Path(env)
    checkout = Path(__file__).resolve().parents[1]
    base = checkout if (checkout / "pyproject.toml").exists() else Path.cwd()
    return base / ".lab"
