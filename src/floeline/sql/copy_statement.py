"""COPY INTO as written -> what it asks for, checked (CopyStatement), and the Pipe
that makes a table's rows of a file's records (`transformation`). COPY INTO runs it
(sql/copy.py); CREATE PIPE ... AS COPY INTO stores it (sql/ddl.py)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from floeline.errors import SqlError
from floeline.records.file_formats import FileFormat
from floeline.sql.clauses import StageRef, options_of, parse_stage_ref, value_of
from floeline.sql.statements import Name, Statement, select_item_texts, table_name
from floeline.warehouse.pipe_select import compile_stage_select
from floeline.warehouse.pipes import Pipe, PipeColumn
from floeline.warehouse.stage_paths import inside_stage
from floeline.records.columns import TableSchema

ON_ERROR = ("ABORT_STATEMENT", "CONTINUE", "SKIP_FILE")
_VARIANT_TYPES = ("variant",)


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
