"""Topic ids: one stable UUID per topic name, the same on every broker and in every run."""

from __future__ import annotations

import uuid

_NAMESPACE = uuid.UUID("6c1d2f38-6e1b-4a39-9d33-5b0a7f3f0a11")


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, name)
