"""Confluent's wire format (magic byte, schema id) and the base of the converters that
read it with a schema from the registry."""

from __future__ import annotations

from typing import Any

from floeline.records.converters.base import Converted, Converter, ConverterError


def split_wire_format(data: bytes, fmt: str) -> tuple[int, bytes]:
    """(schema id, payload) of Confluent's framing: magic byte 0, 4-byte big-endian id."""
    if len(data) < 5:
        raise ConverterError(f"corrupt {fmt}: {len(data)} bytes, shorter than the 5-byte "
                             f"Confluent wire-format header (magic byte 0 + schema id)")
    if data[0] != 0:
        raise ConverterError(f"corrupt {fmt}: unknown magic byte {data[0]:#04x}, expected 0x00 "
                             f"(the Confluent wire format); was the record written by a "
                             f"Confluent serializer?")
    return int.from_bytes(data[1:5], "big"), data[5:]


class RegistryConverter(Converter):
    format_name = ""
    schema_type = ""

    def __init__(self, registry):
        self.registry = registry

    def _convert(self, data: bytes) -> Converted:
        schema_id, payload = split_wire_format(data, self.format_name)
        schema = self._schema(schema_id)
        return Converted(self._decode(schema_id, schema, payload), schema_id,
                         self._field_types(schema_id, schema))

    def schema_of(self, schema_id: int) -> Any:
        """The parsed schema of `schema_id` (fetched once per process)."""
        return self._schema(schema_id)

    def _schema(self, schema_id: int) -> Any:
        key = (self.schema_type, schema_id)
        cache = getattr(self.registry, "parsed", None)
        if cache is not None and key in cache:
            return cache[key]
        answer = self.registry.by_id(schema_id)
        found = (answer.get("schemaType") or "AVRO").upper()
        if found != self.schema_type:
            raise self.error(f"schema id {schema_id} is a {found} schema, but "
                             f"{self.stage.split()[0]}.converter reads {self.schema_type}")
        parsed = self._parse(schema_id, answer)
        if cache is not None:
            cache[key] = parsed
        return parsed

    def _where(self, schema_id: int) -> str:
        return f"schema id {schema_id}" + (f" at {self.registry.display}"
                                           if hasattr(self.registry, "display") else "")

    def _parse(self, schema_id: int, answer: dict) -> Any:
        raise NotImplementedError

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        raise NotImplementedError

    def _field_types(self, schema_id: int, schema: Any) -> dict | None:
        """The columns the schema declares (connect_columns.FieldTypes), or None."""
        return None
