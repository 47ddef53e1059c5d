"""Protobuf values: every message is one serialized message of a type named by the source, its
descriptors from a compiled ``FileDescriptorSet`` (``protoc --include_imports --descriptor_set_out``).

A message becomes a dict of its top-level fields, the shape a JSON event has, so screening and
transforms see no difference: a field with presence (``optional``, proto2, a message) that is not
set is None (so a missing label is missing, not 0), an enum is its value's name, a nested message a
dict and a repeated field a list (both refused as features by the stream's rules, as in JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message

from airflow_provider_primus.contracts.formats import ProtobufFormat
from airflow_provider_primus.data.formats.errors import FormatFileError, UndecodableValue
from airflow_provider_primus.data.formats.wire import message_indexes

__all__ = ["ProtobufDecoder", "index_path", "load_message_descriptor"]


def load_message_descriptor(settings: ProtobufFormat) -> Descriptor:
    """The message's descriptor from the descriptor set; ``FormatFileError`` naming the field at fault."""
    path = settings.descriptor_file
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise FormatFileError(
            "protobuf.descriptor_file", f"cannot read {path!r}: {exc.strerror or exc}"
        ) from None
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except DecodeError as exc:
        raise FormatFileError(
            "protobuf.descriptor_file",
            f"{path!r} is not a compiled FileDescriptorSet "
            f"(protoc --include_imports --descriptor_set_out): {exc}",
        ) from None
    if not files.file:
        raise FormatFileError("protobuf.descriptor_file", f"{path!r} holds no file descriptors")
    pool = descriptor_pool.DescriptorPool()
    try:
        for proto in files.file:
            pool.Add(proto)
    except Exception as exc:  # the pool raises TypeError or its own error for conflicting files
        raise FormatFileError("protobuf.descriptor_file", f"{path!r} is not consistent: {exc}") from None
    try:
        return pool.FindMessageTypeByName(settings.message)
    except KeyError:
        known = sorted(m.full_name for p in files.file for m in _messages(pool, p))
        raise FormatFileError(
            "protobuf.message",
            f"no message {settings.message!r} in {path!r}; it has: {', '.join(known[:20]) or 'none'}",
        ) from None


def _messages(
    pool: descriptor_pool.DescriptorPool, proto: descriptor_pb2.FileDescriptorProto
) -> list[Descriptor]:
    try:
        found = pool.FindFileByName(proto.name)
    except KeyError:
        return []
    return list(found.message_types_by_name.values())


class ProtobufDecoder:
    def __init__(self, settings: ProtobufFormat) -> None:
        self.descriptor = load_message_descriptor(settings)
        self._cls: type[Message] = message_factory.GetMessageClass(self.descriptor)
        self._what = self.descriptor.full_name
        self._framed = settings.wire_format == "confluent"
        self._path = index_path(self.descriptor)
        # (name, has presence, kind) per top-level field, looked at once, not per message.
        self._fields: list[tuple[str, bool, str]] = []
        for field in self.descriptor.fields:
            if _repeated(field):
                kind = "repeated"
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                kind = "message"
            elif field.type == FieldDescriptor.TYPE_ENUM:
                kind = "enum"
            else:
                kind = "scalar"
            self._fields.append((field.name, bool(field.has_presence), kind))

    def decode(self, value: bytes) -> dict[str, Any]:
        if self._framed:
            path, start = message_indexes(value)
            if path != self._path:
                raise UndecodableValue(
                    f"the Confluent frame names message index path {list(path)}, not {self._what}'s "
                    f"{list(self._path)}"
                )
            value = value[start:]
        try:
            message = self._cls.FromString(value)
        except DecodeError as exc:
            raise UndecodableValue(f"not a valid protobuf {self._what}: {exc}") from None
        event: dict[str, Any] = {}
        for name, presence, kind in self._fields:
            if presence and not message.HasField(name):
                event[name] = None
                continue
            item = getattr(message, name)
            if kind == "scalar":
                event[name] = item
            elif kind == "enum":
                enum = self.descriptor.fields_by_name[name].enum_type
                known = enum.values_by_number.get(item)
                event[name] = known.name if known is not None else item
            elif kind == "message":
                event[name] = MessageToDict(item)
            else:
                event[name] = [MessageToDict(v) if isinstance(v, Message) else v for v in item]
        return event


def index_path(descriptor: Descriptor) -> tuple[int, ...]:
    """Where a message sits in its file, as a Confluent frame names it: its index among the file's
    top-level messages, then among each enclosing message's nested ones (declaration order, read
    from the file's own descriptor proto)."""
    names: list[str] = []
    current: Descriptor | None = descriptor
    while current is not None:
        names.append(current.name)
        current = current.containing_type
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor.file.CopyToProto(proto)
    path: list[int] = []
    level = list(proto.message_type)
    for name in reversed(names):
        index = [m.name for m in level].index(name)
        path.append(index)
        level = list(level[index].nested_type)
    return tuple(path)


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)
