"""The SELECT of a pipe (or of an interactive table) -> one PipeColumn per table column.

Snowflake's streaming transformation is a projection of the record: select items map
to the table's columns by position (an alias is documentation only), the source is
TABLE(DATA_SOURCE(TYPE => 'STREAMING')), and there is no WHERE, JOIN or GROUP BY."""

from __future__ import annotations

import re

from sqlglot import exp

from floeline.errors import SqlError
from floeline.records.content import sql_string
from floeline.records.snowflake_sql.expressions import Compiler, Mode
from floeline.warehouse.pipes import PipeColumn

_SOURCE = "TABLE(DATA_SOURCE(TYPE=>'STREAMING'))"
_UNSUPPORTED = ("where", "group", "having", "order", "limit", "joins", "laterals", "qualify",
                "distinct", "with", "windows")


def compile_select(select: exp.Select, columns: list[str],
                   texts: list[str] | None = None) -> tuple[PipeColumn, ...]:
    """The select list compiled for `columns` (the table's column names, in order);
    `texts` are the items as written, quoted in error messages."""
    source = select.args.get("from_") or select.args.get("from")
    if source is None or re.sub(r"\s+", "", source.this.sql("snowflake")).upper() != _SOURCE:
        raise SqlError("the SELECT must read FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))")
    return _compile_items(select, columns, texts, Compiler(Mode.PIPE), "a streaming pipe's SELECT")


def compile_stage_select(select: exp.Select, columns: list[str], texts: list[str] | None,
                         positional: bool) -> tuple[PipeColumn, ...]:
    """The select list of COPY INTO ... FROM (SELECT ... FROM @stage), compiled for
    `columns`: `$1` is the record (`$1`, `$2`, ... its fields for CSV, `positional`),
    and METADATA$FILENAME, METADATA$FILE_ROW_NUMBER, ... the file's columns."""
    return _compile_items(select, columns, texts, Compiler(Mode.PIPE, staged=True, positional=positional),
                          "a COPY transformation")


def _compile_items(select: exp.Select, columns: list[str], texts: list[str] | None,
                   compiler: Compiler, what: str) -> tuple[PipeColumn, ...]:
    for key in _UNSUPPORTED:
        if select.args.get(key):
            raise SqlError(f"{key.upper()} is not supported in {what}: "
                           f"it maps each record to one row (use IFF/CASE for conditions)")
    items = select.expressions
    if any(isinstance(i, exp.Star) for i in items):
        raise SqlError(f"SELECT * is not supported in {what}: list one expression per table column")
    if len(items) != len(columns):
        raise SqlError(f"the SELECT has {len(items)} item{'s' if len(items) != 1 else ''} but the table "
                       f"has {len(columns)} column{'s' if len(columns) != 1 else ''} "
                       f"({', '.join(columns)}); select items map to columns by position")
    out = []
    texts = texts if texts and len(texts) == len(items) else [i.sql("snowflake") for i in items]
    for item, column, text in zip(items, columns, texts):
        try:
            compiled = compiler.compile(item.this if isinstance(item, exp.Alias) else item)
        except SqlError as exc:
            raise SqlError(f"column {column} ({text}): {exc}") from None
        error = compiled.error_sql
        if error is not None:
            prefix = f"column {column} ({text if len(text) <= 120 else text[:117] + '...'}): "
            error = f"concat({sql_string(prefix)}, {error})"
        out.append(PipeColumn(value_sql=compiled.sql, error_sql=error))
    return tuple(out)
