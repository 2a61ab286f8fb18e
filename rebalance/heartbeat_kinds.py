"""What a KIP-848 ConsumerGroupHeartbeat did, in one word, as members log it and the broker counts it.

The classic protocol keeps its rhythm (Heartbeat) apart from its changes (JoinGroup, SyncGroup,
LeaveGroup), so a herd count can leave heartbeats out by name. KIP-848 sends both through one
API: a heartbeat is part of a change when it joins or leaves, when it reports partitions the
member let go or took (the field is sent only when it changed), or when its answer gives the
member an assignment other than the one it holds. Every other heartbeat is `steady`, background
like the classic Heartbeat. The member writes the word in its request event's `detail`; the
coordinator counts the heartbeats that are not steady under `CHANGING_COUNTER`; the summary
leaves steady ones out of a change's cost, so the two counts describe the same requests.
"""

from __future__ import annotations

from collections.abc import Set

API = "ConsumerGroupHeartbeat"
JOIN, LEAVE, ACK, ASSIGNMENT, STEADY = "join", "leave", "ack", "assignment", "steady"
DETAILS = (JOIN, LEAVE, ACK, ASSIGNMENT, STEADY)
CHANGING_COUNTER = f"{API}:changing"     # the broker's count of heartbeats that are not steady


def detail(*, member_epoch: int, owned_reported: bool, assignment: Set | None, held: Set | None) -> str:
    """The word for one heartbeat: `member_epoch` and `owned_reported` from the request, `assignment`
    from its answer (None: unchanged, not sent), `held` what the member held before it."""
    if member_epoch == 0:
        return JOIN
    if member_epoch < 0:
        return LEAVE
    if owned_reported:
        return ACK
    if assignment is not None and set(assignment) != set(held or ()):
        return ASSIGNMENT
    return STEADY
