"""COPY INTO <table> FROM @stage: load staged files into a table, each file once.

    COPY INTO t [(col, ...)] FROM @s[/path] | (SELECT <items> FROM @s[/path])
      [FILES=('a.json', ...)] [PATTERN='regex'] [FILE_FORMAT=(TYPE=JSON ...) | (FORMAT_NAME=f)]
      [ON_ERROR=ABORT_STATEMENT | CONTINUE | SKIP_FILE] [FORCE=TRUE]
      [MATCH_BY_COLUMN_NAME=CASE_INSENSITIVE | NONE]

Without a SELECT, a JSON or Parquet record goes whole into a table's one VARIANT /
OBJECT / ARRAY column, or key by key into the columns of its name with
MATCH_BY_COLUMN_NAME; a CSV record's fields go to the columns in order. With a SELECT
the items compile as a pipe's do (warehouse/pipe_select.py) and map to the columns by position.

One Delta commit per statement holds the rows of every file loaded and their load
history (warehouse/load_history.py), so a file is in the table whole or not at all, and
a file already loaded is skipped unless FORCE=TRUE. A bad record or a value that does
not fit its column is a row error with its file and line: ON_ERROR=ABORT_STATEMENT (the
default) stops with nothing loaded, SKIP_FILE loads nothing of that file, CONTINUE
loads the file's other rows. The result has one row per file, as Snowflake prints it."""

from __future__ import annotations

from sqlglot import exp

from floeline.errors import SqlError
from floeline.ingest.file_load import load_files
from floeline.naming import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.sql.copy_statement import parse_copy, transformation
from floeline.sql.statements import Statement
from floeline.warehouse import load_history, stages, tables
from floeline.warehouse.catalog import Warehouse

RESULT_COLUMNS = ("file string, status string, rows_parsed bigint, rows_loaded bigint, "
                  "errors_seen bigint, first_error string, first_error_line bigint")


class CopyInto:
    """Runs COPY INTO statements against one warehouse."""

    def __init__(self, spark, warehouse: Warehouse, find_table):
        self.spark, self.warehouse = spark, warehouse
        self.find_table = find_table  # Name -> TableRef (raises when there is none)

    def execute(self, tree: exp.Copy, statement: Statement):
        copy = parse_copy(tree)
        ref = self.find_table(copy.table)
        schema = tables.read_schema(self.spark, ref)
        database, schema_name, stage_name = copy.stage.name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        stage = stages.load_stage(self.warehouse, database, schema_name, stage_name)
        if stage is None:
            raise SqlError(f"stage {database}.{schema_name}.{stage_name} does not exist (CREATE STAGE)")
        fmt = stages.resolve_format(self.warehouse, stage, copy.file_format, database, schema_name)
        pipe = transformation(copy, schema, fmt, statement)
        listed = stages.select_files(stages.list_files(self.warehouse, stage, copy.stage.path),
                                     copy.stage.path, list(copy.files) if copy.files is not None else None,
                                     copy.pattern)
        history = load_history.Loaded(load_history.read_history(self.spark, ref))
        if not copy.force:
            listed = [f for f in listed if not history.listed(stage.full_name, f.name, f.size, f.modified_ms)]
        loads = load_files(self.spark, ref, schema, stage, listed, fmt, pipe, copy.on_error or "ABORT_STATEMENT",
                           None if copy.force else history)
        if not loads:
            return self.spark.createDataFrame([("Copy executed with 0 files processed.",)], "status string")
        return self.spark.createDataFrame(
            [(f.file, f.status, f.rows_parsed, f.rows_loaded, f.errors_seen, f.first_error,
              f.first_error_line) for f in loads], RESULT_COLUMNS)
