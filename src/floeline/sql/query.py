"""`floeline sql` queries: Snowflake SQL over the warehouse's tables, run by Spark.

A query is read with sqlglot's Snowflake dialect. Tables named TABLE, SCHEMA.TABLE or
DB.SCHEMA.TABLE are resolved against the warehouse directory and rewritten to Delta
paths; Snowflake's variant access and functions (`record_metadata:topic`,
`col:a.b::NUMBER`, `col['k']`, `col:arr[0]`, IFF, TO_NUMBER, ...) are compiled to
Spark by records/snowflake_sql/expressions.py; the rest is written out by sqlglot's
Spark (Databricks) generator. Time travel: `VERSION AS OF n` / `TIMESTAMP AS OF t`, or
Snowflake's `AT(VERSION => n)` / `AT(TIMESTAMP => t)`. Every table name must resolve
in the warehouse: Spark's direct file queries (`delta."/path"`, `parquet."/x"`) and
statements that reach paths are refused (sql/query_guard.py).

`[...]` on a column is variant access (floeline stores OBJECT/ARRAY as VARIANT).

A table whose semi-structured columns are stored as JSON text (a connector with
floeline.variant.storage=json; the declared type says VARIANT, OBJECT or ARRAY) is read
through a subquery that parses those columns back to VARIANT, so a query sees the same
columns, `col:path` and casts included, whichever form the table stores; a structured
RECORD_METADATA is read as a VARIANT object the same way."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from floeline.errors import SqlError, TableError
from floeline.records.snowflake_sql.expressions import SPARK_DIALECT, Compiler, Mode
from floeline.sql.load_functions import expand_load_functions
from floeline.sql.query_guard import check_statement, direct_file_error, is_direct_file_reference
from floeline.spark import driver_log_path
from floeline.sql.spark_errors import spark_sql_error
from floeline.warehouse.catalog import Warehouse
from floeline.records.columns import METADATA_COLUMN, stores_json
from floeline.warehouse.tables import read_schema

DIALECT = SPARK_DIALECT
_PARSED_MARK = "floeline_parsed_view"
READ = "snowflake"


def translate(sql: str, warehouse: Warehouse) -> str:
    """The statement as Spark SQL, every warehouse table replaced by its Delta path."""
    try:
        tree = sqlglot.parse_one(sql, read=READ)
    except sqlglot.errors.ParseError as exc:
        raise SqlError(f"SQL syntax error: {exc}") from exc
    return translate_tree(tree, warehouse)


def translate_tree(tree: exp.Expression, warehouse: Warehouse, table_columns=None) -> str:
    """`table_columns(ref)`: the table's columns (warehouse.tables.Column), or None
    when unknown; tables with JSON-stored semi-structured columns are read parsed."""
    ctes = {cte.alias_or_name.upper() for cte in tree.find_all(exp.CTE)}
    parsed: list[list] = []  # the columns of each table to read through _parsed_view
    for table in list(tree.find_all(exp.Table)):
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        if not parts or (len(parts) == 1 and parts[0].upper() in ctes):
            continue
        identifiers = [table.args.get(k) for k in ("catalog", "db", "this") if table.args.get(k)]
        quoted = [bool(getattr(i, "quoted", False)) for i in identifiers]
        try:
            ref = warehouse.resolve(parts, quoted)
        except TableError:
            if is_direct_file_reference(table):  # delta."/etc", parquet."/x": a path, not a table
                raise direct_file_error(table) from None
            raise
        alias = table.args.get("alias")
        replacement = exp.Table(this=exp.to_identifier(ref.path, quoted=True),
                                db=exp.to_identifier("delta"))
        for arg in ("version", "joins", "pivots", "laterals"):
            if table.args.get(arg):
                replacement.set(arg, table.args[arg])
        when = table.args.get("when")
        if isinstance(when, exp.HistoricalData):  # Snowflake's AT(VERSION => n)
            kind = str(when.args.get("kind")).upper()
            if kind not in ("VERSION", "TIMESTAMP") or str(when.this).upper() != "AT":
                raise SqlError(f"time travel {when.sql('snowflake')} is not supported: use "
                               f"AT(VERSION => n) or AT(TIMESTAMP => '...')")
            replacement.set("version", exp.Version(this=kind, expression=when.expression, kind="AS OF"))
        if alias is None and isinstance(table.parent, (exp.From, exp.Join)):
            # Columns qualified by the table's name (ORDERS.ID) keep working.
            alias = exp.TableAlias(this=exp.to_identifier(table.name, quoted=True))
        columns = table_columns(ref) if table_columns is not None else None
        if columns and any(stores_json(c) or _structured(c) for c in columns):
            # Checked before the rewrite below: its parse_json must not be compiled again.
            replacement.meta[_PARSED_MARK] = len(parsed)
            parsed.append(columns)
            alias = alias or exp.TableAlias(this=exp.to_identifier(table.name, quoted=True))
        if alias is not None:
            replacement.set("alias", alias)
        table.replace(replacement)
    spark_sql_tree = Compiler(Mode.QUERY).rewrite(tree)
    for table in list(spark_sql_tree.find_all(exp.Table)):
        if _PARSED_MARK in table.meta:
            table.replace(_parsed_view(table, parsed[table.meta[_PARSED_MARK]]))
    return spark_sql_tree.sql(dialect=DIALECT)


def _parsed_view(table: exp.Table, columns) -> exp.Subquery:
    """`(SELECT a, parse_json(b) AS b, ... FROM delta.path) AS alias`: the table with its
    JSON-stored semi-structured columns as VARIANT (JSON text that does not parse, written
    by another tool, reads as NULL)."""
    alias = table.args.get("alias")
    inner = table.copy()
    inner.set("alias", None)
    inner.meta.pop(_PARSED_MARK, None)
    items = []
    for column in columns:
        name = exp.to_identifier(column.name, quoted=True)
        if stores_json(column) or _structured(column):
            function = "try_parse_json" if stores_json(column) else "to_variant_object"
            value = exp.Anonymous(this=function, expressions=[exp.Column(this=name)])
            items.append(exp.Alias(this=value, alias=name.copy()))
        else:
            items.append(exp.Column(this=name))
    return exp.Subquery(this=exp.Select(expressions=items).from_(inner), alias=alias)


def _structured(column) -> bool:
    """A structured RECORD_METADATA (snowflake.feature.structured.record.metadata.enabled):
    read as a VARIANT object, so `record_metadata:topic` works on both forms."""
    return column.name.upper() == METADATA_COLUMN and column.type.startswith("struct<")


def run_query(spark, tree: exp.Expression, warehouse: Warehouse):
    """A parsed query's result as a Spark DataFrame."""
    check_statement(tree)
    spark_sql = translate_tree(expand_load_functions(spark, tree, warehouse), warehouse,
                               lambda ref: _columns(spark, ref))
    try:
        return spark.sql(spark_sql)
    except Exception as exc:
        raise spark_sql_error(exc, str(driver_log_path())) from exc


def _columns(spark, ref):
    schema = read_schema(spark, ref)
    return list(schema.columns) if schema is not None else None
