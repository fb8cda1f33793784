"""Snowflake column and cast types -> the Spark types floeline stores.

Decisions (documented for users):
- NUMBER/NUMERIC/DECIMAL default to NUMBER(38,0), as in Snowflake; NUMBER(p,s) ->
  decimal(p,s). The INT family (INT, INTEGER, BIGINT, SMALLINT, TINYINT, BYTEINT) is a
  synonym of NUMBER(38,0) in Snowflake, so it is decimal(38,0) here too (not bigint).
- FLOAT/DOUBLE/REAL -> double; VARCHAR/STRING/TEXT/CHAR -> string (lengths ignored).
- TIME -> string ('HH:MM:SS[.fff]'): Spark 4.2 rejects its TIME type
  (UNSUPPORTED_TIME_TYPE), so Delta cannot store it.
- TIMESTAMP_NTZ (and DATETIME) -> timestamp_ntz; TIMESTAMP_LTZ, TIMESTAMP_TZ and
  TIMESTAMP -> timestamp (an instant; a TZ offset is not kept).
- VARIANT, OBJECT and ARRAY -> variant.
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


def snowflake_type(spark: str) -> str:
    """How DESCRIBE shows a stored Spark type, in Snowflake's words."""
    t = spark.lower()
    if t.startswith("decimal"):
        return "NUMBER" + t[len("decimal"):].upper().replace(" ", "")
    return {"string": "VARCHAR", "double": "FLOAT", "float": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "timestamp_ntz": "TIMESTAMP_NTZ", "timestamp": "TIMESTAMP_LTZ",
            "binary": "BINARY", "variant": "VARIANT", "bigint": "NUMBER(19,0)",
            "int": "NUMBER(10,0)", "smallint": "NUMBER(5,0)", "tinyint": "NUMBER(3,0)"}.get(t, t.upper())
