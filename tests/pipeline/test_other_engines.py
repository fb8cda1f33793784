"""Tables every engine reads: a table written by the connector (memory source, real
Spark and Delta) read with DuckDB (its delta extension), delta-rs (`deltalake`) and
polars, row by row against Spark; with the default floeline.variant.storage=json
semi-structured columns are JSON text there, and `floeline sql` still reads them with
`col:path` as on VARIANT columns (floeline.variant.storage=variant)."""

from __future__ import annotations

import json
import os
from decimal import Decimal

import pytest

pytestmark = pytest.mark.integration

COLUMNS = ("RECORD_METADATA", "N", "NAME", "PAYLOAD", "MIXED")


def records(start: int, count: int, nulls: bool = False) -> list[bytes]:
    """Objects with a nested object (a VARIANT column), text and numbers; `nulls` puts a
    JSON null in the VARIANT column of every third record."""
    out = []
    for n in range(start, start + count):
        payload = None if nulls and n % 3 == 0 else {"a": n, "tags": ["x", n], "deep": {"ok": n % 2 == 0}}
        out.append(json.dumps({"n": n, "name": f"r{n}", "payload": payload,
                               "mixed": n if n % 2 else f"s{n}"}).encode())
    return out


def plain(value):
    """A value as plain Python, for comparing engines: decimals as int/float, bytes and
    JSON text of semi-structured columns as what they hold."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def spark_rows(df, json_columns=()) -> list[dict]:
    out = []
    for row in df.collect():
        item = {}
        for name in COLUMNS:
            value = row[name]
            if value is not None and name in json_columns:
                value = json.loads(value)
            elif value is not None and hasattr(value, "toJson"):
                value = json.loads(value.toJson())
            item[name] = plain(value)
        out.append(item)
    return sorted(out, key=lambda r: r["N"])


def engine_rows(table: list[dict], json_columns) -> list[dict]:
    """Rows from another engine (a list of dicts), with the JSON text columns parsed."""
    out = []
    for row in table:
        out.append({name: plain(json.loads(row[name]) if name in json_columns and row[name] is not None
                                else row[name]) for name in COLUMNS})
    return sorted(out, key=lambda r: r["N"])


def duckdb_connection():
    """DuckDB with its delta extension loaded from the duckdb-extension-delta package
    (DuckDB's own INSTALL downloads it, which this machine cannot)."""
    import duckdb
    import duckdb_extension_delta

    connection = duckdb.connect()
    package = os.path.dirname(duckdb_extension_delta.__file__)
    path = os.path.join(package, "extensions", f"v{duckdb.__version__}", "delta.duckdb_extension")
    connection.execute(f"LOAD '{path}'")
    return connection


def duckdb_rows(path: str) -> list[dict]:
    connection = duckdb_connection()
    result = connection.execute(f"SELECT * FROM delta_scan('{path}')")
    names = [d[0] for d in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def deltalake_rows(path: str) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table().to_pylist()


def polars_rows(path: str) -> list[dict]:
    import polars as pl

    return pl.read_delta(path).to_dicts()


def write_orders(memory_log, make_config, run_memory, **settings):
    memory_log.append("orders/0", "orders", records(0, 40))
    memory_log.append("orders/1", "orders", records(100, 40))
    config = make_config(buffer__count__records=20, **settings)  # several batches per channel
    connector = run_memory(config)
    # Later batches in the one-pass path; the second round's nulls too.
    memory_log.append("orders/0", "orders", records(40, 30, nulls=True))
    connector = run_memory(config)
    assert any("one pass" in r.phases for r in connector.reports)
    return config


def test_the_default_json_storage_reads_the_same_in_spark_duckdb_deltalake_and_polars(
        memory_log, make_config, run_memory, spark, warehouse):
    write_orders(memory_log, make_config, run_memory)  # the default: floeline.variant.storage=json
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    df = spark.read.format("delta").load(path)  # as stored
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {"RECORD_METADATA": "string", "N": "decimal(38,0)", "NAME": "string",
                     "PAYLOAD": "string", "MIXED": "string"}
    semi = ("RECORD_METADATA", "PAYLOAD", "MIXED")
    expected = spark_rows(df, semi)
    assert len(expected) == 110
    by_n = {r["N"]: r for r in expected}
    assert by_n[42]["PAYLOAD"] is None  # JSON null is SQL NULL, as in a VARIANT column
    assert df.where("N = 42").first()["PAYLOAD"] is None
    assert by_n[1]["PAYLOAD"] == {"a": 1, "tags": ["x", 1], "deep": {"ok": False}}
    assert {k: by_n[101]["RECORD_METADATA"][k] for k in ("channel", "position")} == {
        "channel": "orders/1", "position": "1"}
    assert [by_n[0]["MIXED"], by_n[1]["MIXED"]] == ["s0", 1]
    assert engine_rows(duckdb_rows(path), semi) == expected
    assert engine_rows(deltalake_rows(path), semi) == expected
    assert engine_rows(polars_rows(path), semi) == expected


def test_variant_storage_reads_in_duckdb_as_in_spark(memory_log, make_config, run_memory,
                                                     spark, warehouse):
    write_orders(memory_log, make_config, run_memory, floeline__variant__storage="variant")
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    df = spark.read.format("delta").load(path)  # as stored
    assert dict((f.name, f.dataType.simpleString()) for f in df.schema.fields)["PAYLOAD"] == "variant"
    expected = spark_rows(df)
    # DuckDB reads VARIANT; its Python values of VARIANT columns are what they hold.
    assert engine_rows(duckdb_rows(path), ()) == expected


def test_sql_reads_col_path_on_json_storage_as_on_variant(memory_log, make_config, run_memory,
                                                          spark, warehouse, tmp_path):
    from floeline.sql.results import format_rows
    from floeline.sql.script import run_sql
    from floeline.warehouse.catalog import Warehouse

    query = ("SELECT n, record_metadata:channel::string AS ch, payload:a::number AS a, "
             "payload:tags[1] AS t, payload:deep.ok::boolean AS ok, mixed, payload "
             "FROM orders WHERE payload:a::number > 3 ORDER BY n")
    write_orders(memory_log, make_config, run_memory)  # the default: floeline.variant.storage=json
    as_json = format_rows(run_sql(spark, query, Warehouse(warehouse)), "json")
    described = run_sql(spark, "DESCRIBE TABLE orders", Warehouse(warehouse)).collect()
    assert {r["name"]: r["type"] for r in described}["PAYLOAD"] == "VARIANT"

    other = str(tmp_path / "variant_warehouse")
    from floeline.sources.memory import MemoryLog

    log = MemoryLog(tmp_path / "variant_log")
    make_other = lambda **s: make_config(  # noqa: E731
        floeline__warehouse=other, floeline__variant__storage="variant", **s)
    write_orders(log, make_other, _runner(spark, log))
    as_variant = format_rows(run_sql(spark, query, Warehouse(other)), "json")
    assert as_json == as_variant
    first = json.loads(as_json.splitlines()[0])
    assert first == {"n": 4, "ch": "orders/0", "a": 4, "t": 4, "ok": True, "mixed": "s4",
                     "payload": {"a": 4, "deep": {"ok": True}, "tags": ["x", 4]}}


def _runner(spark, log):
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    def run(config):
        connector = Connector(config, spark, source=MemorySource(config, log))
        connector.run(until_caught_up=True)
        return connector
    return run


def test_error_tables_take_the_storage_too_and_an_old_one_keeps_its_form(
        memory_log, make_config, run_memory, spark, warehouse, tmp_path):
    """<TABLE>_ERRORS' one semi-structured column, RECORD_SOURCE, is JSON text by default,
    so every engine reads the errors too; an error table made with VARIANT stays so."""
    from floeline.sql.script import run_sql
    from floeline.warehouse.catalog import Warehouse

    memory_log.append("orders/0", "orders", [b'{"n": 1}', b"{not json", b'{"n": 3}'])
    run_memory(make_config(errors__tolerance="all"))
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS_ERRORS")
    stored = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema}
    assert stored["RECORD_SOURCE"] == "string"
    for engine, rows in (("duckdb", duckdb_rows(path)), ("deltalake", deltalake_rows(path)),
                         ("polars", polars_rows(path))):
        (row,) = rows
        assert json.loads(row["RECORD_SOURCE"]) == {"channel": "orders/0", "position": "1"}, engine
        assert bytes(row["RECORD_VALUE"]) == b"{not json" and row["RECORD_POSITION"] == "1", engine
    query = "SELECT record_source:position::string AS p FROM orders_errors"
    assert [r[0] for r in run_sql(spark, query, Warehouse(warehouse)).collect()] == ["1"]

    other = str(tmp_path / "variant_errors")
    settings = {"name": "variant_errors", "errors__tolerance": "all", "floeline__warehouse": other,
                "topics": "events"}
    memory_log.append("events/0", "events", [b"{bad"])
    run_memory(make_config(**settings, floeline__variant__storage="variant"))
    memory_log.append("events/0", "events", [b"{worse"])
    run_memory(make_config(**settings))  # the default storage: the existing table keeps VARIANT
    old = os.path.join(other, "FLOELINE", "PUBLIC", "EVENTS_ERRORS")
    frame = spark.read.format("delta").load(old)
    assert dict((f.name, f.dataType.simpleString()) for f in frame.schema)["RECORD_SOURCE"] == "variant"
    assert sorted(json.loads(r["RECORD_SOURCE"].toJson())["position"] for r in frame.collect()) == ["0", "1"]
