"""The error codes of the group protocol: one table, shared by the coordinator and the client.

kafka-python already keeps Kafka's error table as exception classes with their wire codes
(`kafka.errors`), so the lab reuses it. This module gives the classes the names Kafka's own
`Errors` enum uses, so code reads `errors.ILLEGAL_GENERATION` and never compares integers.
"""

from __future__ import annotations

import kafka.errors as _kafka

ErrorClass = type[_kafka.BrokerResponseError]

NONE: ErrorClass = _kafka.NoError
UNKNOWN_SERVER_ERROR: ErrorClass = _kafka.UnknownError
UNKNOWN_TOPIC_OR_PARTITION: ErrorClass = _kafka.UnknownTopicOrPartitionError
REQUEST_TIMED_OUT: ErrorClass = _kafka.RequestTimedOutError
COORDINATOR_LOAD_IN_PROGRESS: ErrorClass = _kafka.CoordinatorLoadInProgressError
COORDINATOR_NOT_AVAILABLE: ErrorClass = _kafka.CoordinatorNotAvailableError
NOT_COORDINATOR: ErrorClass = _kafka.NotCoordinatorError
ILLEGAL_GENERATION: ErrorClass = _kafka.IllegalGenerationError
INCONSISTENT_GROUP_PROTOCOL: ErrorClass = _kafka.InconsistentGroupProtocolError
INVALID_GROUP_ID: ErrorClass = _kafka.InvalidGroupIdError
UNKNOWN_MEMBER_ID: ErrorClass = _kafka.UnknownMemberIdError
INVALID_SESSION_TIMEOUT: ErrorClass = _kafka.InvalidSessionTimeoutError
REBALANCE_IN_PROGRESS: ErrorClass = _kafka.RebalanceInProgressError
INVALID_REQUEST: ErrorClass = _kafka.InvalidRequestError
GROUP_ID_NOT_FOUND: ErrorClass = _kafka.GroupIdNotFoundError
MEMBER_ID_REQUIRED: ErrorClass = _kafka.MemberIdRequiredError
GROUP_MAX_SIZE_REACHED: ErrorClass = _kafka.GroupMaxSizeReachedError
FENCED_INSTANCE_ID: ErrorClass = _kafka.FencedInstanceIdError
UNSUPPORTED_VERSION: ErrorClass = _kafka.UnsupportedVersionError
OFFSET_METADATA_TOO_LARGE: ErrorClass = _kafka.OffsetMetadataTooLargeError
# KIP-848's consumer groups
FENCED_MEMBER_EPOCH: ErrorClass = _kafka.FencedMemberEpochError
STALE_MEMBER_EPOCH: ErrorClass = _kafka.StaleMemberEpochError
UNRELEASED_INSTANCE_ID: ErrorClass = _kafka.UnreleasedInstanceIdError
UNSUPPORTED_ASSIGNOR: ErrorClass = _kafka.UnsupportedAssignorError

# Errors of a coordinator that is moving or loading: a request that got one may succeed when tried again.
COORDINATOR_ERRORS: frozenset[ErrorClass] = frozenset(
    {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS}
)
# Of those, the ones after which a client looks the coordinator up again (Kafka's clients mark it
# unknown). COORDINATOR_LOAD_IN_PROGRESS is retried at the same broker: it is the coordinator, loading.
COORDINATOR_MOVED: frozenset[ErrorClass] = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


def for_code(code: int) -> ErrorClass:
    """The error class of a wire code (0 is NONE)."""
    return _kafka.for_code(code)


def name_of(error: ErrorClass | int | None) -> str | None:
    """Kafka's name for an error ("ILLEGAL_GENERATION"); None for no error."""
    if error is None:
        return None
    cls = for_code(error) if isinstance(error, int) else error
    return None if cls is NONE else cls.message


class GroupError(Exception):
    """A group API answered with an error; `error` is the class from the table above."""

    def __init__(self, error: ErrorClass, api: str = "") -> None:
        super().__init__(f"{api}: {name_of(error)}" if api else name_of(error))
        self.error = error
        self.api = api
