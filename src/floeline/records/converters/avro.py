"""Avro: from the schema registry (AvroConverter), or with the writer schema in the
config (avro.schema, no registry)."""

from __future__ import annotations

import io
import json
from typing import Any

from floeline.records.avro_schema import field_types, plain_value
from floeline.records.converters.base import Converted, Converter, ConverterError
from floeline.records.debezium_types import DebeziumValueError
from floeline.records.converters.wire_format import RegistryConverter


class StrictReader(io.BytesIO):
    """A BytesIO whose short reads raise: a corrupt length prefix is then an error
    instead of a silently truncated string."""

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise EOFError("negative length")
        data = super().read(size)
        if len(data) < size:
            raise EOFError(f"needed {size} bytes, {len(data)} left")
        return data


class AvroConverter(RegistryConverter):
    format_name = "Avro"
    schema_type = "AVRO"

    def __init__(self, registry):
        super().__init__(registry)
        self._types: dict[int, dict | None] = {}

    def _field_types(self, schema_id: int, schema: Any) -> dict | None:
        if schema_id not in self._types:
            self._types[schema_id] = field_types(schema)
        return self._types[schema_id]

    def _parse(self, schema_id: int, answer: dict) -> Any:
        import fastavro

        named: dict = {}
        try:
            self._add_references(answer.get("references") or [], named, set())
            return fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)
        except ConverterError:
            raise
        except Exception as exc:
            raise self.error(f"{self._where(schema_id)} is not a valid Avro schema: "
                             f"{type(exc).__name__}: {exc}") from None

    def _add_references(self, references: list, named: dict, seen: set) -> None:
        import fastavro

        for ref in references:
            key = (ref["subject"], ref["version"])
            if key in seen:
                continue
            seen.add(key)
            answer = self.registry.by_subject(ref["subject"], ref["version"])
            self._add_references(answer.get("references") or [], named, seen)
            fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        import fastavro

        reader = StrictReader(payload)
        try:
            value = fastavro.schemaless_reader(reader, schema, None)
        except Exception as exc:
            raise self.error(f"corrupt Avro (does not match {self._where(schema_id)}): "
                             f"{type(exc).__name__}: {exc}") from None
        left = len(payload) - reader.tell()
        if left:
            raise self.error(f"corrupt Avro (does not match {self._where(schema_id)}): "
                             f"{left} bytes left over after the record")
        try:
            return plain_value(schema, value)
        except DebeziumValueError as exc:
            raise self.error(f"a Debezium-typed field of {self._where(schema_id)}: {exc}") from None


class ConfigSchemaAvroConverter(Converter):
    """Avro without a schema registry: each record is a plain Avro binary datum written
    with the schema given in `<key|value>.converter.avro.schema` (no wire-format
    header), as producers that share a fixed schema write it."""

    def __init__(self, schema: Any):
        self.schema = schema
        self.field_types = field_types(schema)

    def _convert(self, data: bytes) -> Converted:
        import fastavro

        reader = StrictReader(data)
        try:
            value = fastavro.schemaless_reader(reader, self.schema, None)
        except Exception as exc:
            raise self.error(f"corrupt Avro (does not match the configured avro.schema): "
                             f"{type(exc).__name__}: {exc}") from None
        if len(data) - reader.tell():
            raise self.error(f"corrupt Avro (does not match the configured avro.schema): "
                             f"{len(data) - reader.tell()} bytes left over after the record")
        try:
            return Converted(plain_value(self.schema, value), field_types=self.field_types)
        except DebeziumValueError as exc:
            raise self.error(f"a Debezium-typed field of the configured avro.schema: {exc}") from None
