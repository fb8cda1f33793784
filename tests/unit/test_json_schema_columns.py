"""The columns a JSON Schema declares (Confluent's JsonSchemaConverter), as Snowflake's
connector maps the Connect types it reads: a `number` is a FLOAT column even when the
first values are whole, so later fractions are not rounded into a NUMBER."""

from __future__ import annotations

import json

from floeline.records.converters.json_schema import JsonSchemaConverter, json_schema_field_types

ORDER = {"type": "object", "properties": {
    "id": {"type": "integer", "connect.type": "int32"},
    "amount": {"type": "number"},
    "ok": {"type": ["boolean", "null"]},
    "note": {"oneOf": [{"type": "null"}, {"type": "object", "properties": {
        "text": {"type": "string"}, "lang": {"type": "string"}}}]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "ref": {"$ref": "#/definitions/other"},
    "either": {"type": ["integer", "string"]},
}}


def test_property_types_declare_the_columns():
    types = json_schema_field_types(ORDER)
    assert {name: kind for name, (kind, _) in types.items()} == {
        "id": "decimal(38,0)", "amount": "double", "ok": "boolean", "note": "variant", "tags": "variant"}
    assert types["note"][1] == {"text": ("string", None), "lang": ("string", None)}  # its fields too


def test_a_schema_that_is_not_an_object_declares_nothing():
    assert json_schema_field_types({"type": "string"}) is None
    assert json_schema_field_types({}) is None
    assert json_schema_field_types(True) is None


class Registry:
    parsed: dict = {}

    def __init__(self, answers):
        self.answers, self.parsed = answers, {}

    def by_id(self, schema_id):
        return self.answers[schema_id]


def test_the_converter_gives_each_schema_its_declared_columns_once():
    converter = JsonSchemaConverter(Registry({
        1: {"schema": json.dumps(ORDER), "schemaType": "JSON"},
        2: {"schema": "not json", "schemaType": "JSON"}}))
    first = converter.convert(b"\0\0\0\0\x01" + b'{"id": 1, "amount": 5}')
    again = converter.convert(b"\0\0\0\0\x01" + b'{"id": 2, "amount": 5.25}')
    assert first.value == {"id": 1, "amount": 5} and first.field_types["amount"] == ("double", None)
    assert again.field_types is first.field_types  # one dict per schema id
    assert converter.convert(b"\0\0\0\0\x02" + b'{"id": 3}').field_types is None
