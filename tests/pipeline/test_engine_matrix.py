"""Tables every engine reads (issue 55): each kind of table a connector writes, read
with Spark, DuckDB (its delta extension), delta-rs (`deltalake`: its pyarrow reader and
its QueryBuilder) and polars, row for row against Spark.

Three forms: a new user's defaults (semi-structured columns as JSON text),
floeline.variant.storage=variant (Delta VARIANT columns) and Iceberg tables
(snowflake.streaming.iceberg.enabled=true), which pyiceberg reads too (more in
tests/integration/test_iceberg_tables.py and tests/pipeline/test_iceberg_mirror.py).
The kinds: a schematized table with nested
objects and arrays, one without schematization (RECORD_METADATA + RECORD_CONTENT),
column-mapped names, identity and default columns (made by `floeline sql`), an upserted
CDC table (MERGE), a table after OPTIMIZE and one whose schema evolved. What each engine
does with each is the matrix in docs/sql.md: the test measures it and fails where the
page says otherwise. Memory source (real Spark and Delta, no broker)."""

from __future__ import annotations

import datetime
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
ENGINES = ("Spark", "DuckDB", "delta-rs", "delta-rs SQL", "polars", "pyiceberg")
FORMS = {
    "default": {},
    "variant": {"floeline.variant.storage": "variant"},
    "iceberg": {"snowflake.streaming.iceberg.enabled": "true"},
}
NOT_ICEBERG = "-"  # the pyiceberg cell of a form without Iceberg metadata
# Kind (as the page names it) -> its table.
KINDS = {
    "schematized, nested objects and arrays": "ORDERS",
    "not schematized (RECORD_CONTENT)": "RAW",
    "column-mapped names": "MAPPED",
    "identity and default columns": "EVENTS",
    "upserted CDC (MERGE)": "CUSTOMERS",
    "after OPTIMIZE": "COMPACTED",
    "schema evolved": "EVOLVED",
}
CDC_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "debezium" / "postgres_json_plain.json"


def orders(start: int, count: int) -> list[bytes]:
    return [json.dumps({"n": n, "name": f"r{n}",
                        "payload": None if n % 5 == 0 else {"a": n, "tags": ["x", n], "deep": {"ok": n % 2 == 0}},
                        "items": [{"sku": f"s{n}", "qty": n % 3}], "mixed": n if n % 2 else f"s{n}"}).encode()
            for n in range(start, start + count)]


def build_tables(form: dict, spark, tmp_path, make_config) -> str:
    """Every kind of table of one form in a warehouse of its own; returns the warehouse."""
    from floeline.sources.memory import MemoryLog
    from floeline.sql.script import run_script
    from floeline.warehouse.catalog import Warehouse

    warehouse = str(tmp_path / "warehouse")

    def config(**settings):
        return make_config(floeline__warehouse=warehouse, buffer__count__records=15,
                           **{k.replace(".", "__"): v for k, v in {**form, **settings}.items()})

    run_script(spark, "CREATE TABLE EVENTS (ID NUMBER AUTOINCREMENT START 1 INCREMENT 1, "
                      "KIND VARCHAR DEFAULT 'unknown', AMOUNT NUMBER)", Warehouse(warehouse))
    log = MemoryLog(tmp_path / "log")
    log.append("orders/0", "orders", orders(0, 30))
    log.append("compacted/0", "compacted", orders(0, 45))  # 3 batches: 3 files before OPTIMIZE
    log.append("events/0", "events", [json.dumps({"kind": "k", "amount": n} if n % 2 else {"amount": n}).encode()
                                      for n in range(10)])
    log.append("evolved/0", "evolved", [json.dumps({"n": n, "name": f"e{n}"}).encode() for n in range(10)])
    schematized = config()
    run(spark, schematized, log)
    log.append("evolved/0", "evolved", [json.dumps({"n": n, "name": f"e{n}", "score": n / 4,
                                                    "labels": {"k": n}}).encode() for n in range(10, 20)])
    run(spark, schematized, log)
    run_script(spark, "OPTIMIZE compacted", Warehouse(warehouse))

    mapped_log = MemoryLog(tmp_path / "mapped_log")
    mapped_log.append("mapped/0", "mapped", [json.dumps({"has cat": n, "a,b": f"v{n}"}).encode()
                                             for n in range(10)])
    if "snowflake.streaming.iceberg.enabled" in form:
        # Iceberg metadata cannot describe column-mapped files: the rows land in the
        # Delta table, then the connector stops, naming the table and the fix
        from floeline.warehouse.iceberg_mirror import IcebergMirrorError

        with pytest.raises(IcebergMirrorError, match="MAPPED uses Delta column mapping"):
            run(spark, schematized, mapped_log)
    else:
        run(spark, schematized, mapped_log)

    raw_log = MemoryLog(tmp_path / "raw_log")
    raw_log.append("raw/0", "raw", orders(100, 20))
    run(spark, config(snowflake__enable__schematization="false"), raw_log)

    cdc_log = MemoryLog(tmp_path / "cdc_log")
    changes = [r for r in json.loads(CDC_FIXTURE.read_text()) if r["topic"] == "pg_plain.public.customers"]
    changes.sort(key=lambda r: r["offset"])
    cdc_log.append("customers/0", "pg_plain.public.customers", [r["value"] for r in changes],
                   keys=[r["key"] for r in changes], first_position=changes[0]["offset"])
    run(spark, config(**{"snowflake.topic2table.map": "pg_plain.public.customers:CUSTOMERS",
                         "insert.mode": "upsert", "primary.key.mode": "record_key",
                         "delete.enabled": "true"}), cdc_log)
    return warehouse


def check_kinds(spark, warehouse: str) -> None:
    """Each table is the kind it stands for: OPTIMIZE rewrote files, the CDC table was
    merged into, the identity and default columns were filled, the evolved table grew."""
    def table(name):
        return os.path.join(warehouse, "FLOELINE", "PUBLIC", name)

    def history(name):
        return spark.sql(f"DESCRIBE HISTORY delta.`{table(name)}`").collect()

    compacted = history("COMPACTED")  # newest first
    assert compacted[0]["operation"] == "OPTIMIZE", [r["operation"] for r in compacted]
    assert int(compacted[0]["operationMetrics"]["numRemovedFiles"]) > 1
    merged = [r["operation"] for r in history("CUSTOMERS")]
    assert "MERGE" in merged, merged
    events = sorted((r["ID"], r["KIND"]) for r in spark.read.format("delta").load(table("EVENTS")).collect())
    assert events == [(n + 1, "k" if n % 2 else "unknown") for n in range(10)], events
    assert {"SCORE", "LABELS"} <= set(spark.read.format("delta").load(table("EVOLVED")).columns)


def run(spark, config, log):
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    Connector(config, spark, source=MemorySource(config, log)).run(until_caught_up=True)


# --- each engine's rows, as plain Python ---------------------------------------------

def plain(value):
    """A value as plain Python, to compare engines: decimals as numbers, maps as dicts
    (pyarrow: a list of pairs; polars: of key/value structs), bytes as hex, times as
    UTC ISO text, VARIANT values as what they hold."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "asDict"):
        return plain(value.asDict(recursive=False))
    if hasattr(value, "toJson"):  # Spark's VariantVal
        return json.loads(value.toJson())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): plain(v) for k, v in value}
        if value and all(isinstance(v, dict) and set(v) == {"key", "value"} for v in value):
            return {str(v["key"]): plain(v["value"]) for v in value}
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.astimezone(datetime.timezone.utc).isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return value


def canonical(rows: list[dict], json_columns: set[str]) -> list[dict]:
    """Rows as plain Python with the JSON text of `json_columns` parsed, in a fixed order."""
    out = []
    for row in rows:
        out.append({name: plain(json.loads(value) if name in json_columns and isinstance(value, str) else value)
                    for name, value in row.items()})
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def spark_rows(spark, path):
    return [r.asDict(recursive=False) for r in spark.read.format("delta").load(path).collect()]


def duckdb_rows(spark, path):
    import duckdb
    import duckdb_extension_delta

    connection = duckdb.connect()
    package = os.path.dirname(duckdb_extension_delta.__file__)
    connection.execute(f"LOAD '{package}/extensions/v{duckdb.__version__}/delta.duckdb_extension'")
    result = connection.execute(f"SELECT * FROM delta_scan('{path}')")
    names = [d[0] for d in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def deltalake_rows(spark, path):
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table().to_pylist()


def deltalake_sql_rows(spark, path):
    """delta-rs through its DataFusion engine (QueryBuilder), which reads column mapping."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    return pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all()).to_pylist()


def polars_rows(spark, path):
    import polars as pl

    return pl.read_delta(path).to_dicts()


def pyiceberg_rows(spark, path):
    """The table as an Iceberg reader opens it (its metadata's folder, no catalog)."""
    from floeline.warehouse.iceberg_files import read_table
    from floeline.warehouse.iceberg_mirror import iceberg_location

    return read_table(iceberg_location(path)).scan().to_arrow().to_pylist()


def polars_through_delta_rs_sql_rows(spark, path):
    """polars over delta-rs's SQL engine: the way docs/sql.md gives polars users to
    column-mapped tables, which read_delta refuses."""
    import polars as pl
    from deltalake import DeltaTable, QueryBuilder

    return pl.DataFrame(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all()).to_dicts()


READERS = {"Spark": spark_rows, "DuckDB": duckdb_rows, "delta-rs": deltalake_rows,
           "delta-rs SQL": deltalake_sql_rows, "polars": polars_rows, "pyiceberg": pyiceberg_rows}


def measure(spark, warehouse: str, form: str) -> dict[str, dict[str, str]]:
    """kind -> engine -> `yes` (the same rows as Spark's), `differs` or `fails`."""
    from floeline.records.columns import stores_json
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.tables import read_schema

    matrix = {}
    for kind, table in KINDS.items():
        path = os.path.join(warehouse, "FLOELINE", "PUBLIC", table)
        schema = read_schema(spark, TableRef("FLOELINE", "PUBLIC", table, path))
        json_columns = {c.name for c in schema.columns if stores_json(c)}
        expected = canonical(spark_rows(spark, path), json_columns)
        assert expected, f"{table} is empty"
        cells = {}
        for engine in ENGINES:
            if engine == "pyiceberg" and form != "iceberg":
                cells[engine] = NOT_ICEBERG
                continue
            try:
                rows = canonical(READERS[engine](spark, path), json_columns)
            except Exception as exc:  # noqa: BLE001 - what the engine does is the measurement
                print(f"{form} {table} {engine}: {type(exc).__name__}: {str(exc)[:300]}")
                cells[engine] = "fails"
                continue
            cells[engine] = "yes" if rows == expected else "differs"
            if rows != expected:
                print(f"{form} {table} {engine}: first row {rows[:1]} != {expected[:1]}")
        matrix[kind] = cells
    return matrix


def documented(form: str) -> dict[str, dict[str, str]]:
    """The matrix docs/sql.md shows for `form` (its table's rows: kind | form | engines)."""
    out = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 + len(ENGINES) and cells[1] == f"`{form}`":
            # a cell's first word is the measurement; what follows explains it
            out[cells[0]] = dict(zip(ENGINES, (c.split()[0].rstrip(":,;") if c else c for c in cells[2:])))
    return out


@pytest.mark.parametrize("form", list(FORMS))
def test_every_engine_reads_every_kind_of_table_as_the_page_says(form, spark, tmp_path, make_config):
    warehouse = build_tables(FORMS[form], spark, tmp_path, make_config)
    check_kinds(spark, warehouse)
    matrix = measure(spark, warehouse, form)
    print("\n".join(f"| {kind} | `{form}` | " + " | ".join(cells[e] for e in ENGINES) + " |"
                     for kind, cells in matrix.items()))
    assert all(cells["Spark"] == "yes" and cells["DuckDB"] == "yes" for cells in matrix.values()), matrix
    if form == "iceberg":  # pyiceberg reads every table the connector could mirror
        assert all(cells["pyiceberg"] == "yes" for kind, cells in matrix.items()
                   if kind != "column-mapped names"), matrix
        # OPTIMIZE (floeline sql) brought the Iceberg metadata in step: it lists the
        # compacted files Delta keeps, not the ones it removed
        from floeline.warehouse.iceberg_files import read_table
        from floeline.warehouse.iceberg_mirror import iceberg_location

        path = os.path.join(warehouse, "FLOELINE", "PUBLIC", KINDS["after OPTIMIZE"])
        iceberg_files = {os.path.basename(t.file.file_path) for t in read_table(
            iceberg_location(path)).scan().plan_files()}
        delta_files = {os.path.basename(f) for f in spark.read.format("delta").load(path).inputFiles()}
        assert iceberg_files == delta_files and len(delta_files) == 1, (iceberg_files, delta_files)
    if form == "default":  # every reader reads every kind but column mapping, which only delta-rs SQL of the rest reads
        assert all(cells["delta-rs SQL"] == "yes" for cells in matrix.values()), matrix
        assert all(cells[e] == "yes" for kind, cells in matrix.items() if kind != "column-mapped names"
                   for e in ("delta-rs", "polars")), matrix
        # ... and polars reads it through delta-rs's SQL engine, as the page says
        from floeline.records.columns import stores_json
        from floeline.warehouse.catalog import TableRef
        from floeline.warehouse.tables import read_schema

        path = os.path.join(warehouse, "FLOELINE", "PUBLIC", KINDS["column-mapped names"])
        schema = read_schema(spark, TableRef("FLOELINE", "PUBLIC", KINDS["column-mapped names"], path))
        json_columns = {c.name for c in schema.columns if stores_json(c)}
        assert (canonical(polars_through_delta_rs_sql_rows(spark, path), json_columns)
                == canonical(spark_rows(spark, path), json_columns))
    assert documented(form) == matrix
