"""Snowflake's conversion rules in the default pipe: every column type of a pre-created
table against values of each JSON kind, in one connector run over the memory source.
A value lands converted, or its record goes to the error table naming the column;
never a silent cast."""

from __future__ import annotations

import datetime
import json
import math
from decimal import Decimal

import pytest

from floeline.records.values_to_columns import FIT_FIX

pytestmark = pytest.mark.integration

ERR = "error"
COLUMNS = {
    "C_NUMBER": "NUMBER", "C_NUM102": "NUMBER(10,2)", "C_FLOAT": "FLOAT",
    "C_VARCHAR": "VARCHAR", "C_VARCHAR10": "VARCHAR(10)", "C_BINARY": "BINARY",
    "C_BOOLEAN": "BOOLEAN", "C_DATE": "DATE", "C_TIME": "TIME", "C_TS_NTZ": "TIMESTAMP_NTZ",
    "C_TS_LTZ": "TIMESTAMP_LTZ", "C_VARIANT": "VARIANT", "C_OBJECT": "OBJECT", "C_ARRAY": "ARRAY",
}
JAN15 = datetime.datetime(2024, 1, 15, 10, 0)
# (column, JSON value, expected value in the table or ERR)
CASES = [
    ("C_NUMBER", 42, Decimal(42)), ("C_NUMBER", "12", Decimal(12)), ("C_NUMBER", 1.5, Decimal(2)),
    ("C_NUMBER", True, ERR), ("C_NUMBER", "abc", ERR), ("C_NUMBER", {"a": 1}, ERR),
    ("C_NUMBER", [1], ERR), ("C_NUMBER", None, None),
    ("C_NUM102", 123.456, Decimal("123.46")), ("C_NUM102", "12345678901", ERR),
    ("C_FLOAT", 3.25, 3.25), ("C_FLOAT", "1e5", 100000.0), ("C_FLOAT", "NaN", "nan"),
    ("C_FLOAT", True, ERR), ("C_FLOAT", "text", ERR), ("C_FLOAT", [1, 2], ERR),
    ("C_VARCHAR", "hello", "hello"), ("C_VARCHAR", 1.5, "1.5"), ("C_VARCHAR", True, "true"),
    ("C_VARCHAR", {"key": "value"}, '{"key":"value"}'), ("C_VARCHAR", [1, 2], "[1,2]"),
    ("C_VARCHAR10", "0123456789", "0123456789"), ("C_VARCHAR10", "a" * 11, ERR),
    ("C_VARCHAR10", {"key": "value"}, ERR), ("C_VARCHAR10", "Łułósżźćęą", "Łułósżźćęą"),
    ("C_BINARY", "SGVsbG8=", b"Hello"), ("C_BINARY", "48656C6C6F!", ERR), ("C_BINARY", 42, ERR),
    ("C_BOOLEAN", True, True), ("C_BOOLEAN", "on", True), ("C_BOOLEAN", "OFF", False),
    ("C_BOOLEAN", " yes ", True), ("C_BOOLEAN", "f", False), ("C_BOOLEAN", 1, True),
    ("C_BOOLEAN", 0, False), ("C_BOOLEAN", 42, ERR), ("C_BOOLEAN", "random", ERR),
    ("C_BOOLEAN", {"k": "v"}, ERR), ("C_BOOLEAN", [1], ERR),
    ("C_DATE", "2024-01-15", datetime.date(2024, 1, 15)),
    ("C_DATE", "2024-01-15T23:00:00-05:00", datetime.date(2024, 1, 15)),
    ("C_DATE", "1705312800", datetime.date(2024, 1, 15)), ("C_DATE", 1705312800, ERR),
    ("C_DATE", "2024-02-30", ERR), ("C_DATE", True, ERR),
    ("C_DATE", "2024", datetime.date(1970, 1, 1)),  # digits are an epoch (2024 s), as in Snowflake
    ("C_TIME", "13:45:30", "13:45:30"), ("C_TIME", "13:45", "13:45:00"),
    ("C_TIME", "00:00:00Z", "00:00:00"), ("C_TIME", "13:45:30.123+05:00", "13:45:30.123"),
    ("C_TIME", "3600", "01:00:00"), ("C_TIME", "25:00:00", ERR), ("C_TIME", 3600, ERR),
    ("C_TIME", "not_a_time", ERR),
    ("C_TS_NTZ", "2024-01-15T13:45:30", datetime.datetime(2024, 1, 15, 13, 45, 30)),
    ("C_TS_NTZ", "2024-01-15T13:45:30+05:00", datetime.datetime(2024, 1, 15, 13, 45, 30)),
    ("C_TS_NTZ", "2024-01-15", datetime.datetime(2024, 1, 15)),
    ("C_TS_NTZ", 1705312800, JAN15), ("C_TS_NTZ", 1705312800000, JAN15),
    ("C_TS_NTZ", "1705312800", JAN15), ("C_TS_NTZ", "not_a_timestamp", ERR),
    ("C_TS_NTZ", 1.5, ERR), ("C_TS_NTZ", True, ERR), ("C_TS_NTZ", "2024-01-15Tnoon", ERR),
    ("C_TS_LTZ", "2024-01-15T15:00:00+05:00", JAN15), ("C_TS_LTZ", 1705312800, JAN15),
    ("C_TS_LTZ", "x", ERR),
    ("C_VARIANT", {"a": 1}, {"a": 1}), ("C_VARIANT", [1, 2], [1, 2]), ("C_VARIANT", 42, 42),
    ("C_VARIANT", "hello", "hello"), ("C_VARIANT", True, True),
    ("C_OBJECT", {"k": "v"}, {"k": "v"}), ("C_OBJECT", '{"k": "v"}', {"k": "v"}),
    ("C_OBJECT", "[1,2,3]", ERR), ("C_OBJECT", "not_json", ERR), ("C_OBJECT", 42, ERR),
    ("C_OBJECT", [1], ERR),
    ("C_ARRAY", [1, 2], [1, 2]), ("C_ARRAY", "42", [42]), ("C_ARRAY", "[1,2,3]", [1, 2, 3]),
    ("C_ARRAY", 7, [7]), ("C_ARRAY", {"a": 1}, [{"a": 1}]), ("C_ARRAY", "not_json", ERR),
]


def _plain(value):
    """A table value as the cases write it (variants as Python, NaN as 'nan')."""
    if hasattr(value, "toJson"):
        return json.loads(value.toJson())
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def test_every_column_type_against_each_json_kind(memory_log, make_config, run_memory,
                                                   read_table, spark, warehouse):
    # (DESCRIBE showing the declared types: tests/integration/test_sql_ddl.py)
    from floeline.sql.script import run_script
    from floeline.warehouse.catalog import Warehouse

    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    run_script(spark, f"CREATE TABLE ORDERS (RECORD_METADATA VARIANT, ID NUMBER, {columns})",
               Warehouse(warehouse))
    memory_log.append("orders/0", "orders", [json.dumps({"id": i, column: value}).encode()
                                             for i, (column, value, _want) in enumerate(CASES)])
    run_memory(make_config(errors__tolerance="all"))

    rows = {int(r["ID"]): r for r in read_table("ORDERS").collect()}
    errors = {json.loads(r["RECORD_VALUE"])["id"]: r["ERROR"] for r in read_table("ORDERS_ERRORS").collect()}
    wrong = []
    for i, (column, value, want) in enumerate(CASES):
        if want == ERR:
            if i not in errors or column not in errors[i]:
                wrong.append((column, value, "should be an error naming the column",
                              _plain(rows[i][column]) if i in rows else errors.get(i)))
        elif i not in rows or _plain(rows[i][column]) != want:
            wrong.append((column, value, want, _plain(rows[i][column]) if i in rows else errors.get(i)))
    assert not wrong, "\n".join(map(repr, wrong))
    assert len(rows) + len(errors) == len(CASES)
    # A message says what, where and why.
    assert errors[CASES.index(("C_NUMBER", "abc", ERR))] == (
        "value \"abc\" of key 'C_NUMBER' does not fit column C_NUMBER of type NUMBER(38,0): "
        "not a number, or out of the range of NUMBER(38,0)" + FIT_FIX)


def test_binary_strings_are_hex_in_the_compatibility_mode(spark):
    from floeline.records.values_to_columns import CLIENT_SIDE, Forms, forms_sql, value_sql
    from floeline.records.columns import Column

    column, forms = Column("B", "binary"), Forms("x", "k", "t", "n")
    (kind_text,) = forms_sql(column, forms)
    rows = spark.sql("SELECT parse_json(j) AS x FROM VALUES ('\"48656c6C6F\"'), ('\"SGVsbG8=\"'), "
                     "('\"ABC\"') AS t(j)").selectExpr("*", *kind_text).selectExpr(
        f"{value_sql(column, forms, CLIENT_SIDE)} AS b").collect()
    assert [r["b"] and bytes(r["b"]) for r in rows] == [b"Hello", None, None]


def test_a_number_column_widens_for_json_numbers_with_more_digits(memory_log, make_config, run_memory,
                                                                   read_table, spark, warehouse):
    # Delta type widening under ENABLE_SCHEMA_EVOLUTION (warehouse/type_widening.py): the
    # one-pass read leaves a value that would round to the general path, which widens.
    from floeline.sql.script import run_script
    from floeline.warehouse.catalog import Warehouse

    wh = Warehouse(warehouse)
    run_script(spark, "CREATE TABLE ORDERS (RECORD_METADATA VARIANT, ID NUMBER, PRICE NUMBER(10,2)) "
                      "ENABLE_SCHEMA_EVOLUTION = TRUE; "
                      "CREATE TABLE FIXED (RECORD_METADATA VARIANT, ID NUMBER, PRICE NUMBER(10,2))", wh)
    batches = [[{"id": 0, "price": 12.5}, {"id": 1, "price": 99999999.99}],
               [{"id": 2, "price": 1234567890.1234}, {"id": 3, "price": 0.0005}],
               [{"id": 4, "price": 10**20}]]  # a whole number never widens: a row error
    for batch in batches:
        memory_log.append("orders/0", "orders", [json.dumps(v).encode() for v in batch])
    # Each connector reads the three batches above, 2 records a batch, in one run.
    for name, settings in (("widening", {}), ("fixed", {"snowflake__topic2table__map": "orders:FIXED"})):
        connector = run_memory(make_config(name=name, errors__tolerance="all", buffer__count__records=2,
                                           **settings))
        assert [r.records_read for r in connector.reports] == [len(b) for b in batches]

    rows = sorted((int(r["ID"]), r["PRICE"]) for r in read_table("ORDERS").collect())
    assert rows == [(0, Decimal("12.5")), (1, Decimal("99999999.99")),
                    (2, Decimal("1234567890.1234")), (3, Decimal("0.0005"))]
    assert read_table("ORDERS").schema["PRICE"].dataType.simpleString() == "decimal(14,4)"
    (error,) = read_table("ORDERS_ERRORS").collect()
    assert json.loads(error["RECORD_VALUE"])["id"] == 4 and "column PRICE of type NUMBER(14,4)" in error["ERROR"]
    # Without schema evolution the column stays and Snowflake's rules apply: rounded to
    # the scale, a value over its integer digits a row error.
    assert read_table("FIXED").schema["PRICE"].dataType.simpleString() == "decimal(10,2)"
    fixed = sorted((int(r["ID"]), r["PRICE"]) for r in read_table("FIXED").collect())
    assert fixed == [(0, Decimal("12.50")), (1, Decimal("99999999.99")), (3, Decimal("0.00"))]
    assert sorted(json.loads(r["RECORD_VALUE"])["id"] for r in read_table("FIXED_ERRORS").collect()) == [2, 4]
