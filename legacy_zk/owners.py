"""Partition ownership: one ephemeral znode per partition holding the owning thread id.

A claim fails on NodeExists when someone else's data is in the node (its owner has not
released it yet); "exists with my own data" counts as mine, as in 0.8. A failed claim is
undone by the caller (`release` of what was claimed), so an attempt owns all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from legacy_zk.registry import GroupPaths
from legacy_zk.zk import TracedZooKeeper
from rebalance.types import TopicPartition


@dataclass(frozen=True)
class ClaimResult:
    claimed: tuple[TopicPartition, ...]
    conflicts: Mapping[TopicPartition, str]  # partition -> thread id found in its owner znode

    @property
    def ok(self) -> bool:
        return not self.conflicts


def claim(zk: TracedZooKeeper, paths: GroupPaths, decisions: Mapping[TopicPartition, str]) -> ClaimResult:
    """Try every partition (0.8 does not stop at the first conflict)."""
    claimed: list[TopicPartition] = []
    conflicts: dict[TopicPartition, str] = {}
    for partition in sorted(decisions):
        thread_id = decisions[partition]
        path = paths.owner(partition.topic, partition.partition)
        try:
            zk.ensure_path(paths.owners(partition.topic))
            zk.create(path, thread_id.encode(), ephemeral=True)
            claimed.append(partition)
        except NodeExistsError:
            holder = _holder(zk, path)
            if holder == thread_id:
                claimed.append(partition)
            else:
                conflicts[partition] = holder or "?"
    return ClaimResult(tuple(claimed), conflicts)


def release(zk: TracedZooKeeper, paths: GroupPaths, partitions: Iterable[TopicPartition]) -> None:
    for partition in sorted(partitions):
        try:
            zk.delete(paths.owner(partition.topic, partition.partition))
        except NoNodeError:
            pass  # already gone (zkclient's deletePath ignores it too)


def _holder(zk: TracedZooKeeper, path: str) -> str | None:
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return data.decode()
