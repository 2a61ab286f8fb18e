"""ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69) on kafka-python's codec.

kafka-python builds a message class from a JSON definition in Kafka's format; it ships none for
these two APIs, so this project writes its own (in `modern/common/schemas/`) and hands them to the same
loader. Importing this module registers the classes with `rebalance.kafka_frames`, which then decodes
and encodes them like any other API.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from rebalance.kafka_frames import register_messages

_SCHEMAS = "modern.common.schemas"


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_SCHEMAS):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_SCHEMAS):
    pass


register_messages()
