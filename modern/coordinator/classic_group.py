"""One consumer group as Kafka's classic group coordinator sees it, as a pure state machine.

No sockets, threads or clocks here (sans-I/O): every call takes `now_ms`, and the caller
owns time. A request that Kafka answers later (a JoinGroup waiting for the join phase to
end, a follower's SyncGroup waiting for the leader) is *parked*: the caller passes an
opaque `token` and receives `(token, result)` in the `Output.replies` of whichever later
call or `tick()` completes it. `next_deadline()` says when `tick()` must run next.

The states and their transitions are written once, in TRANSITIONS, and every change goes
through `_transition`. The rules follow Kafka's ClassicGroup / GroupMetadataManager.
The group keeps its committed offsets; who may commit is `offset_metadata_manager`'s to say.
"""

from __future__ import annotations

import heapq
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator.records.offset_commit import OffsetAndMetadata


class ClassicGroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = ClassicGroupState
# Every allowed move, in one place. Anything else is a bug and raises.
TRANSITIONS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.DEAD: frozenset(),
}


@dataclass(frozen=True, kw_only=True)
class GroupConfig:
    """Broker-side settings, named after Kafka's `group.*` broker configs."""

    initial_rebalance_delay_ms: int = 3000       # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000           # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000      # group.max.session.timeout.ms
    max_size: int | None = None                  # group.max.size (None: unbounded)


# ---------------------------------------------------------------- requests (inputs)


@dataclass(frozen=True, kw_only=True)
class JoinGroup:
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]     # (assignor name, subscription bytes), preferred first
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False        # JoinGroup v4+: answer MEMBER_ID_REQUIRED first
    supports_skip_assignment: bool = False       # JoinGroup v9+: a static leader may skip the assignment


@dataclass(frozen=True, kw_only=True)
class SyncGroup:
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None             # v5+: checked when given
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = field(default_factory=dict)  # only the leader's is non-empty


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


# ---------------------------------------------------------------- results (outputs)


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, kw_only=True)
class JoinResult:
    error: ErrorClass
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()       # only the leader's result lists the members
    skip_assignment: bool = False


@dataclass(frozen=True, kw_only=True)
class SyncResult:
    error: ErrorClass
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorClass


@dataclass(frozen=True)
class LeaveResult:
    error: ErrorClass
    members: tuple[tuple[LeavingMember, ErrorClass], ...] = ()


@dataclass(frozen=True, kw_only=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes = b""                        # empty unless the group is Stable
    assignment: bytes = b""                      # empty unless the group is Stable


@dataclass(frozen=True, kw_only=True)
class GroupDescription:
    """What DescribeGroups shows: the protocol and each member's data only once the group is Stable."""

    state: ClassicGroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


class RebalanceReason(Enum):
    """Why a group starts a rebalance: the causes Kafka's coordinator names when it prepares one ("Preparing to
    rebalance group ... (reason: ...)", `prepareRebalance`), each worded below as Kafka words it."""

    NEW_MEMBER = "new-member"
    METADATA_CHANGED = "metadata-changed"                      # a follower rejoined with other protocols
    LEADER_REJOINED = "leader-rejoined"                        # the leader's JoinGroup always starts one
    STATIC_MEMBER_PROTOCOL_CHANGED = "static-member-protocol-changed"
    STATIC_MEMBER_REJOINED = "static-member-rejoined"          # replaced while the group completes a rebalance
    MEMBER_LEFT = "member-left"
    SESSION_EXPIRED = "session-expired"
    PENDING_SYNC_EXPIRED = "pending-sync-expired"              # members that did not send SyncGroup in time


_REASON_WORDING = {
    RebalanceReason.NEW_MEMBER: "Adding new member {}",
    RebalanceReason.METADATA_CHANGED: "Updating metadata for member {}",
    RebalanceReason.LEADER_REJOINED: "Leader {} re-joining group",
    RebalanceReason.STATIC_MEMBER_PROTOCOL_CHANGED: "Group's selectedProtocol will change because static member {} "
                                                    "joined with change of protocol",
    RebalanceReason.STATIC_MEMBER_REJOINED: "Updating metadata for static member {}",
    RebalanceReason.MEMBER_LEFT: "Removing member {} on LeaveGroup",
    RebalanceReason.SESSION_EXPIRED: "removing member {} on heartbeat expiration",
    RebalanceReason.PENDING_SYNC_EXPIRED: "Removing {} on pending sync request expiration",
}


@dataclass(frozen=True)
class RebalanceCause:
    reason: RebalanceReason
    members: tuple[str, ...]                     # the member ids it names

    def describe(self) -> str:
        return _REASON_WORDING[self.reason].format(", ".join(self.members))


@dataclass(frozen=True)
class Transition:
    from_state: ClassicGroupState
    to_state: ClassicGroupState
    generation: int
    members: int
    reason: str
    cause: RebalanceCause | None = None          # set on every move to PreparingRebalance


@dataclass
class Output:
    """What one call produced. The caller persists, then delivers the replies."""

    replies: list[tuple[object, object]] = field(default_factory=list)
    store_group: bool = False                    # the group's metadata changed: write it to the log
    transitions: list[Transition] = field(default_factory=list)


# ---------------------------------------------------------------- members


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: object | None = None             # a parked JoinGroup
    sync_token: object | None = None             # a parked SyncGroup
    session_deadline_ms: int = 0

    @property
    def awaiting_reply(self) -> bool:
        return self.join_token is not None or self.sync_token is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")


def random_member_id(prefix: str) -> str:
    """Kafka's member id: client id (or group instance id) + "-" + a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


# ---------------------------------------------------------------- the group


class ClassicGroup:
    def __init__(
        self,
        group_id: str,
        config: GroupConfig = GroupConfig(),
        *,
        now_ms: int = 0,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self._new_member_id = new_member_id
        self.state = ClassicGroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}               # insertion order = join order
        self.static_members: dict[str, str] = {}           # group instance id -> member id
        self.pending_members: dict[str, int] = {}          # ids handed out with MEMBER_ID_REQUIRED -> expiry
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self._support: Counter[str] = Counter()            # protocol name -> members supporting it
        # Join phase timer. The first join of an empty group is Kafka's InitialDelayedJoin: the delay being
        # waited, what is left of the rebalance timeout after it, and whether a newcomer came meanwhile.
        self._join_deadline_ms: int | None = None
        self._initial_join = False
        self._initial_delay_ms = 0
        self._initial_delay_remaining_ms = 0
        self._new_member_added = False
        # Members that got a JoinGroup answer but have not sent SyncGroup yet.
        self._pending_sync: set[str] = set()
        self._sync_deadline_ms: int | None = None
        self._sessions: list[tuple[int, str]] = []         # heap of (deadline, member id); stale entries skipped
        self._out = Output()

    # ------------------------------------------------------------ public API

    def handle_join(self, request: JoinGroup, now_ms: int, token: object) -> Output:
        if not self._session_timeout_allowed(request.session_timeout_ms):
            self._reply(token, JoinResult(error=errors.INVALID_SESSION_TIMEOUT, member_id=request.member_id))
        elif not self._accepts_joining(request.member_id):
            self._refuse_full(request.member_id, now_ms, token)
        elif (error := self._validate_join(request)) is not None:
            self._reply(token, JoinResult(error=error, member_id=request.member_id))
        elif request.member_id == "":
            self._join_unknown_member(request, now_ms, token)
        else:
            self._join_known_member(request, now_ms, token)
        return self._drain()

    def handle_sync(self, request: SyncGroup, now_ms: int, token: object) -> Output:
        error = self._validate_member(request.member_id, request.group_instance_id, request.generation_id)
        if error is None and not self._protocol_matches(request.protocol_type, request.protocol_name):
            error = errors.INCONSISTENT_GROUP_PROTOCOL
        if error is None and self.state is S.PREPARING_REBALANCE:
            error = errors.REBALANCE_IN_PROGRESS
        if error is not None:
            self._reply(token, SyncResult(error=error))
            return self._drain()
        member = self.members[request.member_id]
        self._pending_sync.discard(member.member_id)
        self._touch(member, now_ms)
        if self.state is S.STABLE:
            self._reply(token, self._sync_result(member))
        else:  # CompletingRebalance: park until the leader's assignment arrives
            if member.sync_token is not None:  # a retried SyncGroup supersedes the parked one
                self._reply(member.sync_token, SyncResult(error=errors.REBALANCE_IN_PROGRESS))
            member.sync_token = token
            if member.member_id == self.leader_id:
                for other in self.members.values():
                    other.assignment = request.assignments.get(other.member_id, b"")
                self._transition(S.STABLE, now_ms, "leader synced")
                self._out.store_group = True
                for other in self.members.values():
                    if other.sync_token is not None:
                        self._reply(other.sync_token, self._sync_result(other))
                        other.sync_token = None
                        self._touch(other, now_ms)
        return self._drain()

    def handle_heartbeat(self, request: Heartbeat, now_ms: int) -> Output:
        error = self._validate_member(request.member_id, request.group_instance_id, request.generation_id)
        if error is None:
            self._touch(self.members[request.member_id], now_ms)  # counts even while rebalancing
            if self.state is S.PREPARING_REBALANCE:
                error = errors.REBALANCE_IN_PROGRESS
        self._reply(None, HeartbeatResult(error or errors.NONE))
        return self._drain()

    def handle_leave(self, leaving: list[LeavingMember], now_ms: int) -> Output:
        if self.state is S.DEAD:
            self._reply(None, LeaveResult(errors.COORDINATOR_NOT_AVAILABLE))
            return self._drain()
        outcomes = []
        for who in leaving:
            outcomes.append((who, self._leave_one(who, now_ms)))
        self._reply(None, LeaveResult(errors.NONE, tuple(outcomes)))
        return self._drain()

    def keep_alive(self, member_id: str, now_ms: int) -> None:
        """A sign of life from a member outside Heartbeat (an offset commit past its fence): its session
        starts over (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
        member = self.members.get(member_id)
        if member is not None:
            self._touch(member, now_ms)

    def describe(self) -> GroupDescription:
        stable = self.state is S.STABLE
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(self.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupDescription(state=self.state, protocol_type=self.protocol_type or "",
                                protocol_name=(self.protocol_name or "") if stable else "", members=members)

    def next_deadline(self) -> int | None:
        """The earliest time `tick()` has something to do. Session entries that a later heartbeat or commit made
        stale are dropped here as they reach the heap's top, so a busy group's clock is not woken for nothing."""
        candidates = [t for t in (self._join_deadline_ms, self._sync_deadline_ms) if t is not None]
        candidates.extend(self.pending_members.values())
        while self._sessions and self._stale(*self._sessions[0]):
            heapq.heappop(self._sessions)
        if self._sessions:
            candidates.append(self._sessions[0][0])
        return min(candidates, default=None)

    def tick(self, now_ms: int) -> Output:
        """Run every timer that is due: join phase end, sync timeout, session and pending-id expiry."""
        if self.state is S.DEAD:
            return self._drain()
        if self._join_deadline_ms is not None and now_ms >= self._join_deadline_ms:
            self._join_deadline_reached(now_ms)
        if self._sync_deadline_ms is not None and now_ms >= self._sync_deadline_ms:
            self._sync_deadline_reached(now_ms)
        for member_id, expiry in list(self.pending_members.items()):
            if now_ms >= expiry:
                del self.pending_members[member_id]
                self._maybe_complete_join(now_ms)
        while self._sessions and self._sessions[0][0] <= now_ms:
            deadline, member_id = heapq.heappop(self._sessions)
            if self._stale(deadline, member_id):
                continue
            member = self.members[member_id]
            if member.awaiting_reply:
                continue  # kept alive while its join/sync is parked
            self._remove_member(member, now_ms, RebalanceCause(RebalanceReason.SESSION_EXPIRED, (member_id,)))
        return self._drain()

    def _stale(self, deadline: int, member_id: str) -> bool:
        """A session entry of a member gone or since given a later deadline."""
        member = self.members.get(member_id)
        return member is None or member.session_deadline_ms != deadline

    def unload(self, now_ms: int) -> Output:
        """This broker stopped being the coordinator: the group dies here; parked requests learn it."""
        for member in self.members.values():
            if member.join_token is not None:
                self._reply(member.join_token, JoinResult(error=errors.NOT_COORDINATOR, member_id=member.member_id))
            if member.sync_token is not None:
                self._reply(member.sync_token, SyncResult(error=errors.NOT_COORDINATOR))
            member.join_token = member.sync_token = None
        if self.state is not S.DEAD:
            self._transition(S.DEAD, now_ms, "unloaded")
        self._join_deadline_ms = self._sync_deadline_ms = None
        return self._drain()

    def restore(
        self,
        *,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        leader_id: str | None,
        members: list[Member],
        now_ms: int,
    ) -> None:
        """Rebuild from a GroupMetadata record (loading the log): Stable with members, else Empty."""
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id if members else None
        self.members = {}
        self.static_members = {}
        self._sessions = []
        self._support = Counter()
        for member in members:
            self.members[member.member_id] = member
            self._count_protocols(member, +1)
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
            self._touch(member, now_ms)
        self.state = S.STABLE if members else S.EMPTY
        self.state_timestamp_ms = now_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------ join

    def _session_timeout_allowed(self, session_timeout_ms: int) -> bool:
        return self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms

    def _accepts_joining(self, member_id: str) -> bool:
        """`group.max.size`, checked before anything else about the join (even MEMBER_ID_REQUIRED).

        While the group rebalances, what counts is the members already waiting in the join phase:
        a member that has not rejoined yet can be pushed out by a newcomer that came first.
        Otherwise a known member is always let in and a new one only below the limit."""
        limit = self.config.max_size
        if limit is None or self.state in (S.EMPTY, S.DEAD):
            return True
        member = self.members.get(member_id)
        if self.state is S.PREPARING_REBALANCE:
            awaiting = sum(1 for m in self.members.values() if m.join_token is not None)
            return (member is not None and member.join_token is not None) or awaiting < limit
        return member is not None or len(self.members) < limit

    def _refuse_full(self, member_id: str, now_ms: int, token: object) -> None:
        """The group is full: a known member asking is dropped from it, and the answer names no member."""
        self.pending_members.pop(member_id, None)
        member = self.members.get(member_id)
        if member is not None:
            self._drop(member)
        self._reply(token, JoinResult(error=errors.GROUP_MAX_SIZE_REACHED, member_id=""))
        self._maybe_complete_join(now_ms)

    def _validate_join(self, request: JoinGroup) -> ErrorClass | None:
        if self.state is S.DEAD:
            return errors.COORDINATOR_NOT_AVAILABLE
        if not self._supports_protocols(request.protocol_type, request.protocols):
            return errors.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _join_unknown_member(self, request: JoinGroup, now_ms: int, token: object) -> None:
        instance_id = request.group_instance_id
        if instance_id is not None:
            new_id = self._new_member_id(instance_id)
            old_id = self.static_members.get(instance_id)
            if old_id is None:
                self._add_member_and_rebalance(new_id, request, now_ms, token)
            else:
                self._replace_static_member(old_id, new_id, request, now_ms, token)
            return
        new_id = self._new_member_id(request.client_id)
        if request.require_known_member_id:
            # v4+: hand out the id first; the member rejoins with it (no rebalance yet).
            self.pending_members[new_id] = now_ms + request.session_timeout_ms
            self._reply(token, JoinResult(error=errors.MEMBER_ID_REQUIRED, member_id=new_id))
            return
        self._add_member_and_rebalance(new_id, request, now_ms, token)

    def _join_known_member(self, request: JoinGroup, now_ms: int, token: object) -> None:
        member_id, instance_id = request.member_id, request.group_instance_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._add_member_and_rebalance(member_id, request, now_ms, token)
            return
        error = self.validate_identity(member_id, instance_id)
        if error is not None:
            self._reply(token, JoinResult(error=error, member_id=member_id))
            return
        member = self.members[member_id]
        changed = member.protocols != request.protocols
        if self.state is S.PREPARING_REBALANCE:
            self._update_member(member, request, token)
            self._maybe_complete_join(now_ms)
        elif self.state is S.COMPLETING_REBALANCE and not changed:
            # It missed its answer (or retried): give it the current generation again.
            self._reply(token, self._join_result(member, include_members=member_id == self.leader_id))
        elif self.state is S.STABLE and not changed and member_id != self.leader_id:
            self._reply(token, self._join_result(member, include_members=False))
        else:  # the leader rejoining, or new metadata: a new rebalance
            self._update_member(member, request, token)
            leader = self.state is S.STABLE and member_id == self.leader_id   # Kafka looks at the leader first
            reason = RebalanceReason.LEADER_REJOINED if leader else RebalanceReason.METADATA_CHANGED
            self._prepare_rebalance(now_ms, RebalanceCause(reason, (member_id,)))
        self._touch(member, now_ms)

    def _add_member_and_rebalance(self, member_id: str, request: JoinGroup, now_ms: int, token: object) -> None:
        if not self.members:
            self.protocol_type = request.protocol_type
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            join_token=token,
        )
        self.members[member_id] = member
        self._count_protocols(member, +1)
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        self._touch(member, now_ms)
        if self.state is S.PREPARING_REBALANCE and self.generation_id == 0:
            self._new_member_added = True   # as Kafka: only a group's very first join is extended
        if self.state is S.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms)
        else:
            self._prepare_rebalance(now_ms, RebalanceCause(RebalanceReason.NEW_MEMBER, (member_id,)))

    def _replace_static_member(
        self, old_id: str, new_id: str, request: JoinGroup, now_ms: int, token: object
    ) -> None:
        """A static member came back with a new member id: it takes over the old one's place."""
        leader_before = self.leader_id
        old = self.members.pop(old_id)
        if old.join_token is not None:
            self._reply(old.join_token, JoinResult(error=errors.FENCED_INSTANCE_ID, member_id=old_id))
        if old.sync_token is not None:
            self._reply(old.sync_token, SyncResult(error=errors.FENCED_INSTANCE_ID))
        old.join_token = old.sync_token = None
        old.member_id = new_id
        self.members[new_id] = old
        self.static_members[request.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self._pending_sync:
            self._pending_sync.discard(old_id)
            self._pending_sync.add(new_id)
        protocol_before = self.protocol_name
        self._update_member(old, request, None)
        self._touch(old, now_ms)
        if self.state is S.STABLE:
            if self._select_protocol() == protocol_before:
                # The group would pick the same protocol: no rebalance (Kafka does not compare the
                # metadata here); persist the new id and answer with the current generation.
                self._out.store_group = True
                if request.supports_skip_assignment:
                    is_leader = new_id == self.leader_id
                    self._reply(token, self._join_result(old, include_members=is_leader, skip_assignment=is_leader))
                else:
                    # Before v9 a returning static leader would compute an assignment the stable group
                    # ignores; naming the old leader id keeps it from thinking it leads.
                    self._reply(token, self._join_result(old, include_members=False, leader=leader_before))
                return
            old.join_token = token
            self._prepare_rebalance(now_ms, RebalanceCause(RebalanceReason.STATIC_MEMBER_PROTOCOL_CHANGED, (new_id,)))
        elif self.state is S.COMPLETING_REBALANCE:
            old.join_token = token
            self._prepare_rebalance(now_ms, RebalanceCause(RebalanceReason.STATIC_MEMBER_REJOINED, (new_id,)))
        else:  # PreparingRebalance
            old.join_token = token
            self._maybe_complete_join(now_ms)

    def _update_member(self, member: Member, request: JoinGroup, token: object | None) -> None:
        self._count_protocols(member, -1)
        member.protocols = request.protocols
        self._count_protocols(member, +1)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        if token is not None:
            if member.join_token is not None and member.join_token is not token:
                # A retried JoinGroup supersedes the parked one: release it rather than leak it.
                self._reply(member.join_token, JoinResult(error=errors.REBALANCE_IN_PROGRESS,
                                                          member_id=member.member_id))
            member.join_token = token

    def _prepare_rebalance(self, now_ms: int, cause: RebalanceCause) -> None:
        if self.state is S.COMPLETING_REBALANCE:
            # Followers parked in SyncGroup must rejoin.
            for member in self.members.values():
                if member.sync_token is not None:
                    self._reply(member.sync_token, SyncResult(error=errors.REBALANCE_IN_PROGRESS))
                    member.sync_token = None
        for member in self.members.values():
            member.assignment = b""
        self._pending_sync.clear()
        self._sync_deadline_ms = None
        if self.state is S.EMPTY:
            # The whole group.initial.rebalance.delay.ms, even beyond the rebalance timeout.
            delay = self.config.initial_rebalance_delay_ms
            self._initial_join = True
            self._initial_delay_ms = delay
            self._initial_delay_remaining_ms = max(self.rebalance_timeout_ms - delay, 0)
            self._join_deadline_ms = now_ms + delay
        else:
            self._initial_join = False
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms
        self._transition(S.PREPARING_REBALANCE, now_ms, cause.describe(), cause)
        self._maybe_complete_join(now_ms)  # e.g. the only member rejoined, or the last one left

    def _maybe_complete_join(self, now_ms: int) -> None:
        """Outside the initial delay, the join phase ends as soon as every known member rejoined."""
        if self.state is not S.PREPARING_REBALANCE or self._initial_join:
            return
        if all(m.join_token is not None for m in self.members.values()) and not self.pending_members:
            self._complete_join(now_ms)

    def _join_deadline_reached(self, now_ms: int) -> None:
        remaining = self._initial_delay_remaining_ms
        extends = self.config.initial_rebalance_delay_ms > 0   # with no delay, an extension would end at once
        if self._initial_join and self._new_member_added and remaining != 0 and extends:
            # InitialDelayedJoin.onComplete: one more delay, at most what is left; what is left then shrinks by
            # the delay just waited (so the whole wait is the larger of the delay and the rebalance timeout).
            # The flag is cleared only here, as in Kafka.
            self._new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            self._initial_delay_remaining_ms = max(remaining - self._initial_delay_ms, 0)
            self._initial_delay_ms = delay
            self._join_deadline_ms = now_ms + delay
            return
        self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        self._join_deadline_ms = None
        self._initial_join = False
        for member in list(self.members.values()):
            if member.join_token is None and member.group_instance_id is None:
                self._drop(member)  # a dynamic member that did not rejoin in time
        joined = [m for m in self.members.values() if m.join_token is not None]
        if self.members and not joined:
            # Only static members that did not rejoin are left: wait another round.
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms
            return
        if self.leader_id not in self.members or self.members[self.leader_id].join_token is None:
            self.leader_id = joined[0].member_id if joined else None
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self._transition(S.EMPTY, now_ms, "join phase ended with no members")
            self._out.store_group = True
            return
        self.protocol_name = self._select_protocol()
        self._transition(S.COMPLETING_REBALANCE, now_ms, "join phase complete")
        for member in joined:
            is_leader = member.member_id == self.leader_id
            self._reply(member.join_token, self._join_result(member, include_members=is_leader))
            member.join_token = None
        for member in self.members.values():   # static members that did not rejoin too (onCompleteJoin)
            self._touch(member, now_ms)
        self._pending_sync = set(self.members)
        self._sync_deadline_ms = now_ms + self.rebalance_timeout_ms

    def _sync_deadline_reached(self, now_ms: int) -> None:
        self._sync_deadline_ms = None
        if self.state not in (S.COMPLETING_REBALANCE, S.STABLE) or not self._pending_sync:
            return
        laggards = [self.members[m] for m in sorted(self._pending_sync) if m in self.members]
        self._pending_sync.clear()
        for member in laggards:
            self._drop(member)
        if laggards:
            laggard_ids = tuple(member.member_id for member in laggards)
            self._prepare_rebalance(now_ms, RebalanceCause(RebalanceReason.PENDING_SYNC_EXPIRED, laggard_ids))

    # ------------------------------------------------------------ leave and removal

    def _leave_one(self, who: LeavingMember, now_ms: int) -> ErrorClass:
        if who.group_instance_id is not None:
            mapped = self.static_members.get(who.group_instance_id)
            if mapped is None:
                return errors.UNKNOWN_MEMBER_ID
            if who.member_id and who.member_id != mapped:
                return errors.FENCED_INSTANCE_ID
            self._remove_member(self.members[mapped], now_ms, RebalanceCause(RebalanceReason.MEMBER_LEFT, (mapped,)))
            return errors.NONE
        if who.member_id in self.pending_members:
            del self.pending_members[who.member_id]
            self._maybe_complete_join(now_ms)
            return errors.NONE
        member = self.members.get(who.member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        self._remove_member(member, now_ms, RebalanceCause(RebalanceReason.MEMBER_LEFT, (who.member_id,)))
        return errors.NONE

    def _remove_member(self, member: Member, now_ms: int, cause: RebalanceCause) -> None:
        self._drop(member)
        if self.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, cause)
        elif self.state is S.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms)

    def _drop(self, member: Member) -> None:
        if member.join_token is not None:
            self._reply(member.join_token, JoinResult(error=errors.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        if member.sync_token is not None:
            self._reply(member.sync_token, SyncResult(error=errors.UNKNOWN_MEMBER_ID))
        del self.members[member.member_id]
        self._count_protocols(member, -1)
        self._pending_sync.discard(member.member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member.member_id:
            rejoined = [m.member_id for m in self.members.values() if m.join_token is not None]
            self.leader_id = (rejoined or list(self.members) or [None])[0]

    # ------------------------------------------------------------ validation

    def _validate_member(self, member_id: str, instance_id: str | None, generation_id: int) -> ErrorClass | None:
        """Heartbeat/SyncGroup checks, in Kafka's order: dead, unknown or fenced, generation."""
        if self.state is S.DEAD:
            return errors.COORDINATOR_NOT_AVAILABLE
        error = self.validate_identity(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != self.generation_id:
            return errors.ILLEGAL_GENERATION
        return None

    def validate_identity(self, member_id: str, instance_id: str | None) -> ErrorClass | None:
        """With an instance id, the instance decides (unknown, or mapped to another member id: fenced)."""
        if instance_id is not None:
            mapped = self.static_members.get(instance_id)
            if mapped is None:
                return errors.UNKNOWN_MEMBER_ID
            return None if mapped == member_id else errors.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return errors.UNKNOWN_MEMBER_ID
        return None

    def _protocol_matches(self, protocol_type: str | None, protocol_name: str | None) -> bool:
        if protocol_type is not None and protocol_type != self.protocol_type:
            return False
        return protocol_name is None or protocol_name == self.protocol_name

    def _supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return any(self._support[name] == len(self.members) for name, _ in protocols)

    def _select_protocol(self) -> str | None:
        """Kafka's vote: candidates supported by everyone; each member votes for its first candidate."""
        members = list(self.members.values())
        if not members:
            return None
        candidates = set.intersection(*({name for name, _ in m.protocols} for m in members))
        votes = Counter(next(name for name, _ in m.protocols if name in candidates) for m in members)
        preference = [name for name, _ in members[0].protocols]
        return max(votes, key=lambda name: (votes[name], -preference.index(name)))

    # ------------------------------------------------------------ helpers

    def _join_result(self, member: Member, *, include_members: bool, skip_assignment: bool = False,
                     leader: str | None = None) -> JoinResult:
        listed = ()
        if include_members:
            listed = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()
            )
        return JoinResult(
            error=errors.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=(leader if leader is not None else self.leader_id) or "",
            members=listed,
            skip_assignment=skip_assignment,
        )

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(
            error=errors.NONE,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignment=member.assignment,
        )

    def _count_protocols(self, member: Member, sign: int) -> None:
        """Keep "how many members support each protocol" current, so a join checks it in O(1)."""
        for name in {name for name, _ in member.protocols}:
            self._support[name] += sign

    def _touch(self, member: Member, now_ms: int) -> None:
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        heapq.heappush(self._sessions, (member.session_deadline_ms, member.member_id))

    def _transition(self, to_state: ClassicGroupState, now_ms: int, reason: str,
                    cause: RebalanceCause | None = None) -> None:
        if to_state not in TRANSITIONS[self.state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {to_state.value}")
        self._out.transitions.append(Transition(self.state, to_state, self.generation_id, len(self.members), reason,
                                                cause))
        self.state = to_state
        self.state_timestamp_ms = now_ms

    def _reply(self, token: object, result: object) -> None:
        self._out.replies.append((token, result))

    def _drain(self) -> Output:
        out, self._out = self._out, Output()
        return out
