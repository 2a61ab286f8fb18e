"""One KIP-848 consumer group as its coordinator sees it, as a pure state machine.

No sockets and no clocks (sans-I/O): every call takes `now_ms` and returns an `Output` with the
answer and the records to persist; `next_deadline()` says when `tick()` must run next.

Three epochs drive the protocol. The *group epoch* moves whenever membership or subscriptions
(or the subscribed topics' partition counts) change; the *assignment epoch* is the group epoch
the target assignment was computed at; each *member epoch* says which target the member has
reached. A member converges on its own, heartbeat by heartbeat (Kafka's CurrentAssignmentBuilder):
it first gives up what the target takes away (UNREVOKED_PARTITIONS, its epoch held back), then
takes what the target adds, but a partition only once its previous owner released it
(UNRELEASED_PARTITIONS), and is STABLE when it owns exactly its target. Nobody waits for anyone
else's barrier: a member whose assignment does not change never hears of the rebalance.

Topics are named here; the coordinator translates the topic ids of the wire protocol.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, TopicPartition
from modern.coordinator.deadlines import Deadlines
from modern.coordinator.records import consumer_group as records
from rebalance.consumer_group_timing import ConsumerGroupTiming

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


# Why a member leaves the group for good (the `group_epoch` event's reason when it does).
REMOVAL_REASONS = frozenset({"member left", "session timeout", "rebalance timeout", "member rejoined"})


def group_state(group_epoch: int, assignment_epoch: int,
                members: Iterable[tuple[MemberState, int]]) -> ConsumerGroupState:
    """Kafka's ConsumerGroup state from the epochs and each member's (state, member epoch): assigning while the
    target lags the group epoch, reconciling until every member is stable at the target's epoch (a static member
    that left for now is not waited for)."""
    members = [(state, epoch) for state, epoch in members]
    if not members:
        return ConsumerGroupState.EMPTY
    if assignment_epoch < group_epoch:
        return ConsumerGroupState.ASSIGNING
    if any((epoch != assignment_epoch or state is not MemberState.STABLE)
           for state, epoch in members if epoch != STATIC_LEAVE_EPOCH):
        return ConsumerGroupState.RECONCILING
    return ConsumerGroupState.STABLE


@dataclass(frozen=True, kw_only=True)
class ConsumerGroupConfig(ConsumerGroupTiming):
    """Broker-side settings named after Kafka's `group.consumer.*` configs (KIP-848 moves the
    session timeout and heartbeat interval from the client to the broker): the session and heartbeat with
    their bounds, checked as Kafka's broker checks them at startup (`rebalance.consumer_group_timing`), and
    the group's size limit."""

    max_size: int | None = None                  # group.consumer.max.size (None: unbounded)


@dataclass(frozen=True, kw_only=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat in the group's terms; None means "unchanged since the last one"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None
    server_assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None
    client_id: str = ""
    client_host: str = ""
    member_id_from_client: bool = False          # v1: the client generated its member id


@dataclass(frozen=True, kw_only=True)
class HeartbeatResult:
    error: ErrorClass
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: frozenset[TopicPartition] | None = None   # None: unchanged, nothing to send
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class Member:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = frozenset()
    pending_revocation: Assignment = frozenset()


@dataclass
class Output:
    """What one call produced: the answer (if any) and the records to append, in order."""

    result: HeartbeatResult | None = None
    records: list[records.Record] = field(default_factory=list)
    events: list[dict[str, object]] = field(default_factory=list)


class ConsumerGroup:
    def __init__(self, group_id: str, config: ConsumerGroupConfig = ConsumerGroupConfig(), *,
                 now_ms: int = 0) -> None:
        self.group_id = group_id
        self.config = config
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.target: dict[str, Assignment] = {}
        self.partition_counts: dict[str, int] = {}
        self.owners: dict[TopicPartition, str] = {}         # assigned or pending revocation, by member
        self.session_deadlines: Deadlines[int] = Deadlines()
        self.rebalance_deadlines: Deadlines[tuple[int, int]] = Deadlines()   # member -> (deadline, epoch it was set at)
        self._subscribed: frozenset[str] | None = None   # the members' topics, None once membership changed
        self.offsets: dict[TopicPartition, object] = {}   # committed offsets (offset_metadata_manager)
        self.created_ms = now_ms

    # ------------------------------------------------------------ the API

    def heartbeat(self, request: HeartbeatRequest, topics: Mapping[str, int], now_ms: int) -> Output:
        """One ConsumerGroupHeartbeat; `topics` is the broker's partition count for every topic
        it knows (the group reads only those its members subscribe to)."""
        out = Output()
        problem = self._invalid(request)
        if problem is not None:
            out.result = HeartbeatResult(error=errors.INVALID_REQUEST, member_id=request.member_id or None,
                                         message=problem)
            return out
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            out.result = self._leave(request, now_ms, out)
            return out
        member, error = self._member_for(request, out)
        if error is not None:
            out.result = HeartbeatResult(error=error, member_id=request.member_id or None)
            return out
        updated = replace(
            member,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            client_id=request.client_id or member.client_id,
            client_host=request.client_host or member.client_host,
            subscribed_topics=(tuple(sorted(request.subscribed_topics)) if request.subscribed_topics is not None
                               else member.subscribed_topics),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0
                                  else member.rebalance_timeout_ms),
        )
        joining = updated.member_id not in self.members
        reason = "member joined" if joining else None
        if not joining and (updated.subscribed_topics != member.subscribed_topics
                            or updated.server_assignor != member.server_assignor):
            reason = "subscription changed"
        if updated != member or joining:
            self._put_member(updated, out)
        if self._refresh_partition_counts(topics) and reason is None:
            reason = "partition metadata changed"
        if reason is not None:  # one new group epoch for everything this heartbeat changed
            self.group_epoch += 1
            self._bump_reason(out, reason, updated.member_id)
        self._refresh_target(out)
        member = self.members[updated.member_id]
        reconciled = self._reconcile(member, request.owned, now_ms)
        if reconciled != member:
            self._set_current(reconciled, out)
        self.session_deadlines[member.member_id] = now_ms + self.config.session_timeout_ms
        full = request.member_epoch == JOIN_EPOCH or (request.owned is not None and request.owned != reconciled.assigned)
        changed = reconciled.assigned != member.assigned or reconciled.member_epoch != member.member_epoch
        out.result = HeartbeatResult(
            error=errors.NONE, member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=reconciled.assigned if (full or changed) else None)
        return out

    def state(self) -> ConsumerGroupState:
        return group_state(self.group_epoch, self.assignment_epoch,
                           ((m.state, m.member_epoch) for m in self.members.values()))

    def assignor_name(self) -> str:
        """The assignor most members ask for (ties by name); Kafka's default when none asks."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        return min(votes, key=lambda name: (-votes[name], name)) if votes else DEFAULT_ASSIGNOR

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.session_deadlines.earliest(), self.rebalance_deadlines.earliest()) if d is not None]
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Output:
        """Expire members whose session ran out and fence those that did not revoke in time. As in Kafka
        (GroupMetadataManager.consumerGroupFenceMember), a fenced member moves the group epoch only: the
        target follows at the next heartbeat of a member still in the group."""
        out = Output()
        for member_id, _ in self.session_deadlines.due(now_ms):
            if member_id in self.members:
                self._remove(member_id, out, "session timeout")
        for member_id, (_, epoch) in self.rebalance_deadlines.due(now_ms):
            member = self.members.get(member_id)
            if member is not None and member.member_epoch == epoch \
                    and member.state is MemberState.UNREVOKED_PARTITIONS:
                self._remove(member_id, out, "rebalance timeout")
        return out

    def restore_member(self, member: Member, now_ms: int) -> None:
        """Bring back a member read from the log: its session starts over now."""
        self.members[member.member_id] = member
        self._subscribed = None
        for tp in member.assigned | member.pending_revocation:
            self.owners[tp] = member.member_id
        self.session_deadlines[member.member_id] = now_ms + self.config.session_timeout_ms
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self.rebalance_deadlines[member.member_id] = (now_ms + member.rebalance_timeout_ms, member.member_epoch)

    # ------------------------------------------------------------ validation and membership

    @staticmethod
    def _invalid(request: HeartbeatRequest) -> str | None:
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            return "MemberEpoch is invalid."
        if request.member_id_from_client and not request.member_id:
            return "MemberId can't be empty."
        if not request.member_id_from_client and request.member_epoch != JOIN_EPOCH and not request.member_id:
            return "MemberId can't be empty."
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:   # -1 is "not given"; Kafka takes 0 and other values
                return "RebalanceTimeoutMs must be provided in first request."
            if request.owned:
                return "TopicPartitions must be empty when (re-)joining."
            if not request.subscribed_topics:
                return "SubscribedTopicNames must be set in first request."
        if request.member_epoch == STATIC_LEAVE_EPOCH and not request.instance_id:
            return "InstanceId can't be null when leaving as a static member."
        return None

    def _member_for(self, request: HeartbeatRequest, out: Output) -> tuple[Member, ErrorClass | None]:
        """The member this heartbeat speaks for (new on a join), or the error that refuses it."""
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return _placeholder(request), errors.UNSUPPORTED_ASSIGNOR
        if request.member_epoch != JOIN_EPOCH:
            member = self.members.get(request.member_id)
            if member is None:
                return _placeholder(request), errors.UNKNOWN_MEMBER_ID
            if request.instance_id is not None and request.instance_id != member.instance_id:
                return member, errors.FENCED_INSTANCE_ID
            if request.member_epoch > member.member_epoch:
                return member, errors.FENCED_MEMBER_EPOCH
            if request.member_epoch < member.member_epoch:
                # A lost answer: the member may retry from its previous epoch if it owns nothing newer.
                if request.member_epoch != member.previous_epoch or \
                        (request.owned is not None and not request.owned <= member.assigned):
                    return member, errors.FENCED_MEMBER_EPOCH
            return member, None
        member_id = request.member_id or str(uuid.uuid4())
        static = self._static_member(request.instance_id)
        if static is not None and static.member_epoch != STATIC_LEAVE_EPOCH and static.member_id != member_id:
            return static, errors.UNRELEASED_INSTANCE_ID
        if member_id in self.members:  # rejoining with epoch 0 (after a fence): start over under the same id
            self._remove(member_id, out, "member rejoined")
        if static is None and self.config.max_size is not None and len(self.members) >= self.config.max_size:
            return _placeholder(request), errors.GROUP_MAX_SIZE_REACHED
        fresh = Member(member_id=member_id, instance_id=request.instance_id, rack_id=request.rack_id,
                       client_id=request.client_id, client_host=request.client_host,
                       subscribed_topics=tuple(sorted(request.subscribed_topics or ())),
                       server_assignor=request.server_assignor, rebalance_timeout_ms=request.rebalance_timeout_ms)
        if static is not None:
            # A static member coming back takes over its predecessor's partitions and epoch (kept as
            # its previous epoch while it was away) without a new group epoch: nothing moves.
            self._forget(static.member_id, out)
            fresh = replace(fresh, member_epoch=static.previous_epoch, previous_epoch=static.previous_epoch,
                            assigned=static.assigned, pending_revocation=static.pending_revocation,
                            state=static.state)
            self.target[member_id] = self.target.pop(static.member_id, frozenset())
            self._put_member(fresh, out)
            self._set_current(fresh, out)
            out.records.append(records.target_member(self.group_id, member_id, self.target[member_id]))
        return fresh, None

    def _static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _leave(self, request: HeartbeatRequest, now_ms: int, out: Output) -> HeartbeatResult:
        member = self.members.get(request.member_id)
        if member is None:
            if request.instance_id is not None and (static := self._static_member(request.instance_id)):
                member = static
            else:
                return HeartbeatResult(error=errors.UNKNOWN_MEMBER_ID, member_id=request.member_id)
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id:
            # It will come back under the same instance id: keep its partitions until its session ends;
            # what it was revoking is released now (Kafka's consumerGroupStaticMemberGroupLeave).
            self._set_current(replace(member, member_epoch=STATIC_LEAVE_EPOCH, previous_epoch=member.member_epoch,
                                      pending_revocation=frozenset()), out)
            self.rebalance_deadlines.pop(member.member_id, None)
        else:   # the epoch moves; the target follows at the next heartbeat of a member that stays (as in tick)
            self._remove(member.member_id, out, "member left")
        return HeartbeatResult(error=errors.NONE, member_id=member.member_id, member_epoch=request.member_epoch,
                               heartbeat_interval_ms=0)

    def _remove(self, member_id: str, out: Output, reason: str) -> None:
        """A member leaves the group for good: its partitions are free and the group epoch moves."""
        assert reason in REMOVAL_REASONS, reason   # readers of the events tell a removal by its reason
        self._forget(member_id, out)
        self.target.pop(member_id, None)
        out.records.append(records.target_member(self.group_id, member_id, None))
        self.group_epoch += 1
        self._bump_reason(out, reason, member_id)

    def _forget(self, member_id: str, out: Output) -> None:
        member = self.members.pop(member_id)
        self._subscribed = None
        for tp in member.assigned | member.pending_revocation:
            if self.owners.get(tp) == member_id:
                del self.owners[tp]
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        out.records.append(records.current_assignment(self.group_id, member_id, None))
        out.records.append(records.member_metadata(self.group_id, member_id, None))

    def _put_member(self, member: Member, out: Output) -> None:
        before = self.members.get(member.member_id)
        if before is None or before.subscribed_topics != member.subscribed_topics:
            self._subscribed = None
        self.members[member.member_id] = member
        out.records.append(records.member_metadata(self.group_id, member.member_id, member))

    def _bump_reason(self, out: Output, reason: str, member_id: str) -> None:
        out.records.append(records.group_metadata(self.group_id, self.group_epoch))
        out.events.append({"event": "group_epoch", "group_epoch": self.group_epoch, "reason": reason,
                           "member": member_id})

    # ------------------------------------------------------------ target assignment

    def _refresh_partition_counts(self, topics: Mapping[str, int]) -> bool:
        """Take the subscribed topics' partition counts; True when they changed."""
        if self._subscribed is None:
            self._subscribed = frozenset(t for m in self.members.values() for t in m.subscribed_topics)
        counts = {t: topics[t] for t in sorted(self._subscribed) if t in topics}
        changed = counts != self.partition_counts
        self.partition_counts = counts
        return changed

    def _refresh_target(self, out: Output) -> None:
        """Recompute the target when the group epoch moved past it."""
        if self.assignment_epoch >= self.group_epoch:
            return
        subscriptions = {m.member_id: frozenset(m.subscribed_topics) for m in self.members.values()}
        instance_ids = {m.member_id: m.instance_id for m in self.members.values() if m.instance_id}
        assignor = ASSIGNORS[self.assignor_name()]
        target = assignor(subscriptions, self.partition_counts, self.target, instance_ids=instance_ids)
        for member_id, partitions in sorted(target.items()):
            if self.target.get(member_id) != partitions:
                out.records.append(records.target_member(self.group_id, member_id, partitions))
        self.target = target
        self.assignment_epoch = self.group_epoch
        out.records.append(records.target_metadata(self.group_id, self.assignment_epoch))
        out.events.append({"event": "target_assignment", "assignment_epoch": self.assignment_epoch,
                           "assignor": self.assignor_name(), "members": len(target)})

    # ------------------------------------------------------------ reconciliation

    def _reconcile(self, member: Member, owned: frozenset[TopicPartition] | None, now_ms: int) -> Member:
        """One step of the member towards its target (Kafka's CurrentAssignmentBuilder)."""
        if member.state is MemberState.STABLE and member.member_epoch == self.assignment_epoch:
            return member
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.pending_revocation:
                return member  # still waiting for the member to say it let them go
        target = self.target.get(member.member_id, frozenset())
        kept = member.assigned & target
        to_revoke = member.assigned - target
        wanted = target - kept
        free = frozenset(tp for tp in wanted if self.owners.get(tp, member.member_id) == member.member_id)
        if to_revoke:
            nxt = replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept,
                          pending_revocation=to_revoke)
            self.rebalance_deadlines[member.member_id] = (now_ms + member.rebalance_timeout_ms, member.member_epoch)
            return nxt
        self.rebalance_deadlines.pop(member.member_id, None)
        state = MemberState.UNRELEASED_PARTITIONS if free != wanted else MemberState.STABLE
        previous = member.member_epoch if member.member_epoch != self.assignment_epoch else member.previous_epoch
        return replace(member, state=state, assigned=kept | free, pending_revocation=frozenset(),
                       member_epoch=self.assignment_epoch, previous_epoch=previous)

    def _set_current(self, member: Member, out: Output) -> None:
        before = self.members.get(member.member_id)
        if before is not None:
            for tp in before.assigned | before.pending_revocation:
                if self.owners.get(tp) == member.member_id:
                    del self.owners[tp]
        for tp in member.assigned | member.pending_revocation:
            self.owners[tp] = member.member_id
        self.members[member.member_id] = member
        out.records.append(records.current_assignment(self.group_id, member.member_id, member))
        if before is None or before.state is not member.state or before.member_epoch != member.member_epoch:
            out.events.append({"event": "member_state", "member": member.member_id, "state": member.state.value,
                               "member_epoch": member.member_epoch})


def _placeholder(request: HeartbeatRequest) -> Member:
    return Member(member_id=request.member_id, instance_id=request.instance_id, rack_id=None, client_id="",
                  client_host="", subscribed_topics=(), server_assignor=None, rebalance_timeout_ms=0)
