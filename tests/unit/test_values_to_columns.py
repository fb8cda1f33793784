"""Snowflake's conversion rules: which rule a column follows, when a batch needs no
per-row check, and the declared types DDL keeps (no Spark; the rules themselves run
in tests/pipeline/test_conversion_rules.py)."""

import pytest
import sqlglot
from sqlglot import exp

from floeline.errors import SqlError
from floeline.records.columns import Column
from floeline.records.snowflake_sql.types import declared_type, snowflake_type
from floeline.records.values_to_columns import always_fits, logical_type


def declared(sql_type: str) -> str:
    tree = sqlglot.parse_one(f"CREATE TABLE t (c {sql_type})", read="snowflake")
    return declared_type(tree.find(exp.ColumnDef).args["kind"])


@pytest.mark.parametrize("sql_type,kept", [
    ("VARCHAR(10)", "VARCHAR(10)"), ("CHAR", "CHAR(1)"), ("CHARACTER(3)", "CHAR(3)"),
    ("NVARCHAR(4)", "VARCHAR(4)"), ("BINARY(8)", "BINARY(8)"), ("TIME", "TIME"),
    ("OBJECT", "OBJECT"), ("ARRAY", "ARRAY"), ("ARRAY(NUMBER)", "ARRAY"),
    ("VARCHAR", ""), ("STRING", ""), ("NUMBER(10,2)", ""), ("VARIANT", ""), ("BINARY", ""),
])
def test_declared_types_kept_where_the_spark_type_loses_them(sql_type, kept):
    assert declared(sql_type) == kept


def test_declared_lengths_are_checked():
    with pytest.raises(SqlError, match="the length must be 1 to 16777216"):
        declared("VARCHAR(0)")
    with pytest.raises(SqlError, match="the length must be 1 to 8388608"):
        declared("BINARY(9000000)")


@pytest.mark.parametrize("column,logical", [
    (Column("c", "decimal(10,2)"), "NUMBER"), (Column("c", "bigint"), "NUMBER"),
    (Column("c", "double"), "FLOAT"), (Column("c", "string"), "VARCHAR"),
    (Column("c", "string", declared="CHAR(1)"), "VARCHAR"),
    (Column("c", "string", declared="TIME"), "TIME"), (Column("c", "binary"), "BINARY"),
    (Column("c", "timestamp"), "TIMESTAMP_LTZ"), (Column("c", "timestamp_ntz"), "TIMESTAMP_NTZ"),
    (Column("c", "variant"), "VARIANT"), (Column("c", "variant", declared="ARRAY"), "ARRAY"),
    (Column("c", "array<int>"), "OTHER"),
])
def test_logical_type(column, logical):
    assert logical_type(column) == logical


def test_describe_shows_the_declared_type():
    assert snowflake_type("string", "VARCHAR(10)") == "VARCHAR(10)"
    assert snowflake_type("decimal(10,2)") == "NUMBER(10,2)"


def test_a_batch_skips_the_per_row_check_only_when_every_value_fits():
    fits = always_fits
    assert fits("BIGINT", Column("c", "decimal(38,0)")) and fits("DECIMAL(5,2)", Column("c", "double"))
    assert fits("STRING", Column("c", "string")) and fits("VOID", Column("c", "date"))
    assert fits("BOOLEAN", Column("c", "boolean")) and fits("OBJECT<a: BIGINT>", Column("c", "variant"))
    assert fits("BIGINT", Column("c", "variant", declared="ARRAY"))
    assert not fits("STRING", Column("c", "variant", declared="ARRAY"))
    assert not fits("ARRAY<BIGINT>", Column("c", "variant", declared="OBJECT"))
    assert not fits("STRING", Column("c", "string", declared="VARCHAR(10)"))
    assert not fits("BIGINT", Column("c", "boolean"))  # only 0 and 1 convert
    assert not fits("BOOLEAN", Column("c", "double")) and not fits("BOOLEAN", Column("c", "decimal(38,0)"))
    assert not fits("STRING", Column("c", "decimal(38,0)")) and not fits("BIGINT", Column("c", "decimal(10,2)"))
    assert not fits("STRING", Column("c", "binary")) and not fits("STRING", Column("c", "string", declared="TIME"))
    assert not fits("BIGINT", Column("c", "timestamp_ntz")) and not fits("DECIMAL(20,0)", Column("c", "bigint"))


def test_json_stored_variant_columns_get_the_values_json():
    from floeline.records.values_to_columns import Forms, value_sql

    forms = Forms("x", "k", "t", "n")
    variant = value_sql(Column("P", "variant"), forms)
    assert variant == "CASE WHEN NOT is_variant_null(x) THEN x END"  # JSON null is SQL NULL
    assert value_sql(Column("P", "string", declared="VARIANT"), forms) == f"to_json({variant})"
    assert value_sql(Column("O", "string", declared="OBJECT"), forms).startswith("to_json(CASE WHEN k LIKE 'OBJECT%'")
    # A plain VARCHAR column still takes the value's text.
    assert value_sql(Column("S", "string"), forms) == "try_variant_get(x, '$', 'string')"
