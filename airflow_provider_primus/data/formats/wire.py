"""The Confluent wire format's framing, shared by its Avro and Protobuf values: byte 0 (the magic
byte), the writer's schema id as 4 big-endian bytes, then (Protobuf only) the path of the message
type within its schema as zig-zag varints, then the payload.

What a Confluent serializer writes is what a producer on such a platform sends; reading the frame
here, once, keeps the Avro and Protobuf decoders' dead-letter reasons the same for the same damage.
"""

from __future__ import annotations

from airflow_provider_primus.data.formats.errors import UndecodableValue

__all__ = ["HEADER", "MAGIC", "message_indexes", "schema_id"]

MAGIC = 0
HEADER = 5  # the magic byte and the schema id


def schema_id(value: bytes) -> int:
    """The frame's schema id; ``UndecodableValue`` for a value that is not framed."""
    if len(value) < HEADER:
        raise UndecodableValue(
            f"not in the Confluent wire format: {len(value)} byte(s), expected at least {HEADER} "
            "(magic byte 0 and a 4-byte schema id)"
        )
    if value[0] != MAGIC:
        raise UndecodableValue(
            f"not in the Confluent wire format: magic byte is 0x{value[0]:02x}, expected 0x00"
        )
    return int.from_bytes(value[1:HEADER], "big")


def _varint(value: bytes, at: int) -> tuple[int, int]:
    """A zig-zag varint at ``at``: its value and where the next one starts."""
    shift, raw = 0, 0
    while True:
        if at >= len(value) or shift > 63:
            raise UndecodableValue("not in the Confluent wire format: the message indexes are truncated")
        byte = value[at]
        raw |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def message_indexes(value: bytes) -> tuple[tuple[int, ...], int]:
    """The Protobuf frame's message path (``(0,)`` for the schema's first message, ``(1, 0)`` for
    the first nested in its second) and where the payload starts. A lone 0 stands for ``(0,)``."""
    schema_id(value)
    count, at = _varint(value, HEADER)
    if count == 0:
        return (0,), at
    if count < 0 or count > len(value):
        raise UndecodableValue(f"not in the Confluent wire format: {count} message indexes")
    path = []
    for _ in range(count):
        index, at = _varint(value, at)
        path.append(index)
    return tuple(path), at
