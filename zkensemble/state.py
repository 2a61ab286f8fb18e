"""The CLI's memory between invocations: which ensemble `zk up` started, in one JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from .config import state_dir
from .ensemble import Ensemble


def state_path() -> Path:
    return state_dir() / "zk.json"


def save(ensemble: Ensemble) -> Path:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ensemble.to_state(), indent=2) + "\n")
    tmp.replace(path)
    ensemble.detached = True
    return path


def load() -> Ensemble | None:
    from . import from_state

    path = state_path()
    if not path.exists():
        return None
    ensemble = from_state(json.loads(path.read_text()))
    ensemble.detached = True
    return ensemble


def forget() -> None:
    state_path().unlink(missing_ok=True)
