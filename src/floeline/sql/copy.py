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

import time
from dataclasses import dataclass

from sqlglot import exp

from floeline.errors import SqlError
from floeline.records import shaping
from floeline.records.content import quote_column
from floeline.records.file_formats import FileFormat
from floeline.sources.stage import read_staged
from floeline.sql.ddl import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.sql.stage_ddl import StageRef, options_of, parse_stage_ref, value_of
from floeline.sql.statements import Name, Statement, select_item_texts, table_name
from floeline.sql.transform import compile_stage_select
from floeline.warehouse import load_history, stage_store, stages, tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.load_history import LOAD_FAILED, LOADED, PARTIALLY_LOADED, SKIPPED, FileLoad
from floeline.warehouse.pipes import Pipe, PipeColumn
from floeline.warehouse.tables import TableSchema

ON_ERROR = ("ABORT_STATEMENT", "CONTINUE", "SKIP_FILE")
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"  # of no bytes
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


# ---- the load --------------------------------------------------------------------------


def load_files(spark, ref: TableRef, schema: TableSchema, stage: stages.Stage, files, fmt: FileFormat,
               pipe: Pipe | None, on_error: str, history: load_history.Loaded | None,
               pipe_name: str | None = None, commit_extra: dict | None = None) -> list[FileLoad]:
    """Load `files` into the table in one commit; the FileLoad of each file processed
    (files whose content the table already holds are left out unless `history` is None).
    `pipe` None: the default pipe's key matching (MATCH_BY_COLUMN_NAME). `commit_extra`:
    more keys for the commit's userMetadata (the SNOWPIPE method's channel positions),
    committed atomically with the rows and the load history."""
    from pyspark import StorageLevel

    if not files:
        return []
    scan_time = int(time.time() * 1000)
    # Spark's file sources skip empty files: they are loaded here, with no rows.
    empty = [{"file": f.name, "size": 0, "md5": EMPTY_MD5, "modified_ms": f.modified_ms, "parsed": 0,
              "errors": 0, "first": None} for f in files if f.size == 0]
    stage_store.prepare_spark(spark, stage)
    # The files are read and parsed once; the figures and the write reuse the result.
    rows = read_staged(spark, [f for f in files if f.size > 0], fmt).selectExpr(
        "file", "size", "modified_ms", "md5", "row", "line", "error",
        "CASE WHEN value IS NOT NULL THEN try_parse_json(value) END AS v").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        good = rows.where("row > 0 AND error IS NULL AND v IS NOT NULL").selectExpr(
            "*", "file AS channel", "CAST(row AS STRING) AS position", "CAST(NULL AS TIMESTAMP) AS timestamp",
            "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers",
            "named_struct('line', line) AS source", "CAST(NULL AS STRING) AS _error_class",
            "CAST(NULL AS BINARY) AS _raw_key", "CAST(NULL AS BINARY) AS _raw_value",
            "CAST(NULL AS VARIANT) AS _meta", "file AS _file", "row AS _row", "md5 AS _md5",
            "timestamp_millis(modified_ms) AS _file_modified", f"timestamp_millis({scan_time}) AS _scan_time")
        if pipe is None:
            merged = good.selectExpr("schema_of_variant_agg(v) AS s").first()["s"]
            shaped = shaping.default_pipe_rows(schema, good, shaping.fields_of(merged) if merged else {},
                                               reject_unmatched=False, binary_format="HEX")
        else:
            shaped = shaping.pipe_rows(schema, good, pipe)
        error = "_row_error" if "_row_error" in shaped.columns else "CAST(NULL AS STRING)"
        columns = [f"_c{i}" for i in range(len(schema.columns))]
        shaped = shaped.selectExpr("_src_channel AS file", "CAST(_src_position AS BIGINT) AS row",
                                   "_src_source.line AS line", f"{error} AS error", *columns)
        # Each file's own row (row 0: its identity, or why it could not be read) and the
        # records that did not parse, beside the shaped rows: the per-file figures.
        checked = rows.where("NOT (row > 0 AND error IS NULL AND v IS NOT NULL)").selectExpr(
            "file", "row", "line", "CASE WHEN row > 0 AND error IS NULL THEN 'invalid JSON (or a value "
            "over the 16 MiB VARIANT limit)' ELSE error END AS error", "size", "md5", "modified_ms"
        ).unionByName(shaped.selectExpr("file", "row", "line", "error", "CAST(NULL AS BIGINT) AS size",
                                        "CAST(NULL AS STRING) AS md5", "CAST(NULL AS BIGINT) AS modified_ms"))
        figures = checked.groupBy("file").agg(*[_expr(e) for e in (
            "max(CASE WHEN row = 0 THEN size END) AS size", "max(CASE WHEN row = 0 THEN md5 END) AS md5",
            "max(CASE WHEN row = 0 THEN modified_ms END) AS modified_ms",
            "count_if(row > 0) AS parsed", "count_if(error IS NOT NULL) AS errors",
            "min_by(named_struct('row', row, 'line', line, 'error', error), "
            "CASE WHEN error IS NOT NULL THEN row END) AS first")]).collect()
        loads = _file_loads(figures + empty, stage, on_error, history, pipe_name)
        keep = [f.file for f in loads if f.loaded]
        out = shaped.where("error IS NULL")
        out = out.where(out.file.isin(keep)) if keep else out.limit(0)
        out = out.selectExpr(*[f"{c} AS {quote_column(col.name)}" for c, col in zip(columns, schema.columns)])
        if loads:
            (out.write.format("delta").mode("append")
             .option("userMetadata", load_history.commit_metadata(loads, commit_extra)).save(ref.path))
        return [f for f in loads if f.status != SKIPPED]
    finally:
        rows.unpersist()


def _expr(text: str):
    from pyspark.sql import functions

    return functions.expr(text)


def _file_loads(figures, stage, on_error: str, history, pipe_name) -> list[FileLoad]:
    """Each file's FileLoad under ON_ERROR (raises for ABORT_STATEMENT)."""
    loads = []
    for figure in sorted(figures, key=lambda r: r["file"]):
        file, size, md5 = figure["file"], figure["size"], figure["md5"]
        if history is not None and history.holds(stage.full_name, file, size, md5):
            # already loaded (same path and content), touched or re-uploaded since
            loads.append(FileLoad(stage=stage.full_name, file=file, size=size, md5=md5,
                                  modified_ms=figure["modified_ms"], status=SKIPPED, rows_parsed=0,
                                  rows_loaded=0, errors_seen=0, pipe=pipe_name))
            continue
        errors_seen, first = figure["errors"], figure["first"]
        first_error = first["error"] if errors_seen else None
        first_line = first["line"] if errors_seen and first["row"] else None
        file_failed = bool(errors_seen) and first["row"] == 0
        if errors_seen and on_error == "ABORT_STATEMENT":
            where = "" if file_failed else f", line {first_line} (record {first['row']})"
            raise SqlError(f"file {file} of stage {stage.full_name}{where}: {first_error} "
                           f"(nothing was loaded: ON_ERROR=ABORT_STATEMENT; fix the file, or load "
                           f"the rest with ON_ERROR=CONTINUE or SKIP_FILE)")
        if file_failed or (errors_seen and on_error == "SKIP_FILE"):
            status, loaded = LOAD_FAILED, 0
        else:
            loaded = figure["parsed"] - errors_seen
            status = LOADED if not errors_seen else PARTIALLY_LOADED if loaded else LOAD_FAILED
        loads.append(FileLoad(stage=stage.full_name, file=file, size=size, md5=md5,
                              modified_ms=figure["modified_ms"], status=status,
                              rows_parsed=figure["parsed"], rows_loaded=loaded, errors_seen=errors_seen,
                              first_error=first_error, first_error_line=first_line, pipe=pipe_name))
    return loads
