"""Committed offsets for both group kinds, as Kafka's OffsetMetadataManager keeps them: OffsetCommit,
OffsetFetch, and the fence of each kind against a member that is no longer who it says it is.

- A classic group fences by generation: a member commits with the generation it joined, and a
  zombie (a member the group has rebalanced without) is refused ILLEGAL_GENERATION or
  UNKNOWN_MEMBER_ID. A commit with no generation is a consumer that assigns itself partitions (or
  an admin tool), and only an Empty group takes it. Kafka: ClassicGroup.validateOffsetCommit.
- A consumer group fences by member epoch (OffsetCommit v9+): only a known member at its current
  epoch commits; any other epoch, older or newer, is STALE_MEMBER_EPOCH. A group with no members
  takes a commit without a member (an admin tool resetting offsets). OffsetFetch v9 from a member
  is checked the same way. Kafka: ConsumerGroup.validateOffsetCommit / validateOffsetFetch.

Kafka keeps each kind's rule in its group class and OffsetMetadataManager.validateOffsetCommit picks
it; here both rules sit in this module, so that one file says how a commit is fenced.

The offsets themselves live with their group (`ClassicGroup.offsets`, `ConsumerGroup.offsets`), so a
group upgraded from classic to consumer keeps them; they are written as offset commit records
(`records/offset_commit.py`). The group metadata manager says which group an id names, and of
which kind; the wire's versions are `offset_wire`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator import offset_wire
from modern.coordinator.classic_group import ClassicGroup, ClassicGroupState
from modern.coordinator.consumer_group import ConsumerGroup
from modern.coordinator.group_metadata_manager import GroupMetadataManager
from modern.coordinator.records.offset_commit import OffsetAndMetadata, offset_commit_record

OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9   # OffsetCommit/OffsetFetch v9 carry the member epoch

S = ClassicGroupState


@dataclass(frozen=True, kw_only=True)
class OffsetCommit:
    """An OffsetCommit to a classic group, in the group's terms."""

    offsets: Mapping[tuple[str, int], OffsetAndMetadata]
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None


# ---------------------------------------------------------------- a classic group's fence


def classic_commit_error(group: ClassicGroup, request: OffsetCommit) -> ErrorClass | None:
    """Who may commit to a classic group: a member at the group's generation, or anyone while it is Empty
    and the commit names no generation. None: accepted."""
    if group.state is S.DEAD:
        return errors.COORDINATOR_NOT_AVAILABLE
    if request.generation_id < 0 and group.state is S.EMPTY:
        return None  # a consumer that assigns partitions itself (or an admin tool)
    if request.generation_id >= 0 or request.member_id or request.group_instance_id is not None:
        error = group.validate_identity(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION  # the fence against a zombie's commits
    elif group.state is not S.EMPTY:
        return errors.UNKNOWN_MEMBER_ID
    if group.state is S.COMPLETING_REBALANCE:
        return errors.REBALANCE_IN_PROGRESS
    return None


def commit_to_classic_group(group: ClassicGroup, request: OffsetCommit,
                            now_ms: int) -> tuple[ErrorClass, dict[tuple[str, int], OffsetAndMetadata]]:
    """(error, the offsets to write): a commit past the fence is kept by the group at once, and counts as
    a sign of life from its member (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
    error = classic_commit_error(group, request)
    if error is not None:
        return error, {}
    group.keep_alive(request.member_id, now_ms)
    stamped = {
        key: OffsetAndMetadata(
            value.offset,
            value.metadata,
            value.leader_epoch,
            now_ms if value.commit_timestamp_ms < 0 else value.commit_timestamp_ms,
            value.expire_timestamp_ms,
        )
        for key, value in request.offsets.items()
    }
    group.offsets.update(stamped)
    return errors.NONE, stamped


# ---------------------------------------------------------------- a consumer group's fence


def member_epoch_error(group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorClass:
    """Only a known member at its current epoch; any other epoch, older or newer, is STALE_MEMBER_EPOCH
    (Kafka's ConsumerGroup.validateMemberEpoch)."""
    member = group.members.get(member_id)
    if member is None:
        return errors.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return errors.STALE_MEMBER_EPOCH
    return errors.NONE


def consumer_commit_error(group: ConsumerGroup, version: int, member_id: str, member_epoch: int) -> ErrorClass:
    """Who may commit to a consumer group: its members at their current epoch (v9+), or anyone
    while it has no members (an admin tool resetting offsets)."""
    if member_epoch < 0 and not member_id and not group.members:
        return errors.NONE
    if version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
        return errors.UNSUPPORTED_VERSION
    return member_epoch_error(group, member_id, member_epoch)


def consumer_fetch_error(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorClass:
    """OffsetFetch v9 from a member: the member must be known and at its current epoch."""
    if member_epoch < 0:
        return errors.NONE
    return member_epoch_error(group, member_id or "", member_epoch)


# ---------------------------------------------------------------- the APIs


class OffsetMetadataManager:
    def __init__(self, coordinator: Any, groups: GroupMetadataManager) -> None:
        self.coordinator = coordinator   # a CoordinatorExtension: clock, log
        self.groups = groups

    async def offset_commit(self, ctx: Any, request: Any) -> Any:
        version = ctx.api_version
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        offsets = offset_wire.committed_offsets(request, version, self.coordinator.wall_ms())
        # Metadata past the limit is refused partition by partition once the member is let in; the others
        # are stored (Kafka 3.7's GroupMetadataManager.storeOffsets, 4.x's OffsetMetadataManager.commitOffset).
        oversized = offset_wire.metadata_too_large(offsets, self.coordinator.config.offset_metadata_max_bytes)
        storable = {key: value for key, value in offsets.items() if key not in oversized}
        consumer = self.groups.consumer_group(request.group_id)
        if consumer is not None:
            error = consumer_commit_error(consumer, version, member_id, generation)
            refused = dict.fromkeys(oversized, errors.OFFSET_METADATA_TOO_LARGE) if error is errors.NONE else {}
            if error is errors.NONE and storable:
                error = self._commit_to_consumer_group(consumer, storable)
            return offset_wire.commit_response(version, offsets, error, refused)
        group, error = self.groups.classic_group(request.group_id, create=generation < 0, allow_empty=True)
        if error is None and group is None:
            error = errors.ILLEGAL_GENERATION  # Kafka: an unknown group with a generation is a stale member
        refused = {}
        if error is None:
            commit = OffsetCommit(offsets=storable, member_id=member_id, generation_id=generation,
                                  group_instance_id=request.group_instance_id if version >= 7 else None)
            error, committed = commit_to_classic_group(group, commit, self.coordinator.clock_ms())
            if error is errors.NONE:
                refused = dict.fromkeys(oversized, errors.OFFSET_METADATA_TOO_LARGE)
            error = self._write(group.group_id, committed) or error
            self.coordinator.wake_for(group.next_deadline())
        return offset_wire.commit_response(version, offsets, error, refused)

    def _commit_to_consumer_group(self, group: ConsumerGroup, offsets: dict) -> ErrorClass:
        """Written first, kept by the group only once written."""
        failure = self._write(group.group_id, offsets)
        if failure is not None:
            return failure
        group.offsets.update(offsets)
        return errors.NONE

    def _write(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> ErrorClass | None:
        """None when written (or nothing to write), else the error to answer."""
        if not offsets:
            return None
        return self.coordinator.write(self.coordinator.partition_holding(group_id), lambda: [
            offset_commit_record(group_id, topic, index, value) for (topic, index), value in offsets.items()])

    async def offset_fetch(self, ctx: Any, request: Any) -> Any:
        return offset_wire.fetch_response(ctx.api_version, request, self._fetch_offsets)

    def _fetch_offsets(self, group_id: str, requested: list[tuple[str, list[int]]] | None,
                       member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorClass, list]:
        """(error, [(topic, [(partition, offset, leader_epoch, metadata)])]); -1 where nothing is committed."""
        consumer = self.groups.consumer_group(group_id)
        if consumer is not None:
            error = consumer_fetch_error(consumer, member_id, member_epoch)
            if error is not errors.NONE:
                return error, []
            offsets = consumer.offsets
        else:
            group, error = self.groups.classic_group(group_id, create=False, allow_empty=True)
            if error is not None:
                return error, []
            offsets = group.offsets if group is not None else {}
        if requested is None:  # every committed offset of the group
            requested_by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                requested_by_topic.setdefault(topic, []).append(partition)
            requested = list(requested_by_topic.items())
        found = []
        for topic, partitions in requested:
            rows = []
            for partition in partitions:
                committed = offsets.get((topic, partition))
                if committed is None:
                    rows.append((partition, -1, -1, ""))
                else:
                    rows.append((partition, committed.offset, committed.leader_epoch, committed.metadata))
            found.append((topic, rows))
        return errors.NONE, found
