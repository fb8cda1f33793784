"""Snowflake column and cast types -> the Spark types floeline stores.

Decisions (documented for users):
- NUMBER/NUMERIC/DECIMAL default to NUMBER(38,0), as in Snowflake; NUMBER(p,s) ->
  decimal(p,s). The INT family (INT, INTEGER, BIGINT, SMALLINT, TINYINT, BYTEINT) is a
  synonym of NUMBER(38,0) in Snowflake, so it is decimal(38,0) here too (not bigint).
- FLOAT/DOUBLE/REAL -> double; VARCHAR/STRING/TEXT/CHAR -> string.
- TIME -> string ('HH:MM:SS[.fffffffff]'): Spark 4.2 rejects its TIME type
  (UNSUPPORTED_TIME_TYPE), so Delta cannot store it.
- TIMESTAMP_NTZ (and DATETIME) -> timestamp_ntz; TIMESTAMP_LTZ, TIMESTAMP_TZ and
  TIMESTAMP -> timestamp (an instant; a TZ offset is not kept).
- VARIANT, OBJECT and ARRAY -> variant.

Where the Spark type loses what the Snowflake type says (VARCHAR(n) and CHAR(n)
lengths, BINARY(n), TIME, OBJECT, ARRAY), the declared type is kept beside it
(declared_type; tables.py stores it with the table), so the default pipe applies
Snowflake's rules for it (records/values_to_columns.py) and DESCRIBE shows it.
"""

from __future__ import annotations

from sqlglot import exp

from floeline.errors import SqlError

DT = exp.DataType.Type

_SIMPLE = {
    DT.DOUBLE: "double", DT.FLOAT: "double",
    DT.VARCHAR: "string", DT.CHAR: "string", DT.NCHAR: "string", DT.NVARCHAR: "string",
    DT.TEXT: "string",
    DT.BOOLEAN: "boolean", DT.DATE: "date", DT.TIME: "string",
    DT.TIMESTAMPNTZ: "timestamp_ntz", DT.DATETIME: "timestamp_ntz",
    DT.TIMESTAMP: "timestamp", DT.TIMESTAMPLTZ: "timestamp", DT.TIMESTAMPTZ: "timestamp",
    DT.BINARY: "binary", DT.VARBINARY: "binary",
    DT.VARIANT: "variant", DT.OBJECT: "variant", DT.ARRAY: "variant", DT.JSON: "variant",
}
_INTEGERS = {DT.INT, DT.BIGINT, DT.SMALLINT, DT.TINYINT, DT.UTINYINT, DT.MEDIUMINT}

SUPPORTED = ("NUMBER/NUMERIC/DECIMAL(p,s), INT/INTEGER/BIGINT/SMALLINT/TINYINT/BYTEINT, "
             "FLOAT/DOUBLE/REAL, VARCHAR(n)/STRING/TEXT/CHAR, BOOLEAN, DATE, TIME, "
             "TIMESTAMP_NTZ/TIMESTAMP_LTZ/TIMESTAMP_TZ/TIMESTAMP, BINARY, VARIANT, OBJECT, ARRAY")


def spark_type(datatype: exp.DataType) -> str:
    """The Spark DDL type of a Snowflake type as sqlglot parsed it (read="snowflake")."""
    kind = datatype.this
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind in _INTEGERS:
        return "decimal(38,0)"
    if kind == DT.DECIMAL:
        params = [int(p.this.this) if isinstance(p.this, exp.Literal) else None
                  for p in datatype.expressions]
        precision = params[0] if params else 38
        scale = params[1] if len(params) > 1 else 0
        if precision is None or scale is None or not (1 <= precision <= 38) or not 0 <= scale <= precision:
            raise SqlError(f"invalid type {datatype.sql('snowflake')}: NUMBER(p,s) needs "
                           f"1 <= p <= 38 and 0 <= s <= p")
        return f"decimal({precision},{scale})"
    raise SqlError(f"unsupported type {datatype.sql('snowflake')}; supported types: {SUPPORTED}")


def declared_type(datatype: exp.DataType) -> str:
    """The Snowflake type to keep beside the Spark type, or "" when the Spark type says
    it all: VARCHAR(n), CHAR(n) (CHAR alone is CHAR(1)), BINARY(n), TIME, OBJECT, ARRAY."""
    kind = datatype.this
    length = [p.sql() for p in datatype.expressions]
    if kind in (DT.VARCHAR, DT.NVARCHAR, DT.CHAR, DT.NCHAR):
        char = kind in (DT.CHAR, DT.NCHAR)
        if not length and not char:
            return ""
        if length and not (length[0].isdigit() and 1 <= int(length[0]) <= 16777216):
            raise SqlError(f"invalid type {datatype.sql('snowflake')}: the length must be 1 to 16777216")
        return f"{'CHAR' if char else 'VARCHAR'}({length[0] if length else 1})"
    if kind in (DT.BINARY, DT.VARBINARY) and length:
        if not (length[0].isdigit() and 1 <= int(length[0]) <= 8388608):
            raise SqlError(f"invalid type {datatype.sql('snowflake')}: the length must be 1 to 8388608")
        return f"BINARY({length[0]})"
    return {DT.TIME: "TIME", DT.OBJECT: "OBJECT", DT.ARRAY: "ARRAY"}.get(kind, "")


def snowflake_type(spark: str, declared: str = "") -> str:
    """How DESCRIBE shows a stored column's type, in Snowflake's words."""
    if declared:
        return declared
    t = spark.lower()
    if t.startswith("decimal"):
        return "NUMBER" + t[len("decimal"):].upper().replace(" ", "")
    return {"string": "VARCHAR", "double": "FLOAT", "float": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "timestamp_ntz": "TIMESTAMP_NTZ", "timestamp": "TIMESTAMP_LTZ",
            "binary": "BINARY", "variant": "VARIANT", "bigint": "NUMBER(19,0)",
            "int": "NUMBER(10,0)", "smallint": "NUMBER(5,0)", "tinyint": "NUMBER(3,0)"}.get(t, t.upper())
