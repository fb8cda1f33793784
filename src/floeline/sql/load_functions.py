"""What a query can ask about file loads, as in Snowflake:

  SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 'T'
                                                      [, START_TIME => ...] [, END_TIME => ...]))
  SELECT SYSTEM$PIPE_STATUS('p')

COPY_HISTORY is the table's load history (warehouse/load_history.py): one row per
file load by COPY INTO or a pipe, with Snowflake's column names. SYSTEM$PIPE_STATUS is
a JSON text: the pipe's pending file count and its last load. Both are replaced in the
query tree by their values before the query is translated."""

from __future__ import annotations

import datetime as dt
import json

from sqlglot import exp

from floeline.errors import SqlError
from floeline.sql.statements import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.warehouse import load_history, pipes
from floeline.warehouse.catalog import Warehouse

HISTORY_COLUMNS = ("FILE_NAME", "STAGE_LOCATION", "LAST_LOAD_TIME", "ROW_COUNT", "ROW_PARSED",
                   "FILE_SIZE", "FIRST_ERROR_MESSAGE", "FIRST_ERROR_LINE_NUMBER", "ERROR_COUNT",
                   "STATUS", "TABLE_NAME", "PIPE_NAME")
_STATUS = {"LOADED": "Loaded", "PARTIALLY_LOADED": "Partially loaded", "LOAD_FAILED": "Load failed"}


def expand_load_functions(spark, tree: exp.Expression, warehouse: Warehouse) -> exp.Expression:
    for node in list(tree.find_all(exp.TableFromRows)):
        function = node.this.expression if isinstance(node.this, exp.Dot) else node.this
        if isinstance(function, exp.Anonymous) and function.name.upper() == "COPY_HISTORY":
            alias = node.args.get("alias")
            subquery = exp.Subquery(this=_copy_history(spark, function, warehouse),
                                    alias=alias or exp.TableAlias(this=exp.to_identifier("copy_history")))
            node.replace(subquery)
    for node in list(tree.find_all(exp.Anonymous)):
        if node.name.upper() == "SYSTEM$PIPE_STATUS":
            node.replace(exp.Literal.string(_pipe_status(spark, node, warehouse)))
    return tree


def _kwargs(function: exp.Anonymous) -> dict[str, exp.Expression]:
    out = {}
    for arg in function.expressions:
        if not isinstance(arg, exp.Kwarg):
            raise SqlError(f"{function.name}: name each argument (TABLE_NAME => 'T')")
        out[arg.this.name.upper()] = arg.expression
    return out


def _copy_history(spark, function: exp.Anonymous, warehouse: Warehouse) -> exp.Select:
    args = _kwargs(function)
    unknown = set(args) - {"TABLE_NAME", "START_TIME", "END_TIME"}
    if unknown or "TABLE_NAME" not in args:
        raise SqlError("COPY_HISTORY takes TABLE_NAME => 'T' and optionally START_TIME => ..., "
                       "END_TIME => ...")
    name = args["TABLE_NAME"]
    if not (isinstance(name, exp.Literal) and name.is_string):
        raise SqlError("COPY_HISTORY(TABLE_NAME => ...) takes the table's name as a string")
    ref = warehouse.resolve(name.this.split("."))
    rows = []
    for entry in load_history.read_history(spark, ref):
        load = entry.load
        if load.status == load_history.SKIPPED:
            continue
        when = dt.datetime.fromtimestamp(entry.timestamp_ms / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S.%f")
        rows.append(exp.Tuple(expressions=[
            exp.Literal.string(load.file), exp.Literal.string("@" + load.stage),
            exp.cast(exp.Literal.string(when), "TIMESTAMP"), exp.Literal.number(load.rows_loaded),
            exp.Literal.number(load.rows_parsed), exp.Literal.number(load.size),
            _text(load.first_error), _number(load.first_error_line), exp.Literal.number(load.errors_seen),
            exp.Literal.string(_STATUS.get(load.status, load.status)), exp.Literal.string(ref.full_name),
            _text(load.pipe)]))
    if rows:
        select = exp.select("*").from_(exp.Values(expressions=rows, alias=exp.TableAlias(
            this=exp.to_identifier("h"), columns=[exp.to_identifier(c) for c in HISTORY_COLUMNS])))
    else:
        select = exp.select(*[exp.alias_(exp.cast(exp.null(), _type(c)), c) for c in HISTORY_COLUMNS]).where(
            exp.false())
    if "START_TIME" in args:
        select = select.where(exp.GTE(this=exp.column("LAST_LOAD_TIME"), expression=args["START_TIME"].copy()))
    if "END_TIME" in args:
        select = select.where(exp.LT(this=exp.column("LAST_LOAD_TIME"), expression=args["END_TIME"].copy()))
    return select


def _type(column: str) -> str:
    if column == "LAST_LOAD_TIME":
        return "TIMESTAMP"
    if column in ("ROW_COUNT", "ROW_PARSED", "FILE_SIZE", "FIRST_ERROR_LINE_NUMBER", "ERROR_COUNT"):
        return "BIGINT"
    return "VARCHAR"


def _text(value) -> exp.Expression:
    return exp.cast(exp.null(), "VARCHAR") if value is None else exp.Literal.string(str(value))


def _number(value) -> exp.Expression:
    return exp.cast(exp.null(), "BIGINT") if value is None else exp.Literal.number(value)


def _pipe_status(spark, node: exp.Anonymous, warehouse: Warehouse) -> str:
    from floeline.ingest.pipe_service import pipe_status

    if len(node.expressions) != 1 or not (isinstance(node.expressions[0], exp.Literal)
                                          and node.expressions[0].is_string):
        raise SqlError("SYSTEM$PIPE_STATUS takes the pipe's name as a string: SYSTEM$PIPE_STATUS('p')")
    parts = node.expressions[0].this.split(".")
    database, schema, name = ([DEFAULT_DATABASE, DEFAULT_SCHEMA] + [p.upper() for p in parts])[-3:]
    pipe = pipes.load(warehouse, database, schema, "pipe", name)
    if pipe is None or not pipe.loads_files:
        raise SqlError(f"pipe {database}.{schema}.{name} does not exist or does not load staged files")
    status = pipe_status(spark, warehouse, database, schema, pipe)
    out = {"executionState": "RUNNING" if pipe.copy.get("auto_ingest") else "STOPPED_NO_AUTO_INGEST",
           "pendingFileCount": status.pending}
    if status.last_file is not None:
        out["lastIngestedFilePath"] = status.last_file
        out["lastIngestedTimestamp"] = dt.datetime.fromtimestamp(
            status.last_load_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    return json.dumps(out)
