"""Hypothesis strategies for well-formed group requests carrying values no well-behaved client sends.

Each strategy draws a `Hostile`: one request (kafka-python's classes, or the lab's KIP-848 messages),
what Kafka answers to it where that is certain (`expect`: the error codes allowed, per entry where
the API answers per entry), and whether the coordinator may park it (a JoinGroup waiting for its group).
Sizes are drawn as classes (none, one, a few, ten thousand) and the lists built from them, so a draw
of 10,000 members costs hypothesis one choice, not 10,000.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)

from modern.common.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

INT32_MAX = 2**31 - 1
TIMEOUTS = (-1, 0, 1, 5_999, 6_000, 45_000, 1_800_000, 1_800_001, INT32_MAX)
MANY = (0, 1, 3, 100, 10_000)
ID_LENGTHS = (0, 1, 36, 249, 100_000)
OFFSET_METADATA_MAX_BYTES = 4096          # Kafka's offset.metadata.max.bytes
KNOWN_ASSIGNORS = ("uniform", "range")
# Kafka's defaults for group.min.session.timeout.ms and group.max.session.timeout.ms
MIN_SESSION_TIMEOUT_MS, MAX_SESSION_TIMEOUT_MS = 6_000, 1_800_000
RECORD_STRING_MAX_BYTES = 32_767          # a __consumer_offsets record keeps ids with a 2-byte length
SHORT_IDS: dict[str, str] = {}
ID_POOL = 8


@dataclass(frozen=True)
class Target:
    """The groups the generator keeps well-behaved members in, so hostile requests meet real state."""

    classic_group: str
    classic_member: str
    classic_generation: int
    consumer_group: str
    consumer_member: str
    consumer_epoch: int
    topic: str


@dataclass
class Hostile:
    kind: str
    request: Any
    expect: dict[str, frozenset[int]] = field(default_factory=dict)   # where: allowed error codes
    parks: bool = False
    fresh_group: str | None = None       # a classic group this request may create (its state is checked)
    fresh_consumer_group: str | None = None

    def __repr__(self) -> str:  # hypothesis prints failing batches: keep 10,000-member requests readable
        text = repr(self.request)
        return f"Hostile({self.kind}, {text[:300]}{'...' if len(text) > 300 else ''})"


def _too_long(text: str | None) -> bool:
    return text is not None and len(text.encode()) > RECORD_STRING_MAX_BYTES


def _codes(*names: str) -> frozenset[int]:
    """Error codes by Kafka's names (kafka.errors' table)."""
    return frozenset(_BY_NAME[name] for name in names)


_BY_NAME = {cls.message: cls.errno for cls in Errors.BrokerResponseError.__subclasses__()} | {"NONE": 0,
                                                                                             "UNKNOWN_SERVER_ERROR": -1}


def ident(draw, prefix: str, flexible: bool = True) -> str:
    """An id of 0 bytes to 100 KB; a version before the API's flexible ones has 2-byte string lengths.
    Ids come from a pool of ID_POOL per kind and length: the groups hostile requests make are bounded, as a
    long run needs for its memory check to mean something (Kafka keeps a group with offsets for days)."""
    length = draw(st.sampled_from(ID_LENGTHS if flexible else ID_LENGTHS[:-1] + (32_767,)))
    if length == 0:
        return ""
    if length == 1:   # one character per kind, so that a classic and a consumer group never share one by chance
        return SHORT_IDS.setdefault(prefix, chr(ord("A") + len(SHORT_IDS)))
    stem = f"{prefix}-{draw(st.integers(0, ID_POOL - 1))}-"
    return (stem * (length // len(stem) + 1))[:length]


def _far_generation(draw, current: int) -> int:
    return draw(st.sampled_from((-1, 0, current - 1000, current + 1, current + 1000, INT32_MAX, -INT32_MAX - 1)))


@st.composite
def join_group(draw, target: Target) -> Hostile:
    version = draw(st.integers(5, 9))
    group = ident(draw, "hostile-join", version >= 6)
    session, rebalance = draw(st.sampled_from(TIMEOUTS)), draw(st.sampled_from(TIMEOUTS))
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name=f"assignor-{i}", metadata=b"\x00" * (i % 7))
                 for i in range(draw(st.sampled_from(MANY)))]
    member = draw(st.sampled_from(("", "", "absent")))
    request = JoinGroupRequest[version](
        group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
        member_id=member and ident(draw, "absent-member", version >= 6), group_instance_id=None,
        protocol_type=draw(st.sampled_from(("consumer", "", "x" * 300))), protocols=protocols, reason="hostile")
    if not group:
        expected = _codes("INVALID_GROUP_ID")
    elif not MIN_SESSION_TIMEOUT_MS <= session <= MAX_SESSION_TIMEOUT_MS:
        expected = _codes("INVALID_SESSION_TIMEOUT")
    elif request.member_id:   # a member id the group never gave out (a group it may not even have)
        expected = _codes("UNKNOWN_MEMBER_ID")
        if not protocols or not request.protocol_type:   # a group that exists checks its protocols first
            expected |= _codes("INCONSISTENT_GROUP_PROTOCOL")
    elif not protocols or not request.protocol_type:
        expected = _codes("INCONSISTENT_GROUP_PROTOCOL")
    else:
        expected = _codes("MEMBER_ID_REQUIRED")    # v4+: the first join only hands out an id
    return Hostile("JoinGroup", request, {"error": expected}, fresh_group=group or None)


@st.composite
def sync_group(draw, target: Target) -> Hostile:
    version = draw(st.integers(3, 5))
    absent = [ident(draw, "absent-member", version >= 4) for _ in range(draw(st.sampled_from((0, 1, 3))))]
    absent += [f"absent-{i}" for i in range(draw(st.sampled_from((0, 100, 10_000))))]
    assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=b"\x00\x03junk")
                   for m in absent]
    to_steady = draw(st.booleans())
    member = ident(draw, "absent-member", version >= 4) or "absent"
    request = SyncGroupRequest[version](
        group_id=target.classic_group if to_steady else ident(draw, "hostile-sync", version >= 4) or "x",
        generation_id=_far_generation(draw, target.classic_generation), member_id=member, group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=assignments)
    return Hostile("SyncGroup", request, {"error": _codes("UNKNOWN_MEMBER_ID")})


@st.composite
def heartbeat(draw, target: Target) -> Hostile:
    own = draw(st.booleans())
    generation = _far_generation(draw, target.classic_generation)
    if generation == target.classic_generation:
        generation += 1
    version = draw(st.integers(0, 4))
    request = HeartbeatRequest[version](
        group_id=target.classic_group, generation_id=generation,
        member_id=target.classic_member if own else ident(draw, "absent-member", version >= 4) or "absent",
        group_instance_id=None)
    expected = _codes("ILLEGAL_GENERATION") if own else _codes("UNKNOWN_MEMBER_ID")
    return Hostile("Heartbeat", request, {"error": expected})


@st.composite
def offset_commit(draw, target: Target) -> Hostile:
    """To the steady group from a stranger or a stale generation (refused whole), or as a simple commit to a
    group of its own (negative offsets taken as Kafka takes them, metadata past the limit refused per partition)."""
    version = draw(st.integers(2, 8))
    simple = draw(st.booleans())
    lengths = [draw(st.sampled_from((0, 10, OFFSET_METADATA_MAX_BYTES, OFFSET_METADATA_MAX_BYTES + 1,
                                     100_000 if version >= 8 else 32_767)))
               for _ in range(draw(st.integers(1, 4)))]
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    partitions = [topic_cls.OffsetCommitRequestPartition(
        partition_index=index, committed_offset=draw(st.sampled_from((-INT32_MAX, -1, 0, 5, 2**62))),
        committed_leader_epoch=-1, commit_timestamp=-1, committed_metadata="m" * length)
        for index, length in enumerate(lengths)]
    topic = ident(draw, "absent-topic", version >= 8) or target.topic
    if simple:
        group, generation, member = ident(draw, "hostile-commit", version >= 8), -1, ""   # "" too: Kafka takes it
        # Kafka keeps every committed offset (for days), its record key naming group and topic. A long name
        # paired with every other name would pile up hundreds of MB of such state in an hour, which the
        # memory check would then read as a leak: a long name is paired with one fixed other name.
        if len(topic) >= RECORD_STRING_MAX_BYTES:     # the long ids: at that limit or past it
            group = "hostile-commit-long-topic"
        elif len(group) >= RECORD_STRING_MAX_BYTES:
            topic = target.topic
    else:
        group = target.classic_group
        stale = draw(st.booleans())
        generation = _far_generation(draw, target.classic_generation) if stale else target.classic_generation
        if generation == target.classic_generation and stale:
            generation += 1
        member = target.classic_member if stale else ident(draw, "absent-member", version >= 8) or "absent"
    request = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
        retention_time_ms=-1, topics=[topic_cls(name=topic, partitions=partitions)])
    expect = {}
    unwritable = simple and (_too_long(group) or _too_long(topic))
    for index, length in enumerate(lengths):
        if unwritable:   # its record cannot be written: Kafka's serialisation fails the request
            expect[f"{topic}-{index}"] = _codes("UNKNOWN_SERVER_ERROR", "OFFSET_METADATA_TOO_LARGE")
        elif not simple:
            refused = "ILLEGAL_GENERATION" if member == target.classic_member else "UNKNOWN_MEMBER_ID"
            expect[f"{topic}-{index}"] = _codes(refused)
        elif length > OFFSET_METADATA_MAX_BYTES:
            expect[f"{topic}-{index}"] = _codes("OFFSET_METADATA_TOO_LARGE")
        else:
            expect[f"{topic}-{index}"] = _codes("NONE")
    return Hostile("OffsetCommit", request, expect, fresh_group=group if simple else None)


@st.composite
def leave_group(draw, target: Target) -> Hostile:
    count = draw(st.sampled_from((1, 3, 100, 10_000)))
    members = [LeaveGroupRequest.MemberIdentity(member_id=f"absent-{i}-{uuid.uuid4().hex[:6]}", group_instance_id=None,
                                                reason="hostile") for i in range(count)]
    request = LeaveGroupRequest[draw(st.integers(3, 5))](group_id=target.classic_group, members=members)
    expect = {"error": _codes("NONE")}
    expect.update({m.member_id: _codes("UNKNOWN_MEMBER_ID") for m in members[:50]})
    return Hostile("LeaveGroup", request, expect)


@st.composite
def describe_groups(draw, target: Target) -> Hostile:
    count = draw(st.sampled_from((1, 100, 10_000)))
    version = draw(st.integers(0, 5))
    groups = [ident(draw, "described", version >= 5) for _ in range(min(count, 3))]
    groups += [f"described-{i}" for i in range(count)]
    request = DescribeGroupsRequest[version](groups=groups + [target.classic_group],
                                                              include_authorized_operations=False)
    # Kafka describes any group id, "" included, as Dead without an error (GroupCoordinator.handleDescribeGroup)
    return Hostile("DescribeGroups", request, {"groups": _codes("NONE")})


@st.composite
def consumer_group_heartbeat(draw, target: Target) -> Hostile:
    version = draw(st.integers(0, 1))
    shape = draw(st.sampled_from(("join", "join", "steady", "absent")))
    subscribed = [f"absent-topic-{i}" for i in range(draw(st.sampled_from(MANY)))]
    owned = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=uuid.uuid4(), partitions=list(range(n)))
             for n in draw(st.sampled_from(((), (1,), (3, 1000))))]
    assignor = draw(st.sampled_from((None, "uniform", "range", "no-such-assignor", "")))
    rebalance = draw(st.sampled_from(TIMEOUTS))
    group = ident(draw, "hostile-cg")
    if shape == "steady":
        group = target.consumer_group
    fields = dict(group_id=group, instance_id=None, rack_id=None, rebalance_timeout_ms=rebalance,
                  subscribed_topic_names=subscribed, server_assignor=assignor, topic_partitions=owned)
    if version >= 1:
        fields.update(subscribed_topic_regex=None, client_assignors=[])
    if shape == "join":
        fields.update(member_id=str(uuid.uuid4()) if version >= 1 else "", member_epoch=0)
    elif shape == "steady":
        fields.update(member_id=target.consumer_member,
                      member_epoch=draw(st.sampled_from((target.consumer_epoch + 1000, INT32_MAX))))
    else:
        fields.update(member_id=ident(draw, "absent-member") or "absent", member_epoch=draw(st.integers(1, INT32_MAX)))
    request = ConsumerGroupHeartbeatRequest[version](**fields)
    expected = _heartbeat_expectation(shape, group, rebalance, subscribed, owned, assignor)
    if expected == _codes("NONE") and (_too_long(group) or _too_long(fields["member_id"])):
        expected = _codes("UNKNOWN_SERVER_ERROR")
    return Hostile("ConsumerGroupHeartbeat", request, {"error": expected},
                   fresh_consumer_group=group if shape == "join" and group else None)


def _heartbeat_expectation(shape, group, rebalance, subscribed, owned, assignor) -> frozenset[int]:
    """Kafka's checks in its order (GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid),
    then the member's own (unknown member, fenced epoch)."""
    if not group:
        return _codes("INVALID_REQUEST")
    if shape == "join" and (rebalance == -1 or owned or not subscribed):
        return _codes("INVALID_REQUEST")
    if assignor is not None and assignor not in KNOWN_ASSIGNORS:
        return _codes("UNSUPPORTED_ASSIGNOR")
    if shape == "steady":
        return _codes("FENCED_MEMBER_EPOCH")
    if shape == "absent":
        return _codes("UNKNOWN_MEMBER_ID")
    return _codes("NONE")


@st.composite
def consumer_group_describe(draw, target: Target) -> Hostile:
    count = draw(st.sampled_from((1, 100, 10_000)))
    request = ConsumerGroupDescribeRequest[draw(st.integers(0, 1))](
        group_ids=[f"described-{i}" for i in range(count)] + [target.consumer_group],
        include_authorized_operations=False)
    return Hostile("ConsumerGroupDescribe", request, {"steady-described": _codes("NONE")})


KINDS = (join_group, sync_group, heartbeat, offset_commit, leave_group, describe_groups, consumer_group_heartbeat,
         consumer_group_describe)


def batches(target: Target, size: int) -> st.SearchStrategy[list[Hostile]]:
    return st.lists(st.one_of(*(kind(target) for kind in KINDS)), min_size=size, max_size=size)
