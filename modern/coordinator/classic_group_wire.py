"""The classic group APIs on the wire, every version: requests to the group's terms and answers back.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups. The group metadata manager
decides (which group, which error); this module only translates, so that the version differences
(v1's rebalance timeout, v3's batched leaves and instance ids, v5's protocol checks, v9's skipped
assignment) stay out of its way.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator.classic_group import (
    GroupDescription,
    Heartbeat,
    JoinGroup,
    JoinResult,
    LeavingMember,
    SyncGroup,
    SyncResult,
)

# ---------------------------------------------------------------- JoinGroup / SyncGroup


def join_request(ctx: Any, request: Any) -> JoinGroup:
    version = ctx.api_version
    return JoinGroup(
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )


def join_response(version: int, result: JoinResult) -> Any:
    return JoinGroupResponse[version](
        throttle_time_ms=0,
        error_code=result.error.errno,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                      metadata=m.metadata)
            for m in result.members
        ],
    )


def sync_request(ctx: Any, request: Any) -> SyncGroup:
    version = ctx.api_version
    return SyncGroup(
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )


def sync_response(version: int, result: SyncResult) -> Any:
    return SyncGroupResponse[version](throttle_time_ms=0, error_code=result.error.errno,
                                      protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                                      assignment=result.assignment)


# ---------------------------------------------------------------- Heartbeat / LeaveGroup


def heartbeat_request(ctx: Any, request: Any) -> Heartbeat:
    return Heartbeat(member_id=request.member_id, generation_id=request.generation_id,
                     group_instance_id=request.group_instance_id if ctx.api_version >= 3 else None)


def heartbeat_response(version: int, error: ErrorClass) -> Any:
    return HeartbeatResponse[version](throttle_time_ms=0, error_code=error.errno)


def leaving_members(version: int, request: Any) -> list[LeavingMember]:
    """v3+ names several members (each with its instance id); before, the one member that sends it."""
    if version >= 3:
        return [LeavingMember(member_id=m.member_id, group_instance_id=m.group_instance_id) for m in request.members]
    return [LeavingMember(member_id=request.member_id)]


def leave_response(version: int, error: ErrorClass | None,
                   outcomes: list[tuple[LeavingMember, ErrorClass]]) -> Any:
    if version < 3 and error is None:
        error = outcomes[0][1]  # one member: its error is the answer
    return LeaveGroupResponse[version](
        throttle_time_ms=0,
        error_code=(error or errors.NONE).errno,
        members=[LeaveGroupResponse.MemberResponse(member_id=who.member_id,
                                                   group_instance_id=who.group_instance_id,
                                                   error_code=member_error.errno)
                 for who, member_error in outcomes],
    )


# ---------------------------------------------------------------- DescribeGroups / ListGroups


def described_group(group_id: str, description: GroupDescription) -> Any:
    described_cls = DescribeGroupsResponse.DescribedGroup
    member_cls = described_cls.DescribedGroupMember
    return described_cls(
        error_code=errors.NONE.errno, group_id=group_id, group_state=description.state.value,
        protocol_type=description.protocol_type, protocol_data=description.protocol_name,
        members=[member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id,
                            client_id=m.client_id, client_host=m.client_host,
                            member_metadata=m.metadata, member_assignment=m.assignment)
                 for m in description.members])


def dead_group(group_id: str, error: ErrorClass | None) -> Any:
    """What DescribeGroups shows for a group it cannot describe: Dead, with the error if any."""
    return DescribeGroupsResponse.DescribedGroup(error_code=(error or errors.NONE).errno, group_id=group_id,
                                                 group_state="Dead", protocol_type="", protocol_data="",
                                                 members=[])


def describe_response(version: int, described: list) -> Any:
    return DescribeGroupsResponse[version](throttle_time_ms=0, groups=described)


def listed_group(group_id: str, protocol_type: str, state: str, group_type: str) -> Any:
    return ListGroupsResponse.ListedGroup(group_id=group_id, protocol_type=protocol_type, group_state=state,
                                          group_type=group_type)


def list_response(version: int, listed: list) -> Any:
    return ListGroupsResponse[version](throttle_time_ms=0, error_code=errors.NONE.errno,
                                       groups=sorted(listed, key=lambda g: g.group_id))
