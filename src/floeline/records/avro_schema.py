"""What an Avro schema says beyond the bytes, as Kafka Connect's AvroConverter (Confluent's
AvroData) turns it into a Connect schema and Snowflake's connector reads that schema:

  plain_value    a value fastavro read, in record.py's types: `float` fields as Float32
                 (Connect FLOAT32: Java floats, printed at float32 precision), UUIDs as
                 text
  column_types   the table column of each top-level field of a record schema, from the
                 field's type and not from the values (a `float` holding NaN is still a
                 FLOAT column), as Snowflake's SnowflakeColumnTypeMapper maps Connect types

Debezium's semantic types (a "connect.name" such as io.debezium.time.MicroTimestamp on
a long) are read and declared as debezium_types.py says: a DATE, a TIMESTAMP_NTZ...,
not the number of days or microseconds the bytes hold.

Named types are resolved through the `__named_schemas` fastavro's parse_schema keeps."""

from __future__ import annotations

import uuid
from typing import Any

from floeline.records.connect_columns import FieldTypes
from floeline.records.debezium_types import debezium_column_type, debezium_value, is_debezium_type
from floeline.records.record import Float32

# Connect type -> Snowflake's column (SnowflakeColumnTypeMapper) -> floeline's Spark type
# (records/snowflake_sql/types.py): INT8..INT64 -> NUMBER; FLOAT32/64 -> FLOAT/DOUBLE; Decimal -> VARCHAR;
# Date -> DATE; Time -> TIME (a string here); Timestamp -> TIMESTAMP_NTZ; ARRAY -> ARRAY,
# MAP and STRUCT -> VARIANT. BYTES would be BINARY in Snowflake; floeline keeps the
# base64 text the conversion rules give, in a VARCHAR (see docs/kafka.md).
_PRIMITIVE_COLUMNS = {
    "int": "decimal(38,0)", "long": "decimal(38,0)", "float": "double", "double": "double",
    "boolean": "boolean", "string": "string", "bytes": "string", "fixed": "string",
    "enum": "string", "array": "variant", "map": "variant", "record": "variant",
}
_LOGICAL_COLUMNS = {
    "decimal": "string", "uuid": "string", "date": "date",
    "time-millis": "string", "time-micros": "string",
    # fastavro reads these into datetimes (Connect's Timestamp for -millis)
    "timestamp-millis": "timestamp_ntz", "timestamp-micros": "timestamp_ntz",
    "local-timestamp-millis": "timestamp_ntz", "local-timestamp-micros": "timestamp_ntz",
}


def _named(schema: Any, named: dict) -> Any:
    """`schema` with a reference to a named type replaced by its definition."""
    return named.get(schema, schema) if isinstance(schema, str) else schema


def column_type(schema: Any, named: dict) -> str:
    """The Spark column type of a field of this Avro type: an optional type (a union
    with null) is its other branch; any other union is a VARIANT (Connect makes a
    struct of it)."""
    schema = _named(schema, named)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return column_type(branches[0], named) if len(branches) == 1 else "variant"
    if isinstance(schema, dict):
        debezium = debezium_column_type(schema.get("connect.name"))
        if debezium is not None:
            return debezium
        logical = schema.get("logicalType")
        if logical in _LOGICAL_COLUMNS:
            return _LOGICAL_COLUMNS[logical]
        return column_type(schema["type"], named) if isinstance(schema["type"], (list, dict)) \
            else _PRIMITIVE_COLUMNS.get(schema["type"], "variant")
    return _PRIMITIVE_COLUMNS.get(schema, "variant")


def column_types(schema: Any) -> dict[str, str]:
    """Top-level field name -> Spark column type, for a parsed record schema (an empty
    dict for any other schema: its value cannot be a row)."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    record = _named(schema, named)
    if not isinstance(record, dict) or record.get("type") != "record":
        return {}
    return {f["name"]: column_type(f["type"], named) for f in record["fields"]}


def field_types(schema: Any, named: dict | None = None) -> FieldTypes | None:
    """The FieldTypes (connect_columns.py) of a record schema, or of the record of an
    optional one; None for any other schema and for records that stand for one value
    (Debezium's VariableScaleDecimal)."""
    if named is None:
        named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    schema = _named(schema, named)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return field_types(branches[0], named) if len(branches) == 1 else None
    if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        return field_types(schema["type"], named)
    if not isinstance(schema, dict) or schema.get("type") != "record" \
            or is_debezium_type(schema.get("connect.name")):
        return None
    return {f["name"]: (column_type(f["type"], named), field_types(f["type"], named))
            for f in schema["fields"]}


def plain_value(schema: Any, value: Any, named: dict | None = None) -> Any:
    """A value fastavro read with `schema`, in record.py's types: Avro floats as Float32,
    UUIDs as text, Debezium's semantic types as their values (debezium_types.py; a
    DebeziumValueError when the bytes do not fit)."""
    if named is None:
        named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    if value is None:
        return None
    schema = _named(schema, named)
    if isinstance(schema, list):
        return plain_value(_union_branch(schema, value, named), value, named)
    if isinstance(schema, dict) and is_debezium_type(schema.get("connect.name")):
        base = plain_value({k: v for k, v in schema.items() if k != "connect.name"}, value, named)
        return debezium_value(schema["connect.name"], base)
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, (dict, list)):  # {"type": {...}}
        return plain_value(kind, value, named)
    if kind == "float" and isinstance(value, float):
        return Float32(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if kind == "record" and isinstance(value, dict):
        types = {f["name"]: f["type"] for f in schema["fields"]}
        return {k: plain_value(types.get(k, "null"), v, named) for k, v in value.items()}
    if kind == "map" and isinstance(value, dict):
        return {k: plain_value(schema["values"], v, named) for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [plain_value(schema["items"], v, named) for v in value]
    return value


def _union_branch(branches: list, value: Any, named: dict) -> Any:
    """The branch of a union a value fastavro read belongs to (by its Python type; a
    dict by its keys when several record branches could hold it)."""
    def kind(branch):
        resolved = _named(branch, named)
        return resolved.get("type") if isinstance(resolved, dict) else resolved

    if isinstance(value, float):
        return "float" if "double" not in map(kind, branches) and "float" in map(kind, branches) \
            else "double"
    if isinstance(value, dict):
        candidates = [b for b in branches if kind(b) in ("record", "map")]
        for branch in candidates:
            resolved = _named(branch, named)
            if kind(branch) == "record" and set(value) == {f["name"] for f in resolved["fields"]}:
                return branch
        return candidates[0] if candidates else "null"
    if isinstance(value, list):
        return next((b for b in branches if kind(b) == "array"), "null")
    # A scalar needs its branch only for what the branch names (a Debezium connect.name):
    # the one non-null branch of an optional field, else the first of the value's kind.
    others = [b for b in branches if kind(b) != "null"]
    if len(others) == 1:
        return others[0]
    kinds = _SCALAR_KINDS.get(type(value), ())
    return next((b for b in others if kind(b) in kinds), "null")


_SCALAR_KINDS = {bool: ("boolean",), int: ("int", "long"), str: ("string", "enum"),
                 bytes: ("bytes", "fixed")}
