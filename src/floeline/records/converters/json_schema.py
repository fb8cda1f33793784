"""Confluent's JSON Schema format."""

from __future__ import annotations

import json
from typing import Any

from floeline.records.connect_columns import FieldTypes
from floeline.records.converters.connect_json import parse_json
from floeline.records.converters.wire_format import RegistryConverter

# JSON Schema type -> the column Snowflake's connector makes of the Connect type
# Confluent's JsonSchemaConverter reads it as (integer -> INT64 -> NUMBER, number ->
# FLOAT64 -> FLOAT, object -> STRUCT or MAP -> VARIANT, array -> ARRAY).
_COLUMNS = {"integer": "decimal(38,0)", "number": "double", "string": "string", "boolean": "boolean",
            "object": "variant", "array": "variant"}


class JsonSchemaConverter(RegistryConverter):
    """Confluent's JSON Schema format: wire header + JSON text. The schema is fetched
    (an unknown id is an error) but the payload is not validated against it; the
    schema's property types declare the columns (json_schema_field_types), so a
    `number` whose first values happen to be whole is a FLOAT column, not a NUMBER
    that would round the fractions of later ones."""

    format_name = "JSON Schema"
    schema_type = "JSON"

    def __init__(self, registry):
        super().__init__(registry)
        self._types: dict[int, FieldTypes | None] = {}

    def _parse(self, schema_id: int, answer: dict) -> Any:
        try:
            return json.loads(answer.get("schema") or "{}")
        except ValueError:
            return {}  # not JSON: nothing declared (the payload is still read)

    def _field_types(self, schema_id: int, schema: Any) -> FieldTypes | None:
        if schema_id not in self._types:  # one dict per schema (decode.py caches by it)
            self._types[schema_id] = json_schema_field_types(schema)
        return self._types[schema_id]

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        return parse_json(payload, self.stage.split()[0])


def json_schema_field_types(schema: Any) -> FieldTypes | None:
    """The FieldTypes (connect_columns.py) of an object schema's properties, those of
    a type it names plainly (`"type": "integer"`, `["integer", "null"]`, or `oneOf` a
    type and null); None for any other schema. A property declared otherwise ($ref,
    allOf, several types) is left out: its column comes from its values."""
    if not isinstance(schema, dict) or _plain_type(schema) != "object" \
            or not isinstance(schema.get("properties"), dict):
        return None
    types: FieldTypes = {}
    for name, prop in schema["properties"].items():
        kind = _plain_type(prop) if isinstance(prop, dict) else None
        if kind in _COLUMNS:
            types[name] = (_COLUMNS[kind], json_schema_field_types(_without_null(prop)))
    return types


def _plain_type(schema: dict) -> str | None:
    """The one non-null type a schema names, else None."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 and isinstance(kinds[0], str) else None
    if isinstance(kind, str):
        return kind
    branches = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(branches, list):
        others = [b for b in branches if isinstance(b, dict) and b.get("type") != "null"]
        if len(others) == 1 and len(branches) == 2:
            return _plain_type(others[0])
    return None


def _without_null(schema: dict) -> dict:
    """The non-null branch of a `oneOf` with null (the schema itself otherwise)."""
    branches = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(branches, list) and "type" not in schema:
        others = [b for b in branches if isinstance(b, dict) and b.get("type") != "null"]
        if len(others) == 1:
            return others[0]
    if isinstance(schema.get("type"), list):
        return {**schema, "type": _plain_type(schema)}
    return schema
