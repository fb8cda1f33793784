"""Confluent's Protobuf format: message indexes, .proto schemas compiled once, messages
-> plain Python values."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from floeline.errors import ConfigError, missing_extra
from floeline.records.record import Float32
from floeline.records.converters.base import ConverterError
from floeline.records.converters.connect_json import EPOCH
from floeline.records.converters.wire_format import RegistryConverter


def _read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ConverterError("corrupt Protobuf: the message-index varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ConverterError("corrupt Protobuf: message-index varint too long")
    return (result >> 1) ^ -(result & 1), pos


def read_message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """Confluent's message-index array (zigzag varints: count, then the indexes; a
    single 0 means [0], the file's first message) and the protobuf bytes after it."""
    count, pos = _read_zigzag(payload, 0)
    if count == 0:
        return [0], payload[pos:]
    if count < 0 or count > 100:
        raise ConverterError(f"corrupt Protobuf: message-index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _read_zigzag(payload, pos)
        indexes.append(index)
    return indexes, payload[pos:]


@dataclass
class _ProtoSchema:
    file_proto: Any  # FileDescriptorProto of the registered schema
    pool: Any  # DescriptorPool holding it and its imports
    classes: dict  # message-index tuple -> message class


class ProtobufConverter(RegistryConverter):
    format_name = "Protobuf"
    schema_type = "PROTOBUF"

    def _parse(self, schema_id: int, answer: dict) -> Any:
        from google.protobuf import descriptor_pb2, descriptor_pool

        files = {f"floeline_schema_{schema_id}.proto": answer["schema"]}
        self._add_references(answer.get("references") or [], files)
        descriptor_set = _compile_proto(files, f"floeline_schema_{schema_id}.proto",
                                        self.error, self._where(schema_id))
        fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
        pool = descriptor_pool.DescriptorPool()
        for file_proto in fds.file:
            pool.Add(file_proto)
        return _ProtoSchema(fds.file[-1], pool, {})

    def _add_references(self, references: list, files: dict) -> None:
        for ref in references:
            if ref["name"] in files:
                continue
            answer = self.registry.by_subject(ref["subject"], ref["version"])
            files[ref["name"]] = answer["schema"]
            self._add_references(answer.get("references") or [], files)

    def _message_class(self, schema_id: int, schema: _ProtoSchema, indexes: list[int]):
        key = tuple(indexes)
        if key not in schema.classes:
            from google.protobuf import message_factory

            proto, names = schema.file_proto, []
            container = proto.message_type
            for index in indexes:
                # declared messages only: Confluent counts message types as written in
                # the schema, and protoc's generated map-entry types are not among them
                declared = [m for m in container if not m.options.map_entry]
                if not 0 <= index < len(declared):
                    raise self.error(f"corrupt Protobuf: message index {indexes} not in "
                                     f"{self._where(schema_id)}")
                names.append(declared[index].name)
                container = declared[index].nested_type
            full = ".".join(([proto.package] if proto.package else []) + names)
            descriptor = schema.pool.FindMessageTypeByName(full)
            schema.classes[key] = message_factory.GetMessageClass(descriptor)
        return schema.classes[key]

    def _decode(self, schema_id: int, schema: _ProtoSchema, payload: bytes) -> Any:
        indexes, body = read_message_indexes(payload)
        cls = self._message_class(schema_id, schema, indexes)
        try:
            message = cls.FromString(body)
        except Exception as exc:
            raise self.error(f"corrupt Protobuf (does not match {self._where(schema_id)}, "
                             f"message {cls.DESCRIPTOR.full_name}): {exc}") from None
        return protobuf_to_python(message)


def _compile_proto(files: dict[str, str], main: str, error, where: str) -> bytes:
    """Compile .proto texts with protoc (grpcio-tools) to a FileDescriptorSet holding
    `main` last and its imports (well-known types included) before it. protoc runs
    in a subprocess so its error messages can be captured."""
    try:
        import importlib.resources

        import grpc_tools
        well_known = str(importlib.resources.files(grpc_tools) / "_proto")
    except ImportError:
        raise ConfigError(missing_extra("grpc_tools", "protobuf", "the Protobuf converter (protoc "
                                        "compiles the registry's .proto schemas)")) from None
    with tempfile.TemporaryDirectory(prefix="floeline-proto-") as tmp:
        for name, text in files.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        out = os.path.join(tmp, "schema.desc")
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"-I{well_known}",
               "--include_imports", f"--descriptor_set_out={out}", main]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not os.path.exists(out):
            message = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            raise error(f"{where} is not a valid Protobuf schema: {message}")
        with open(out, "rb") as handle:
            return handle.read()


_WRAPPERS = {f"google.protobuf.{n}Value" for n in
             ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}


def protobuf_to_python(message) -> Any:
    """A protobuf message as Kafka Connect's ProtobufConverter would give it, without
    schema: every field by name (proto3 scalars with their defaults; unset message
    fields and unset fields with presence as None), enums by name, repeated as lists,
    maps as dicts; google.protobuf.Timestamp -> datetime UTC, google.type.Date -> date,
    wrappers -> their value, Struct/Value/ListValue -> their JSON value. Numbers as
    Confluent's converter holds them in Java: uint64/fixed64 in a (signed) long, so
    2^64-1 is -1; float as a float32 (Float32)."""
    full = message.DESCRIPTOR.full_name
    if full == "google.protobuf.Timestamp":
        return EPOCH + dt.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    if full == "google.type.Date":
        return dt.date(message.year, message.month, message.day)
    if full in _WRAPPERS:
        return _proto_scalar(message.value, message.DESCRIPTOR.fields_by_name["value"])
    if full in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"):
        from google.protobuf import json_format
        return json.loads(json_format.MessageToJson(message))
    out = {}
    for field in message.DESCRIPTOR.fields:
        out[field.name] = _proto_field(message, field)
    return out


def _proto_field(message, field) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    value = getattr(message, field.name)
    is_repeated = getattr(field, "is_repeated", None)
    repeated = is_repeated if is_repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED
    if repeated:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            return {k: _proto_scalar(v, value_field) for k, v in value.items()}
        return [_proto_scalar(v, field) for v in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _proto_scalar(value, field)


def _proto_scalar(value, field) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return protobuf_to_python(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    if field.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        # Confluent's converter holds them in a Java long: 2^64-1 is -1
        return value - (1 << 64) if value >= (1 << 63) else value
    if field.type == FieldDescriptor.TYPE_FLOAT:
        return Float32(value)
    return value
