"""A fuzz input for the wire target: request frames back to back, each with its 4-byte size, as a
client writes them on a connection (and as the stored corpus records them)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

_SIZE = struct.Struct(">i")


def split_frames(data: bytes, max_frames: int = 64) -> Iterator[bytes]:
    """The frames of a stream (size prefixes removed); stops at the first prefix that does not fit."""
    position = 0
    for _ in range(max_frames):
        if len(data) - position < _SIZE.size:
            return
        (size,) = _SIZE.unpack_from(data, position)
        start = position + _SIZE.size
        if size < 0 or start + size > len(data):
            return
        yield data[start:start + size]
        position = start + size


def join_frames(frames: list[bytes]) -> bytes:
    return b"".join(_SIZE.pack(len(frame)) + frame for frame in frames)
