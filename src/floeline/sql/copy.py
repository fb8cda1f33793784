"""COPY INTO <table> FROM @stage: load staged files into a table, each file once.

    COPY INTO t [(col, ...)] FROM @s[/path] | (SELECT <items> FROM @s[/path])
      [FILES=('a.json', ...)] [PATTERN='regex'] [FILE_FORMAT=(TYPE=JSON ...) | (FORMAT_NAME=f)]
      [ON_ERROR=ABORT_STATEMENT | CONTINUE | SKIP_FILE] [FORCE=TRUE]
      [MATCH_BY_COLUMN_NAME=CASE_INSENSITIVE | NONE]

Without a SELECT, a JSON or Parquet record goes whole into a table's one VARIANT /
OBJECT / ARRAY column, or key by key into the columns of its name with
MATCH_BY_COLUMN_NAME; a CSV record's fields go to the columns in order. With a SELECT
the items compile as a pipe's do (sql/transform.py) and map to the columns by position.

One Delta commit per statement holds the rows of every file loaded and their load
history (warehouse/load_history.py), so a file is in the table whole or not at all, and
a file already loaded is skipped unless FORCE=TRUE. A bad record or a value that does
not fit its column is a row error with its file and line: ON_ERROR=ABORT_STATEMENT (the
default) stops with nothing loaded, SKIP_FILE loads nothing of that file, CONTINUE
loads the file's other rows. The result has one row per file, as Snowflake prints it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from floeline.errors import SqlError
from floeline.ingest.file_load import load_files
from floeline.records.file_formats import FileFormat
from floeline.naming import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.sql.stage_ddl import StageRef, options_of, parse_stage_ref, value_of
from floeline.sql.statements import Name, Statement, select_item_texts, table_name
from floeline.sql.transform import compile_stage_select
from floeline.warehouse import load_history, stages, tables
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.stage_paths import inside_stage
from floeline.warehouse.pipes import Pipe, PipeColumn
from floeline.records.columns import TableSchema

ON_ERROR = ("ABORT_STATEMENT", "CONTINUE", "SKIP_FILE")
_VARIANT_TYPES = ("variant",)
RESULT_COLUMNS = ("file string, status string, rows_parsed bigint, rows_loaded bigint, "
                  "errors_seen bigint, first_error string, first_error_line bigint")


@dataclass(frozen=True)
class CopyStatement:
    """What a COPY INTO statement asks for, checked."""

    table: Name
    columns: tuple[str, ...] | None  # COPY INTO t (a, b): the target columns
    stage: StageRef
    select: exp.Select | None
    files: tuple[str, ...] | None
    pattern: str | None
    file_format: dict | None
    on_error: str | None  # None: the default (COPY: ABORT_STATEMENT; a pipe: SKIP_FILE)
    force: bool
    match_by_column_name: bool


def parse_copy(tree: exp.Copy) -> CopyStatement:
    target = tree.this
    columns = None
    if isinstance(target, exp.Schema):
        columns = tuple(i.name if i.args.get("quoted") else i.name.upper() for i in target.expressions)
        target = target.this
    if not tree.args.get("kind"):
        raise SqlError("COPY INTO @stage (unloading) is not supported; COPY INTO a table loads files")
    source = tree.args["files"][0]
    select = None
    if isinstance(source, exp.Subquery):
        select = source.this
        if not isinstance(select, exp.Select):
            raise SqlError("COPY INTO t FROM (SELECT ... FROM @stage): expected a SELECT")
        source = (select.args.get("from_") or select.args.get("from")).this
        if select.args.get("joins"):
            raise SqlError("a COPY transformation reads one stage: no joins")
    if not isinstance(source, exp.Table) or not str(source.this).startswith("@"):
        raise SqlError("COPY INTO t FROM @stage[/path] or FROM (SELECT ... FROM @stage[/path])")
    stage = parse_stage_ref(str(source.this))
    params = {}
    for param in tree.args.get("params") or []:
        name = param.name.upper()
        if name == "FILE_FORMAT":
            params[name] = options_of(param.expressions)
        else:
            params[name] = value_of(param.args["expression"])
    unknown = set(params) - {"FILES", "PATTERN", "FILE_FORMAT", "ON_ERROR", "FORCE", "MATCH_BY_COLUMN_NAME"}
    if unknown:
        raise SqlError(f"COPY option {', '.join(sorted(unknown))} is not supported (FILES, PATTERN, "
                       f"FILE_FORMAT, ON_ERROR, FORCE, MATCH_BY_COLUMN_NAME)")
    on_error = str(params["ON_ERROR"]).upper() if "ON_ERROR" in params else None
    if on_error is not None and on_error not in ON_ERROR:
        raise SqlError(f"ON_ERROR={on_error} is not supported ({', '.join(ON_ERROR)})")
    match = str(params.get("MATCH_BY_COLUMN_NAME", "NONE")).upper()
    if match not in ("NONE", "CASE_INSENSITIVE"):
        raise SqlError(f"MATCH_BY_COLUMN_NAME={match} is not supported (CASE_INSENSITIVE, NONE)")
    if match != "NONE" and select is not None:
        raise SqlError("MATCH_BY_COLUMN_NAME cannot be used with a COPY transformation (SELECT)")
    files = params.get("FILES")
    if files is not None and not isinstance(files, list):
        files = [files]
    for name in files or []:
        inside_stage(str(name), "@" + ".".join(stage.name.parts), "FILES entry")
    force = params.get("FORCE", False)
    return CopyStatement(
        table=table_name(target), columns=columns, stage=stage, select=select,
        files=tuple(str(f) for f in files) if files is not None else None,
        pattern=str(params["PATTERN"]) if "PATTERN" in params else None,
        file_format=params.get("FILE_FORMAT"), on_error=on_error,
        force=force is True or str(force).upper() == "TRUE", match_by_column_name=match != "NONE")


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



def transformation(copy: CopyStatement, schema: TableSchema, fmt: FileFormat,
                   statement: Statement) -> Pipe | None:
    """The Pipe (one expression per table column) that makes rows of records, or None
    for MATCH_BY_COLUMN_NAME (the default pipe's key matching)."""
    names = [c.name for c in schema.columns]
    targets = list(copy.columns) if copy.columns else names
    for column in targets:
        if column not in names:
            raise SqlError(f"column {column} is not in the table ({', '.join(names)})")
    positional = fmt.type == "CSV"
    if copy.select is not None:
        compiled = compile_stage_select(copy.select, targets, select_item_texts(statement), positional)
    elif copy.match_by_column_name:
        if positional:
            raise SqlError("MATCH_BY_COLUMN_NAME needs a JSON or Parquet file format")
        return None
    elif positional:
        # Fields are text (NULL_IF / empty fields null), converted to each column's type.
        compiled = [PipeColumn(f"variant_get(v, '$[{i}]', 'string')") for i in range(len(targets))]
        n = len(targets)
        compiled[0] = PipeColumn(compiled[0].value_sql, (  # ERROR_ON_COLUMN_COUNT_MISMATCH=TRUE
            f"CASE WHEN json_array_length(to_json(v)) != {n} THEN concat('the record has ', "
            f"json_array_length(to_json(v)), ' fields but the table has {n} columns') END"))
    else:
        kinds = {c.name: c.type for c in schema.columns}
        if len(targets) != 1 or kinds[targets[0]] not in _VARIANT_TYPES:
            raise SqlError(
                f"a {fmt.type} file's record is one value: the table needs one VARIANT column to "
                f"load it whole (it has {', '.join(targets)}); load it into separate columns with "
                f"MATCH_BY_COLUMN_NAME=CASE_INSENSITIVE or a transformation "
                f"(COPY INTO t FROM (SELECT $1:a, $1:b FROM @stage))")
        compiled = (PipeColumn("v"),)
    by_name = dict(zip(targets, compiled))
    return Pipe(name="COPY", table="", kind="copy", sql=statement.text,
                columns=tuple(by_name.get(n, PipeColumn("NULL")) for n in names))
