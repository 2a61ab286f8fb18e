"""Kafka wire framing on kafka-python's schema-driven codec, with no sockets and no policy.

A frame is a 4-byte big-endian size followed by that many bytes. A request frame starts with
`api_key:int16, api_version:int16, correlation_id:int32`; a response frame with
`correlation_id:int32`. The rest of the header and the body are encoded and decoded by
kafka-python's generated classes. Used by the broker (requests in, responses out), the classic
client and the broker's peers (requests out, responses in) and the fault proxy (cutting a byte
stream into frames to tell coordination traffic from data).
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin  # noqa: F401 - importing registers the classes we look up below
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
from kafka.protocol.api_message import ApiMessage

# Kafka's own default for socket.request.max.bytes.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

# kafka-python compiles a message's codec on its first use and, while compiling, briefly swaps a shared
# field of the message's schema: two threads compiling at once can build a decoder that fails
# ("object.__new__(X): X is not a type object"). The lab's clients run many threads per process, so coding is
# serialised; the work holds the GIL anyway.
_CODEC_LOCK = threading.Lock()
SIZE_BYTES = 4

_SIZE = struct.Struct(">i")
_REQUEST_HEADER_START = struct.Struct(">hhi")
_RESPONSE_HEADER_START = struct.Struct(">i")


class FrameError(Exception):
    """The bytes cannot be a valid frame: the connection must be closed."""


@dataclass(frozen=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # kafka-python's Request object of that API and version


REQUEST_CLASSES: dict[int, type] = {}
RESPONSE_CLASSES: dict[int, type] = {}


def register_messages() -> None:
    """Add every request and response class kafka-python knows, by API key. Messages defined outside
    kafka-python (this project's KIP-848 APIs, modern.common.consumer_group_messages) call this once their classes exist."""
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls._class_version is not None:  # a per-version wrapper, not the primary class
            continue
        (REQUEST_CLASSES if cls.is_request() else RESPONSE_CLASSES)[cls.API_KEY] = cls


register_messages()


def response_class(api_key: int, api_version: int) -> type:
    """The Response class for an API at a version, e.g. response_class(3, 12) -> MetadataResponse_v12."""
    return RESPONSE_CLASSES[api_key][api_version]


# ---------------------------------------------------------------- sizes and headers


def frame_size(prefix: bytes, max_frame_bytes: int, *, least: int = _REQUEST_HEADER_START.size) -> int:
    """Size announced by a 4-byte frame prefix; rejects sizes no valid frame can have."""
    (size,) = _SIZE.unpack(prefix)
    if size < least or size > max_frame_bytes:
        raise FrameError(f"frame size {size} outside [{least}, {max_frame_bytes}]")
    return size


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id of a request frame (without its size prefix):
    the part of the header every version shares."""
    if len(frame) < _REQUEST_HEADER_START.size:
        raise FrameError("frame shorter than a request header")
    return _REQUEST_HEADER_START.unpack_from(frame)


def peek_response_correlation(frame: bytes) -> int:
    """The correlation id a response frame (without its size prefix) answers."""
    if len(frame) < _RESPONSE_HEADER_START.size:
        raise FrameError("frame shorter than a response header")
    return _RESPONSE_HEADER_START.unpack_from(frame)[0]


class FrameSplitter:
    """Cuts one direction of a byte stream into whole frames (size prefix included).

    Bytes that cannot be Kafka framing (a size below `least`) come back once as `garbage`, with
    everything after them, so a caller that only observes the stream can still pass them on."""

    def __init__(self, *, least: int = _RESPONSE_HEADER_START.size) -> None:
        self.least = least
        self.buffer = bytearray()

    def feed(self, data: bytes) -> tuple[list[bytes], bytes]:
        self.buffer += data
        frames: list[bytes] = []
        while len(self.buffer) >= SIZE_BYTES:
            (size,) = _SIZE.unpack_from(self.buffer)
            if size < self.least:
                garbage = bytes(self.buffer)
                self.buffer.clear()
                return frames, garbage
            if len(self.buffer) < SIZE_BYTES + size:
                break
            frames.append(bytes(self.buffer[:SIZE_BYTES + size]))
            del self.buffer[:SIZE_BYTES + size]
        return frames, b""


# ---------------------------------------------------------------- requests and responses


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Frame a versioned Request (e.g. `HeartbeatRequest[4](...)`) with its request header."""
    with _CODEC_LOCK:
        request.with_header(correlation_id=correlation_id, client_id=client_id)
        return bytes(request.encode(header=True, framed=True))


def decode_response(api_key: int, api_version: int, frame: bytes, expected_correlation_id: int) -> Any:
    """Decode one response frame (without its size prefix) to the request's Response class."""
    with _CODEC_LOCK:
        response = response_class(api_key, api_version).decode(frame, header=True)
    if response.header.correlation_id != expected_correlation_id:
        raise FrameError(f"response to {response.header.correlation_id} where {expected_correlation_id} was due")
    return response


def decode_request(frame: bytes) -> DecodedRequest:
    """Decode one request frame (without its size prefix). Raises FrameError on anything malformed."""
    api_key, api_version, correlation_id = peek_header(frame)
    request_class = REQUEST_CLASSES.get(api_key)
    if request_class is None:
        raise FrameError(f"unknown API key {api_key}")
    if not 0 <= api_version <= request_class.max_version:
        raise FrameError(f"{request_class.name} v{api_version} is not a version the codec knows")
    try:
        request = request_class[api_version].decode(frame, header=True)
    except Exception as error:  # the codec raises many types on garbage; all mean the same here
        raise FrameError(f"cannot decode {request_class.name} v{api_version}: {error!r}") from error
    null_field = _null_where_not_allowed(request, api_version)
    if null_field:
        raise FrameError(f"{request_class.name} v{api_version}: {null_field} is null, which the schema forbids")
    return DecodedRequest(api_key, api_version, correlation_id, request.header.client_id, request)


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Frame a Response object (its version already set) with the response header."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


_CHECKED_FOR_NULL = {"string", "bytes"}  # not uuid: the codec decodes the all-zero uuid as None
_ARRAYS_CHECKED_FOR_NULL = {f"[]{kind}" for kind in _CHECKED_FOR_NULL}


def _null_where_not_allowed(container: Any, version: int) -> str | None:
    """The first field decoded as null although its schema says it cannot be (the codec lets a
    -1 length through), so handlers may rely on arrays being lists."""
    for field in container._struct._fields:
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        value = getattr(container, field.name)
        if value is None:
            if field.type_str in _CHECKED_FOR_NULL or field.is_array() or field.is_struct():
                if not field.nullable_for_version_q(version):
                    return field.name
        elif field.is_struct():
            found = _null_where_not_allowed(value, version)
            if found:
                return f"{field.name}.{found}"
        elif field.is_struct_array():
            for item in value:
                found = _null_where_not_allowed(item, version)
                if found:
                    return f"{field.name}[].{found}"
        elif field.type_str in _ARRAYS_CHECKED_FOR_NULL and any(item is None for item in value):
            return f"{field.name}[]"  # an element of an array of strings or bytes is never nullable
    return None
