"""The default pipe's tables: created on their first record, evolved for new keys
(Snowflake's schema evolution) and for NOT NULL columns records leave empty. Used by
the table sink and by the one-pass path's first batch of a table."""

from __future__ import annotations

from dataclasses import replace

from floeline.ingest.table_state import Tables, TableState
from floeline.naming import column_name_for_key
from floeline.records import shaping
from floeline.records.content import column_type_for, present_sql
from floeline.records.metadata import structured_metadata_type
from floeline.warehouse import tables, type_widening
from floeline.records.columns import METADATA_COLUMN, Column, TableSchema


class TablePreparer:
    def __init__(self, config, spark, tables_: Tables):
        self.config, self.spark, self.tables = config, spark, tables_

    def prepare(self, state: TableState, table_rows, fields, declared=None,
                primary_key: tuple[str, ...] = (), first_commit_creates: bool = False) -> TableSchema:
        """Create the table on its first record, or evolve it for new keys and for
        NOT NULL columns that records leave empty; returns its schema to write with. A
        new column's type is the one its key's schema declares (`declared`: key ->
        Spark type, from the value's Avro schema), else the type of this batch's values.
        `primary_key` (insert.mode=upsert): the primary key's fields, whose columns a new
        table gets NOT NULL and which it keeps (tables.read_primary_key).
        `first_commit_creates`: the caller appends the table's rows next with
        `state.creation` (commits.commit), so a new table that allows it is created by
        that commit instead of by CREATE TABLE now."""
        declared = declared or {}
        cfg = self.config
        settings = cfg.table_settings

        def new_column(name, keys, vtype) -> Column:
            return tables.in_storage(Column(name, next((declared[k] for k in keys if k in declared),
                                                       column_type_for(vtype))), settings.variant_storage)

        ref = state.ref
        normalize = cfg.column_normalization
        if state.creation is not None:  # decided for an earlier pass over the batch: decide again
            state.forget_schema()
        schema = self.tables.schema(state)
        if schema is None:
            metadata_type = (structured_metadata_type(cfg.source) if settings.structured_metadata
                             else "variant")
            metadata = tables.in_storage(Column(METADATA_COLUMN, metadata_type), settings.variant_storage)
            if not cfg.schematization:
                columns = [metadata, tables.in_storage(Column(shaping.CONTENT_COLUMN, "variant"),
                                                       settings.variant_storage)]
            else:
                # snowflake.metadata.all=false writes no metadata: no RECORD_METADATA column.
                columns = [metadata] if cfg.metadata.all_ else []
                columns += _within_bound(_addable(fields, columns, new_column), state, settings.max_new_columns)
                columns = _not_null(columns, [column_name_for_key(k, normalize) for k in primary_key])
            new = (tables.created_by_first_commit(columns, settings.auto_compact, primary_key, settings.iceberg)
                   if first_commit_creates else None)
            if new is not None:
                state.create_with_first_commit(new, TableSchema(tuple(columns), True))
                return state.schema
            tables.create_table(self.spark, ref, columns, evolution=True, auto_compact=settings.auto_compact,
                                primary_key=primary_key, own_checkpoints=True, iceberg=settings.iceberg)
            # The table is what was just created: no need to read it back.
            state.remember_schema(TableSchema(tuple(columns), True))
            return state.schema
        if not schema.evolution or not cfg.schematization:
            return schema
        new = _within_bound(_addable({name: field for name, field in fields.items()
                                      if schema.find(name) is None}, schema.columns, new_column),
                            state, settings.max_new_columns)
        changed = False
        if new:
            tables.add_columns(self.spark, ref, new)
            changed = True
        wider = type_widening.widenings(schema.columns, fields)  # NUMBER(p,s) for more digits
        if wider:
            type_widening.widen(self.spark, ref, wider, tables.table_configuration(self.spark, ref))
            changed = True
        for column in schema.columns:
            if column.nullable or column.name == METADATA_COLUMN or column.default is not None:
                continue
            keys, _vtype = shaping.field_for(column, fields)
            missing = table_rows.where(f"NOT ({present_sql(keys)})" if keys else "true")
            if missing.limit(1).count():
                tables.drop_not_null(self.spark, ref, column.name)
                changed = True
        return self.tables.schema(state, refresh=True) if changed else schema

    def without_wide_records(self, state: TableState, table_rows, fields):
        """`fields`, or when their keys would add more columns than
        floeline.schema.evolution.max.new.columns, the fields of the records with at most
        that many keys: a record with 100,000 keys becomes a row error (its keys match no
        column, state.evolution_refused says why) and does not stop the others' columns."""
        cfg = self.config
        bound, normalize = cfg.table_settings.max_new_columns, cfg.column_normalization
        state.refuse_evolution(None)
        schema = self.tables.schema(state)
        if not cfg.schematization or (schema is not None and not schema.evolution) or sum(
                1 for name in fields if schema is None or schema.find(name) is None) <= bound:
            return fields
        state.refuse_evolution(f"it has more keys than floeline.schema.evolution.max.new.columns ({bound}) "
                               f"lets a batch add as columns: raise the setting, or nest such keys "
                               f"under one key")
        valid = "v IS NOT NULL" + (" AND _error IS NULL" if "_error" in table_rows.columns else "")
        result = table_rows.where(f"{valid} AND coalesce(size(json_object_keys(to_json(v))), 0) <= {bound}") \
            .selectExpr("schema_of_variant_agg(v) AS s").first()
        return shaping.fields_of(result["s"] if result and result["s"] else "", normalize)


def record_fields(table_rows, channels: dict, normalize: bool) -> dict[str, tuple[list[str], str]]:
    """Column name -> (the JSON keys that map to it, their merged variant type). The
    batch's stats pass already merged each channel's keys; only when the table's
    channels disagree are they merged again over the table's rows."""
    schemas = set().union(*(c.keys for c in channels.values())) - {None}
    if len(schemas) <= 1:
        merged = next(iter(schemas), "")
    else:
        valid = "v IS NOT NULL" + (" AND _error IS NULL" if "_error" in table_rows.columns else "")
        result = table_rows.where(valid).selectExpr(
            "schema_of_variant_agg(v) AS s").first()
        merged = result["s"] if result and result["s"] else ""
    return shaping.fields_of(merged, normalize)


def _not_null(columns: list[Column], names: list[str]) -> list[Column]:
    """`columns` with those named in `names` (case-insensitively) NOT NULL."""
    wanted = {name.upper() for name in names}
    return [replace(c, nullable=False) if c.name.upper() in wanted else c for c in columns]


def _within_bound(new: list[Column], state: TableState, bound: int) -> list[Column]:
    """`new`, or none of them when they are more than `bound` (noted on `state` for the
    records' row error: they hold keys that now have no column)."""
    if len(new) <= bound:
        return new
    state.refuse_evolution(f"the batch's new keys would add {len(new)} columns, more than "
                           f"floeline.schema.evolution.max.new.columns ({bound}), so none was added: "
                           f"raise the setting, or nest such keys under one key")
    return []


def _addable(fields, existing, make) -> list[Column]:
    """Columns for `fields` (made by `make(name, keys, vtype)`), leaving out any whose
    name differs from a column's only in case: Delta cannot hold both (its records
    become row errors, see shaping)."""
    taken = {c.name.upper() for c in existing}
    new = []
    for name, (keys, vtype) in fields.items():
        if name.upper() not in taken:
            taken.add(name.upper())
            new.append(make(name, keys, vtype))
    return new
