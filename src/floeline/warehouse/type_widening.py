"""Schema evolution beyond new columns: a NUMBER(p,s) column widened for numbers with
more digits (Delta type widening), where the table has schema evolution on.

A table created with `AMOUNT NUMBER(10,2)` whose records' schema grows the decimal
(an Avro decimal(10,2) that becomes decimal(14,4), a JSON number with more digits)
would round the new values to 2 places or reject those over 8 integer digits. With
ENABLE_SCHEMA_EVOLUTION = TRUE the column becomes the narrowest decimal that holds
both the column's values and the batch's (here NUMBER(14,4)), as Delta's type
widening allows without rewriting a file: the rows already written read as they
were. Past NUMBER(38, s), or for a column that is no decimal, nothing widens: the
values convert by Snowflake's rules (rounded to the scale; out of range, a row
error). Whole numbers alone never widen a column (a variant integer's type says its
digits only past 18 of them, so 10**11 and 10**20 would differ): one too large for the
column stays a row error, as in Snowflake.

Delta's typeWidening table feature is turned on only when a column first widens; a
reader must know it (Spark with Delta 3.2 or later; see docs/sql.md)."""

from __future__ import annotations

import re

from floeline.errors import TableError
from floeline.records import shaping
from floeline.records.columns import Column
from floeline.records.content import quote_column
from floeline.warehouse.catalog import TableRef

TYPE_WIDENING_PROPERTY = "delta.enableTypeWidening"
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)", re.IGNORECASE)


def widened_decimal(column_type: str, batch_type: str) -> str | None:
    """The decimal type a column of `column_type` widens to for a batch whose values
    have the variant type `batch_type` (schema_of_variant_agg's: "DECIMAL(14,4)"), or
    None when it need not or cannot (not two decimals; over 38 digits)."""
    column, batch = _DECIMAL.fullmatch(column_type.strip()), _DECIMAL.fullmatch(batch_type.strip())
    if column is None or batch is None:
        return None
    precision, scale = int(column.group(1)), int(column.group(2))
    batch_precision, batch_scale = int(batch.group(1)), int(batch.group(2))
    if batch_scale == 0:  # whole numbers: BIGINT up to 18 digits, DECIMAL(p,0) past it
        return None
    new_scale = max(scale, batch_scale)
    new_precision = max(precision - scale, batch_precision - batch_scale) + new_scale
    if new_precision > 38 or (new_precision, new_scale) == (precision, scale):
        return None
    return f"decimal({new_precision},{new_scale})"


def widenings(columns, fields) -> list[tuple[Column, str]]:
    """(column, its wider type) for each decimal column the batch's `fields` (column
    name -> (keys, variant type)) need wider; declared types (VARCHAR(10), TIME: the
    Spark type is not the whole type) are left as they are."""
    out = []
    for column in columns:
        if column.declared or column.identity is not None:
            continue
        keys, batch_type = shaping.field_for(column, fields)
        wider = widened_decimal(column.type, batch_type) if keys else None
        if wider is not None:
            out.append((column, wider))
    return out


def widen(spark, ref: TableRef, changes: list[tuple[Column, str]], properties: dict[str, str]) -> None:
    """ALTER the columns of `changes` to their wider types, turning Delta's type
    widening on first (unless `properties`, the table's, have it)."""
    path = f"delta.{quote_column(ref.path)}"
    statements = [] if str(properties.get(TYPE_WIDENING_PROPERTY, "")).lower() == "true" else [
        f"ALTER TABLE {path} SET TBLPROPERTIES ('{TYPE_WIDENING_PROPERTY}' = 'true')"]
    statements += [f"ALTER TABLE {path} ALTER COLUMN {quote_column(column.name)} TYPE {wider}"
                   for column, wider in changes]
    for statement in statements:
        try:
            spark.sql(statement)
        except Exception as exc:  # Spark's own exception types: name the table and column
            raise TableError(f"table {ref.full_name} at {ref.path}: widening a column for the batch's "
                             f"numbers failed ({statement.replace(path, 'the table')}): {exc}") from exc
