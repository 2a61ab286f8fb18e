"""The Kafka framing the broker's modules use; it lives in `rebalance.kafka_frames`, shared
with the classic client and the fault proxy, and is re-exported here for broker modules."""

from rebalance.kafka_frames import (  # noqa: F401
    DEFAULT_MAX_FRAME_BYTES,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    DecodedRequest,
    FrameError,
    decode_request,
    encode_response,
    frame_size,
    peek_header,
    response_class,
)
