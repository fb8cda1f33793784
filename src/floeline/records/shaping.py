"""Table rows from a micro-batch's records: the default pipe `{TABLE}-STREAMING`
(first-level keys -> columns, case-insensitively) and user-defined pipes (a SELECT
list, by position). Each returns the rows in the table's layout as `_c0, _c1, ...`
plus the record's source columns (`_src_*`, `_raw_*`, for errors and the DLQ) and,
when some value can fail, `_row_error` naming the failure. Pure SQL building: the
connector decides what to do with the rows."""

from __future__ import annotations

from floeline.naming import column_match_key, column_name_for_key
from floeline.records import values_to_columns
from floeline.records.columns import METADATA_COLUMN, Column, TableSchema, stores_json
from floeline.records.metadata import metadata_value_sql
from floeline.records.content import has_key_sql, key_value_sql, parse_object_schema, sql_string

CONTENT_COLUMN = "RECORD_CONTENT"  # legacy layout, snowflake.enable.schematization=false
# The record's source columns every shaped row carries (as _src_*), for bad records.
_SOURCE = ("channel", "position", "timestamp", "headers", "source", "_error_class")


def fields_of(merged_schema: str, normalize: bool = False) -> dict[str, tuple[list[str], str]]:
    """Column name -> (the JSON keys that map to it, their variant type), from a
    schema_of_variant(_agg) result; keys naming one column (differing only in case,
    such as `c` and `"c"` when keys are normalized) share it. `normalize`: see
    naming.column_name_for_key."""
    fields: dict[str, tuple[list[str], str]] = {}
    index: dict[str, str] = {}
    for key, vtype in parse_object_schema(merged_schema):
        name = column_name_for_key(key, normalize)
        existing = index.get(column_match_key(name))
        if existing is None:
            index[column_match_key(name)] = name
            fields[name] = ([key], vtype)
        else:
            keys, old = fields[existing]
            fields[existing] = (keys + [key], old if old == vtype else "VARIANT")
    return fields


def field_for(column: Column, fields) -> tuple[list[str], str]:
    """The JSON keys matching `column` (case-insensitively) and their batch type."""
    wanted = column_match_key(column.name)
    for name, field in fields.items():
        if column_match_key(name) == wanted:
            return field
    return [], "VOID"



def unmatched_keys(schema: TableSchema, fields) -> list[str]:
    """The batch's keys that name no column of the table (schema evolution is off, or
    refused their columns)."""
    return [key for name, (keys, _type) in fields.items()
            if schema.find(name) is None for key in keys]


# Past this many keys without a column, a record's row error is found with one array
# expression instead of one CASE per key (Spark plans 100,000 of those for hours).
_KEYS_LISTED = 50


def unmatched_keys_error_sql(keys: list[str], evolution: bool, table: str,
                             evolution_refused: str | None = None) -> str:
    """The row error of a record holding any of `keys` (even as null), as Snowflake's
    connector rejects a record with a key that has no column; None-free SQL.
    `evolution_refused`: why schema evolution left keys without a column this batch."""
    if evolution_refused is not None:
        return _many_keys_error_sql(keys, table, evolution_refused)
    if len(keys) > _KEYS_LISTED:
        return _many_keys_error_sql(keys, table, _unmatched_why(evolution, table))
    held = ", ".join(f"CASE WHEN {key_value_sql(k)} IS NOT NULL THEN {sql_string(repr(k))} END"
                     for k in keys)
    return (f"CASE WHEN concat_ws(', ', {held}) != '' THEN concat('record key ', "
            f"concat_ws(', ', {held}), {sql_string(f' matches no column of table {table}: ' + _unmatched_why(evolution, table))}) END")


def _many_keys_error_sql(keys: list[str], table: str, why: str) -> str:
    """The row error of a record holding any of many `keys`: the record's own keys
    (json_object_keys) against `keys`, one literal array; names the count and the first."""
    import json

    held = (f"array_intersect(json_object_keys(to_json(v)), "
            f"from_json({sql_string(json.dumps(sorted(set(keys))))}, 'array<string>'))")
    return (f"CASE WHEN size({held}) > 0 THEN concat('record has ', size({held}), ' keys that match no "
            f"column of table ', {sql_string(table)}, ' (', array_join(slice(array_sort({held}), 1, 5), ', '), "
            f"CASE WHEN size({held}) > 5 THEN ', ...' ELSE '' END, '): ', {sql_string(why)}) END")


def _unmatched_why(evolution: bool, table: str) -> str:
    if evolution:
        why = ("schema evolution did not add its column (the table changed under the "
               "connector): the record lands once the batch runs again")
    else:
        why = (f"schema evolution is off (ENABLE_SCHEMA_EVOLUTION = FALSE when the connector "
               f"opened the table): add the column (ALTER TABLE {table} ADD COLUMN ...), or ALTER "
               f"TABLE {table} SET ENABLE_SCHEMA_EVOLUTION = TRUE and restart the connector")
    return why


def default_pipe_rows(schema: TableSchema, table_rows, fields, schematization: bool = True,
                      table: str = "", reject_unmatched: bool = True,
                      rules: values_to_columns.Rules = values_to_columns.SERVER_SIDE,
                      evolution_refused: str | None = None, carry: tuple[str, ...] = ()):
    """Rows in the table's column layout (as _c0, _c1, ...), with `_row_error` naming
    why a record cannot land (a key with no column, a value that does not fit its
    column by Snowflake's conversion rules: records/values_to_columns.py) when one can fail.
    Values are extracted in one projection and checked in the next, so each is
    computed once. `reject_unmatched=False` ignores keys without a column (COPY's
    MATCH_BY_COLUMN_NAME, and the server-side default pipe of a table with evolution
    off); else such a record is a row error. `rules`: the conversion rules of the
    connector's validation mode (values_to_columns.Rules).

    A column no record of the batch has a key for is left out (no `_c<i>`): Delta
    writes NULL, the column's DEFAULT or its next AUTOINCREMENT value there; a record
    without the key of a DEFAULT column gets the default (one whose key holds null
    gets NULL). `carry`: more columns of `table_rows` passed through as they are."""
    values, errors, xs, stages = [], [], [], [[], []]
    unmatched = unmatched_keys(schema, fields) if reject_unmatched else []
    if unmatched:  # checked first, as Snowflake checks a row's columns before its values
        errors.append(unmatched_keys_error_sql(unmatched, schema.evolution, table, evolution_refused))
    for i, column in enumerate(schema.columns):
        ref = f"_c{i}"
        keys, batch_type = field_for(column, fields)
        if not keys and (column.nullable or column.default is not None) and not (
                column.name.upper() == METADATA_COLUMN
                or (column.name.upper() == CONTENT_COLUMN and not schematization)):
            continue
        if column.name.upper() == METADATA_COLUMN and not keys:
            # `_meta_json`: the same metadata built as JSON text (ingest/general.py)
            text = stores_json(column) and "_meta_json" in table_rows.columns
            values.append(f"{'_meta_json' if text else metadata_value_sql(column.type)} AS {ref}")
        elif column.name.upper() == CONTENT_COLUMN and not schematization:
            # A tombstone kept by behavior.on.null.values=DEFAULT is an empty object.
            content = "CASE WHEN _tombstone THEN parse_json('{}') ELSE v END"
            values.append(f"{f'to_json({content})' if stores_json(column) else content} AS {ref}")
        elif keys:
            # The value's forms (kind, text, epoch) each get a projection of their own,
            # so the rule reads them as columns instead of repeating their expressions.
            forms = values_to_columns.Forms(f"_x{i}", f"_k{i}", f"_t{i}", f"_n{i}")
            xs.append(f"{_first_held(keys)} AS {forms.x}")
            for stage, exprs in zip(stages, values_to_columns.forms_sql(column, forms, rules)):
                stage.extend(exprs)
            value = values_to_columns.value_sql(column, forms, rules)
            if column.default is not None:  # as COPY's MATCH_BY_COLUMN_NAME: a missing
                # key takes the default, a key holding null is NULL
                value = (f"CASE WHEN {has_key_sql(keys)} THEN {value} "
                         f"ELSE CAST(({column.default}) AS {column.type}) END")
            values.append(f"{value} AS {ref}")
            # Checked per row only when this batch holds values that may not fit.
            if not values_to_columns.always_fits(batch_type, column, rules):
                errors.append(values_to_columns.error_sql(column, ref, forms.x, keys, rules))
        else:
            values.append(f"CAST(NULL AS {column.type}) AS {ref}")
        if not column.nullable:
            errors.append(f"CASE WHEN {ref} IS NULL THEN "
                          f"{sql_string('NOT NULL column ' + column.name + ' receives null')} END")
    coords = [f"{c} AS _src_{c}" for c in _SOURCE]
    read = ["_raw_key", "_raw_value", "v", *carry] + [
        c for c in ("_meta", "_meta_json", "_tombstone") if c in table_rows.columns]
    shaped = table_rows.selectExpr(*coords, *read, *xs)
    for stage in stages:
        if stage:
            shaped = shaped.selectExpr("*", *stage)
    kept = [f"_src_{c}" for c in _SOURCE] + ["_raw_key", "_raw_value", "v", *carry] + [
        x.rsplit(" AS ", 1)[1] for x in xs]
    shaped = shaped.selectExpr(*kept, *values)
    if errors:
        shaped = shaped.selectExpr("*", f"coalesce({', '.join(errors)}) AS _row_error")
    return shaped


def _first_held(keys: list[str]) -> str:
    """The VARIANT value of the first of `keys` the record holds with a value (keys
    differing only in case share a column)."""
    if len(keys) == 1:
        return key_value_sql(keys[0])
    whens = " ".join(f"WHEN {key_value_sql(k)} IS NOT NULL AND NOT is_variant_null({key_value_sql(k)}) "
                     f"THEN {key_value_sql(k)}" for k in keys)
    return f"CASE {whens} END"



def pipe_rows(schema: TableSchema, table_rows, pipe):
    """Rows in the table's layout (as _c0, _c1, ...) computed by a user-defined pipe's
    SELECT list (positional); a failed expression or a value that does not fit its
    column is a row error (`_row_error`), never a silent NULL."""
    computed, kept, casts, errors = [], [], [], []
    for i, column in enumerate(schema.columns):
        ref = f"_c{i}"
        if i < len(pipe.columns):
            expr = pipe.columns[i]
            computed.append(f"({expr.value_sql}) AS _pv{i}")
            kept.append(f"_pv{i}")
            if expr.error_sql:
                computed.append(f"({expr.error_sql}) AS _pe{i}")
                kept.append(f"_pe{i}")
                errors.append(f"_pe{i}")
            # A semi-structured column stored as JSON text takes the value as VARIANT's JSON.
            casts.append(f"to_json(try_cast(_pv{i} AS variant)) AS {ref}" if stores_json(column)
                         else f"try_cast(_pv{i} AS {column.type}) AS {ref}")
            errors.append(
                f"CASE WHEN _pv{i} IS NOT NULL AND {ref} IS NULL THEN concat("
                f"{sql_string(f'pipe {pipe.name}: value ')}, left(CAST(_pv{i} AS STRING), 200), "
                f"{sql_string(f' does not fit column {column.name} of type {column.type}')}) END")
        else:  # columns added after the pipe was created
            casts.append(f"CAST(NULL AS {column.type}) AS {ref}")
        if not column.nullable:
            errors.append(f"CASE WHEN {ref} IS NULL THEN "
                          f"{sql_string('NOT NULL column ' + column.name + ' receives null')} END")
    source = _SOURCE
    passed = [f"_src_{c}" for c in source] + ["_raw_key", "_raw_value"]
    shaped = (table_rows.selectExpr(*[f"{c} AS _src_{c}" for c in source], "_raw_key",
                                    "_raw_value", *computed)
              .selectExpr(*passed, *kept, *casts))
    return shaped.selectExpr("*", f"coalesce({', '.join(errors)}) AS _row_error")
