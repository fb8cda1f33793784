"""Destination tables: read a table's columns, create it on the first record, evolve it
(add columns, drop NOT NULL) as Snowflake's schema evolution does.

Column names may hold spaces, symbols and non-ASCII letters (`"has cat"`,
`" @&$#* has Łułósżź"`). Delta stores most of them as they are; a name with a space,
tab, newline or one of `,;{}()=` needs Delta's column mapping by name. That is turned
on only for a table that has (or gets) such a column: it costs about a tenth of write
throughput (measured: 0.25 s on a 340k-record micro-batch of 2.0 s).

A table's ENABLE_SCHEMA_EVOLUTION lives in the Delta table property below; tables the
connector creates have it on, tables created by hand without it have it off
(Snowflake's rule). Declared Snowflake types the Spark type cannot say (VARCHAR(10),
TIME, OBJECT, ...: sql/types.py) live in another property, a JSON object by column."""

from __future__ import annotations

import json
from dataclasses import dataclass

from floeline.errors import TableError
from floeline.records.content import quote_column, sql_string
from floeline.warehouse.catalog import TableRef

EVOLUTION_PROPERTY = "floeline.enableSchemaEvolution"
DECLARED_TYPES_PROPERTY = "floeline.declaredTypes"
COLUMN_MAPPING_PROPERTY = "delta.columnMapping.mode"
# Characters Delta accepts in a column name only with column mapping.
_MAPPING_ONLY_CHARACTERS = frozenset(" ,;{}()\n\t=")
METADATA_COLUMN = "RECORD_METADATA"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark DDL type, e.g. "decimal(38,0)", "string", "variant"
    nullable: bool = True
    declared: str = ""  # the Snowflake type when the Spark type loses it: "VARCHAR(10)", "TIME"


@dataclass(frozen=True)
class TableSchema:
    columns: tuple[Column, ...]
    evolution: bool

    def find(self, name: str, exact: bool = False) -> Column | None:
        """The column matching `name` case-insensitively (Snowflake's default pipe rule),
        or exactly (keys normalized as SQL identifiers)."""
        for column in self.columns:
            if column.name == name or (not exact and column.name.upper() == name.upper()):
                return column
        return None


def table_exists(spark, ref: TableRef) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, ref.path)


def read_schema(spark, ref: TableRef) -> TableSchema | None:
    """The table's columns and evolution flag, or None when there is no table yet."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, ref.path):
        return None
    properties = table_properties(spark, ref)
    schema = spark.read.format("delta").load(ref.path).schema
    declared = json.loads(properties.get(DECLARED_TYPES_PROPERTY) or "{}")
    columns = tuple(Column(f.name, f.dataType.simpleString(), f.nullable, declared.get(f.name, ""))
                    for f in schema.fields)
    evolution = str(properties.get(EVOLUTION_PROPERTY, "false")).lower() == "true"
    return TableSchema(columns, evolution)


def table_properties(spark, ref: TableRef) -> dict[str, str]:
    """The table's properties. SHOW TBLPROPERTIES reads the snapshot's metadata only;
    DeltaTable.detail() also sizes every file, a Spark job of ~1.3 s after each commit."""
    return {r["key"]: r["value"] for r in
            spark.sql(f"SHOW TBLPROPERTIES delta.{quote_column(ref.path)}").collect()}


def _column_ddl(column: Column) -> str:
    return f"{quote_column(column.name)} {column.type}" + ("" if column.nullable else " NOT NULL")


def create_table(spark, ref: TableRef, columns: list[Column], evolution: bool = True) -> None:
    """Create the table (no-op when another writer created it first)."""
    ddl = ", ".join(_column_ddl(c) for c in columns)
    mapping = (f"'{COLUMN_MAPPING_PROPERTY}'='name', "
               if needs_column_mapping(c.name for c in columns) else "")
    declared = {c.name: c.declared for c in columns if c.declared}
    types = f", '{DECLARED_TYPES_PROPERTY}'={sql_string(json.dumps(declared))}" if declared else ""
    _run(spark, ref,
         f"CREATE TABLE IF NOT EXISTS delta.{quote_column(ref.path)} ({ddl}) USING delta "
         f"TBLPROPERTIES ({mapping}'{EVOLUTION_PROPERTY}'='{str(evolution).lower()}'{types})")



def needs_column_mapping(names) -> bool:
    """Whether Delta can store these column names only with column mapping."""
    return any(not _MAPPING_ONLY_CHARACTERS.isdisjoint(name) for name in names)


def add_columns(spark, ref: TableRef, columns: list[Column]) -> None:
    if needs_column_mapping(c.name for c in columns):
        _enable_column_mapping(spark, ref)
    ddl = ", ".join(_column_ddl(c) for c in columns)
    _run(spark, ref, f"ALTER TABLE delta.{quote_column(ref.path)} ADD COLUMNS ({ddl})")
    added = {c.name: c.declared for c in columns if c.declared}
    if added:
        declared = json.loads(table_properties(spark, ref).get(DECLARED_TYPES_PROPERTY) or "{}")
        _run(spark, ref, f"ALTER TABLE delta.{quote_column(ref.path)} SET TBLPROPERTIES "
                         f"('{DECLARED_TYPES_PROPERTY}'={sql_string(json.dumps({**declared, **added}))})")


def _enable_column_mapping(spark, ref: TableRef) -> None:
    """Turn column mapping by name on (Delta upgrades the table's protocol), unless the
    table already maps columns (by name, or by id on a table made elsewhere)."""
    def mode() -> str:
        return table_properties(spark, ref).get(COLUMN_MAPPING_PROPERTY, "none")

    if mode() != "none":
        return
    try:
        _run(spark, ref, f"ALTER TABLE delta.{quote_column(ref.path)} SET TBLPROPERTIES "
                         f"('{COLUMN_MAPPING_PROPERTY}'='name')")
    except TableError:
        if mode() == "none":  # not another writer turning it on at the same moment
            raise


def drop_not_null(spark, ref: TableRef, column: str) -> None:
    _run(spark, ref,
         f"ALTER TABLE delta.{quote_column(ref.path)} ALTER COLUMN {quote_column(column)} DROP NOT NULL")


def _run(spark, ref: TableRef, statement: str) -> None:
    try:
        spark.sql(statement)
    except Exception as exc:  # Spark raises its own exception types; name the table.
        raise TableError(f"table {ref.full_name} at {ref.path}: {statement.split('(')[0].strip()} "
                         f"failed: {exc}") from exc


def rows_in_commit(spark, ref: TableRef, user_metadata: str) -> int | None:
    """numOutputRows of the newest commit when it is the one carrying `user_metadata`."""
    from delta.tables import DeltaTable

    last = DeltaTable.forPath(spark, ref.path).history(1).first()
    if last is None or last["userMetadata"] != user_metadata:
        return None
    return int((last["operationMetrics"] or {}).get("numOutputRows", 0))


def set_evolution(spark, ref: TableRef, enabled: bool) -> None:
    """ALTER TABLE ... SET ENABLE_SCHEMA_EVOLUTION = TRUE|FALSE."""
    _run(spark, ref, f"ALTER TABLE delta.{quote_column(ref.path)} SET TBLPROPERTIES "
                     f"('{EVOLUTION_PROPERTY}'='{str(enabled).lower()}')")


def drop_table(ref: TableRef) -> None:
    """DROP TABLE: delete the table's directory (data, log and history), as a dropped
    Snowflake table is gone for ingestion. Local warehouses only."""
    import shutil
    from pathlib import Path

    path = Path(ref.path)
    if "://" in ref.path:
        raise TableError(f"DROP TABLE {ref.full_name}: dropping tables in {ref.path} is only "
                         f"supported for a local warehouse; delete the directory with your storage tools")
    shutil.rmtree(path)
    for parent in (path.parent, path.parent.parent):  # leave no empty schema/database behind
        try:
            parent.rmdir()
        except OSError:
            break
