"""Record content: Kafka value bytes -> a VARIANT object, its first-level keys and the
column types they create (the default pipe `{TABLE}-STREAMING`; converting a value to
a column's type is records/values_to_columns.py).

Everything here is either a Spark SQL expression string or pure Python over type
strings, so the rules can be unit-tested without Spark."""

from __future__ import annotations

import re

# Why a record cannot be ingested, as a SQL expression over the Kafka source columns
# plus `v` (the parsed value). NULL means the record is fine. Tombstones (NULL value)
# are not errors: behavior.on.null.values decides what happens to them.
PARSE_ERROR_SQL = (
    "CASE WHEN value IS NULL THEN NULL "
    # Spark would read invalid UTF-8 as U+FFFD: the record would land altered.
    "WHEN NOT is_valid_utf8(CAST(value AS STRING)) THEN 'value is not valid UTF-8 text' "
    "WHEN v IS NULL THEN 'value is not valid JSON (malformed, NaN/Infinity, nested over "
    "1000 levels, or over the 16 MiB VARIANT limit)' "
    # A parsed value is an object exactly when its text starts with '{' (cheaper than
    # computing its schema for every record).
    "WHEN left(TRIM(LEADING ' \\t\\r\\n' FROM CAST(value AS STRING)), 1) != '{' THEN "
    "concat('value is a JSON ', lower(regexp_extract(schema_of_variant(v), '^([A-Z]+)', 1)), "
    "', not an object: wrap it with the HoistField transform (transforms=hoist, "
    "transforms.hoist.type=org.apache.kafka.connect.transforms.HoistField$Value, "
    "transforms.hoist.field=<column>)') END"
)

# With snowflake.enable.schematization=false any JSON value is RECORD_CONTENT: only
# text that is not JSON is an error.
PARSE_ERROR_ANY_JSON_SQL = PARSE_ERROR_SQL.split(" WHEN left(")[0] + " END"

PARSE_VALUE_SQL = "try_parse_json(CAST(value AS STRING))"

# An empty (or whitespace-only) value is what Kafka Connect's JsonConverter reads as
# null: a tombstone, as behavior.on.null.values decides, not invalid JSON.
BLANK_VALUE_SQL = "(length(value) = 0 OR trim(BOTH ' \\t\\r\\n' FROM CAST(value AS STRING)) = '')"


def variant_path(key: str) -> str:
    """A variant_get path selecting first-level `key`, as a SQL string literal (None
    for a key holding both quote characters, which no path can address)."""
    if "'" not in key:
        return sql_string("$['" + key + "']")
    if '"' not in key:
        return sql_string('$["' + key + '"]')
    return None


def key_value_sql(key: str) -> str:
    """The VARIANT value of first-level `key` (NULL when absent)."""
    path = variant_path(key)
    if path is None:
        return f"try_variant_get(v, '$', 'map<string,variant>')[{sql_string(key)}]"
    return f"variant_get(v, {path}, 'variant')"


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_column(name: str) -> str:
    """`name` as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def parse_object_schema(type_string: str) -> list[tuple[str, str]]:
    """The first-level fields of a `schema_of_variant` result such as
    "OBJECT<a: BIGINT, `has cat`: BOOLEAN, b: ARRAY<BIGINT>>" as (key, type) pairs.
    Anything that is not an OBJECT has no fields."""
    if not type_string.startswith("OBJECT<"):
        return []
    body = type_string[len("OBJECT<"):-1]
    fields, i = [], 0
    while i < len(body):
        if body[i] == "`":
            j, name = i + 1, []
            while True:
                if body[j] == "`" and j + 1 < len(body) and body[j + 1] == "`":
                    name.append("`")
                    j += 2
                elif body[j] == "`":
                    break
                else:
                    name.append(body[j])
                    j += 1
            key, i = "".join(name), j + 1
        else:
            j = body.index(":", i)
            key, i = body[i:j], j
        assert body[i:i + 2] == ": ", type_string
        i += 2
        depth, start = 0, i
        while i < len(body) and not (depth == 0 and body[i] == ","):
            if body[i] == "`":  # a quoted nested name: its brackets do not nest
                i = body.index("`", i + 1)
                while body[i + 1:i + 2] == "`":  # `` is an escaped backtick
                    i = body.index("`", i + 2)
            depth += body[i] in "<("
            depth -= body[i] in ">)"
            i += 1
        fields.append((key, body[start:i].strip()))
        i += 1
        while i < len(body) and body[i] == " ":
            i += 1
    return fields


_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INT", "BIGINT"}


def column_type_for(variant_type: str) -> str:
    """The column type a JSON value of `variant_type` creates, in Spark DDL:
    integer -> NUMBER (decimal(38,0)), fraction -> DOUBLE, string -> VARCHAR (string),
    boolean -> BOOLEAN, array/object/mixed/null -> VARIANT."""
    head = re.match(r"[A-Z_]+", variant_type)
    head = head.group(0) if head else ""
    if head in _INTEGER_TYPES:
        return "decimal(38,0)"
    if head == "DECIMAL":
        scale = re.match(r"DECIMAL\((\d+),\s*(\d+)\)", variant_type)
        return "decimal(38,0)" if scale and scale.group(2) == "0" else "double"
    if head in ("FLOAT", "DOUBLE"):
        return "double"
    if head == "STRING":
        return "string"
    if head == "BOOLEAN":
        return "boolean"
    return "variant"


def has_key_sql(keys: list[str]) -> str:
    """TRUE when the record has any of the first-level `keys`, even holding null."""
    return " OR ".join(f"{key_value_sql(k)} IS NOT NULL" for k in keys)


def present_sql(keys: list[str]) -> str:
    """TRUE when the record has a non-null value for any of `keys`."""
    checks = [f"({key_value_sql(k)} IS NOT NULL AND NOT is_variant_null({key_value_sql(k)}))"
              for k in keys]
    return " OR ".join(checks)
