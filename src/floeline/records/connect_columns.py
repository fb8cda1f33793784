"""The table columns a Kafka Connect schema declares (JsonConverter's {"schema",
"payload"} envelope), as Snowflake's connector maps Connect types
(SnowflakeColumnTypeMapper), so a column's type comes from the schema and not from the
batch's values, as for Avro (avro_schema.py):

  int8..int64 -> NUMBER; float/double -> FLOAT; boolean; string -> VARCHAR; bytes ->
  VARCHAR (base64, as floeline writes bytes); Decimal -> VARCHAR; Date -> DATE; Time ->
  TIME (text); Timestamp -> TIMESTAMP_NTZ; array -> ARRAY, map and struct -> VARIANT;
  Debezium's semantic types as debezium_types.py declares them.

FieldTypes (also avro_schema.field_types) is each top-level field's Spark column type
and, for a struct, its own fields' FieldTypes: what a transform that lifts a struct
(ExtractNewRecordState's `after`) needs to keep declaring the columns."""

from __future__ import annotations

from typing import Any

from floeline.records.debezium_types import debezium_column_type

FieldTypes = dict[str, tuple[str, "FieldTypes | None"]]

_CONNECT_LOGICAL = {
    "org.apache.kafka.connect.data.Decimal": "string",
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "string",
    "org.apache.kafka.connect.data.Timestamp": "timestamp_ntz",
}
_CONNECT_TYPES = {
    "int8": "decimal(38,0)", "int16": "decimal(38,0)", "int32": "decimal(38,0)", "int64": "decimal(38,0)",
    "float": "double", "double": "double", "float32": "double", "float64": "double",
    "boolean": "boolean", "string": "string", "bytes": "string",
    "array": "variant", "map": "variant", "struct": "variant",
}


def connect_field_types(schema: Any) -> FieldTypes | None:
    """The FieldTypes of a struct schema; None for any other schema (its value is no row)."""
    if not isinstance(schema, dict) or schema.get("type") != "struct" or schema.get("name") in _NOT_ROWS:
        return None
    types: FieldTypes = {}
    for field in schema.get("fields") or []:
        if isinstance(field, dict) and isinstance(field.get("field"), str):
            types[field["field"]] = (connect_column_type(field), connect_field_types(field))
    return types


def connect_column_type(schema: dict) -> str:
    """The Spark column type of a value of this Connect schema."""
    name = schema.get("name")
    return (debezium_column_type(name) or _CONNECT_LOGICAL.get(name)
            or _CONNECT_TYPES.get(schema.get("type"), "variant"))


# Structs that stand for one value (their column is not a VARIANT of their fields).
_NOT_ROWS = frozenset({"io.debezium.data.VariableScaleDecimal"})


def top_level(types: FieldTypes | None) -> dict[str, str] | None:
    """field -> Spark column type, for the table (None stays None)."""
    return None if types is None else {name: kind for name, (kind, _) in types.items()}
