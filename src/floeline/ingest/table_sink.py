"""The table sink of the general path: one table's share of a micro-batch goes in one
Delta commit together with its channels' new positions.

Per table: drop rows the table already holds (a replay), rows a Filter transform
dropped and ignored tombstones; route bad records (bad_records.py); create the table on
its first record or evolve it for new keys (Snowflake's schema evolution); compute
the rows with the table's pipe (the default pipe `{TABLE}-STREAMING` or the user's,
records/shaping.py); append them with the positions in the commit's userMetadata."""

from __future__ import annotations

import time

from floeline.errors import TableError, storage_full
from floeline.ingest.bad_records import committed_filter_sql
from floeline.ingest.progress import BatchReport
from floeline.ingest.table_state import TableState
from floeline.naming import display_identifier
from floeline.records import shaping
from floeline.records.content import column_type_for, present_sql, quote_column
from floeline.sources.base import Committed
from floeline.warehouse import tables
from floeline.warehouse.pipes import pipe_for_table
from floeline.warehouse.positions import commit_metadata
from floeline.warehouse.tables import METADATA_COLUMN, Column, TableSchema


class TableSink:
    def __init__(self, pipeline):
        self.pipeline = pipeline

    def start(self) -> None:
        """Nothing to do when the connector starts (the tables hold their positions)."""

    def write(self, state: TableState, table_rows, channels: dict, finished: set[str],
              report: BatchReport, phase, check_only: bool = False) -> None:
        """Append this batch's rows of one table, with its channels' new positions and
        the channels finished in this batch, in one Delta commit. `channels` holds the
        batch statistics of each channel. `check_only`: stop at the first row error
        (raising it) without writing."""
        p = self.pipeline
        cfg = p.config
        ref = state.ref
        table_rows, expected, replayed, after = self.landing(state, table_rows, channels, finished, report)
        user_metadata = commit_metadata(cfg.name, after)

        if expected <= 0 and p.tables.schema(state) is None:
            # Nothing lands and there is no table: none is created just to hold positions
            # (on a restart, the source's own fallback says where to resume).
            state.committed = after
            return
        pipe = pipe_for_table(p.warehouse, ref.database, ref.schema, ref.name)
        if pipe is not None:
            # A user-defined pipe (or interactive table) computes the columns itself:
            # no key matching, no schema evolution.
            schema = p.tables.schema(state, refresh=True)
            if schema is None:
                raise TableError(f"table {ref.full_name} has {pipe.kind} {pipe.name} but the table "
                                 f"is gone; create it again or DROP PIPE {pipe.name}")
            fields = {}
            shaped = shaping.pipe_rows(schema, table_rows, pipe)
        else:
            fields = (self.record_fields(table_rows, channels, cfg.column_normalization)
                      if cfg.schematization else {})
            if "" in fields:  # no column can be named by an empty key
                table_rows = table_rows.selectExpr("*", (
                    "CASE WHEN try_variant_get(v, '$[\"\"]', 'variant') IS NOT NULL THEN 'the record "
                    "has an empty key (\"\"), which cannot be a column name: rename it in the producer "
                    "or with the ReplaceField transform' END AS _key_error"))
                table_rows, rejected = p.bad.divert(table_rows, "_key_error", "'table write'", ref,
                                                    report, after)
                expected -= rejected
                fields.pop("")
            all_fields, fields = fields, self.without_wide_records(state, table_rows, fields)
            phase("keys")
            declared = p.declared_types(set().union(*(c.schema_ids for c in channels.values())))
            schema = self.prepare(state, table_rows, fields, declared)
            phase("table")
            shaped = shaping.default_pipe_rows(schema, table_rows, all_fields, cfg.schematization,
                                               cfg.column_normalization, display_name(ref),
                                               binary_format=cfg.binary_format,
                                               evolution_refused=state.evolution_refused)
        columns = [f"_c{i} AS {quote_column(c.name)}" for i, c in enumerate(schema.columns)
                   if f"_c{i}" in shaped.columns]  # (the default pipe leaves out keyless columns)
        row_stage = "'pipe expression'" if pipe is not None else "'table write'"
        can_fail = "_row_error" in shaped.columns
        if check_only:
            if can_fail:
                p.bad.divert(shaped, "_row_error", row_stage, ref, report, after, "_src_")
            return
        if can_fail and cfg.errors_tolerance == "none":
            # Checked inside the write: a bad row fails it before anything commits.
            out = shaped.where("assert_true(_row_error IS NULL, _row_error) IS NULL").selectExpr(*columns)
        elif can_fail:
            out = shaped.where("_row_error IS NULL").selectExpr(*columns)
        else:
            out = shaped.selectExpr(*columns)
        if can_fail and cfg.errors_tolerance == "all":
            # Bad rows go to the DLQ / error table before the table commit.
            _, rejected = p.bad.divert(shaped, "_row_error", row_stage, ref, report, after, "_src_")
            expected -= rejected
        p.before_commit()
        try:
            out.write.format("delta").mode("append").option("userMetadata", user_metadata).save(ref.path)
        except Exception as exc:
            if can_fail and cfg.errors_tolerance == "none":
                # Name the first bad record (raises RecordError) if that was the cause.
                p.bad.divert(shaped, "_row_error", row_stage, ref, report, after, "_src_")
            state.schema = None  # the table may have changed under us: read it again next time
            p.metrics.table_commit_error(ref.full_name)
            what = f"writing to table {ref.full_name}"
            raise (storage_full(exc, what, ref.path)
                   or TableError(f"{what} failed: {first_lines(str(exc))}")) from exc
        phase("convert+write")
        state.committed = after
        if channels:  # (a commit that only records finished channels changes nothing here)
            # The next batch may take one pass if this one held nothing unusual.
            clean = not any(c.unusual for c in channels.values())
            state.known_keys |= frozenset(k for keys, _t in fields.values() for k in keys)
            state.one_pass_ready = clean and not replayed and not can_fail and bool(fields)
        report.rows_written[ref.name] = report.rows_written.get(ref.name, 0) + expected

    def landing(self, state: TableState, table_rows, channels: dict, finished: set[str],
                report: BatchReport):
        """The rows of this batch that land in the table: without replays (rows the table
        holds), rows a Filter dropped, ignored tombstones and bad records (routed to the
        DLQ / error table). Returns them, how many there are, the replayed channels and
        the table's positions once the batch commits."""
        p = self.pipeline
        cfg = p.config
        ref = state.ref
        expected = sum(c.records for c in channels.values())
        # Replays: rows this table already holds (position <= the channel's position).
        replayed = {ch: state.committed.positions[ch] for ch, c in channels.items()
                    if state.holds(ch, c.first)}
        if replayed:
            table_rows = table_rows.where(committed_filter_sql(Committed(replayed)))
            expected = table_rows.count()
            report.skipped += sum(c.records for c in channels.values()) - expected
        if any(c.filtered for c in channels.values()):  # dropped by a Filter transform
            filtered = (table_rows.where("_skip").count() if replayed
                        else sum(c.filtered for c in channels.values()))
            report.skipped += filtered
            expected -= filtered
            table_rows = table_rows.where("NOT _skip")
        if cfg.null_values == "IGNORE" and any(c.tombstones for c in channels.values()):
            tombstones = (table_rows.where("_tombstone").count() if replayed
                          else sum(c.tombstones for c in channels.values()))
            report.skipped += tombstones
            expected -= tombstones
            table_rows = table_rows.where("NOT _tombstone")
        after = state.after({ch: c.last for ch, c in channels.items()}, finished)
        if any(c.bad for c in channels.values()):
            table_rows, rejected = p.bad.divert(table_rows, "_error", "_stage", ref, report, after)
            expected -= rejected
        return table_rows, expected, replayed, after

    # ---- the default pipe: keys -> columns ---------------------------------------

    def prepare(self, state: TableState, table_rows, fields, declared=None) -> TableSchema:
        """Create the table on its first record, or evolve it for new keys and for
        NOT NULL columns that records leave empty; returns its schema to write with. A
        new column's type is the one its key's schema declares (`declared`: key ->
        Spark type, from the value's Avro schema), else the type of this batch's values."""
        declared = declared or {}
        p = self.pipeline
        settings = p.config.table_settings

        def new_column(name, keys, vtype) -> Column:
            return tables.in_storage(Column(name, next((declared[k] for k in keys if k in declared),
                                                       column_type_for(vtype))), settings.variant_storage)

        ref = state.ref
        normalize = p.config.column_normalization
        schema = p.tables.schema(state)
        if schema is None:
            metadata = tables.in_storage(Column(METADATA_COLUMN, "variant"), settings.variant_storage)
            if not p.config.schematization:
                columns = [metadata, tables.in_storage(Column(shaping.CONTENT_COLUMN, "variant"),
                                                       settings.variant_storage)]
            else:
                # snowflake.metadata.all=false writes no metadata: no RECORD_METADATA column.
                columns = [metadata] if p.config.metadata.all_ else []
                columns += _within_bound(_addable(fields, columns, new_column), state, settings.max_new_columns)
            tables.create_table(p.spark, ref, columns, evolution=True, auto_compact=settings.auto_compact)
            # The table is what was just created: no need to read it back.
            state.schema, state.schema_read_at = TableSchema(tuple(columns), True), time.time()
            return state.schema
        if not schema.evolution or not p.config.schematization:
            return schema
        new = _within_bound(_addable({name: field for name, field in fields.items()
                                      if schema.find(name, exact=normalize) is None}, schema.columns, new_column),
                            state, settings.max_new_columns)
        changed = False
        if new:
            tables.add_columns(p.spark, ref, new)
            changed = True
        for column in schema.columns:
            if column.nullable or column.name == METADATA_COLUMN or column.default is not None:
                continue
            keys, _vtype = shaping.field_for(column, fields, normalize)
            missing = table_rows.where(f"NOT ({present_sql(keys)})" if keys else "true")
            if missing.limit(1).count():
                tables.drop_not_null(p.spark, ref, column.name)
                changed = True
        return p.tables.schema(state, refresh=True) if changed else schema

    def without_wide_records(self, state: TableState, table_rows, fields):
        """`fields`, or when their keys would add more columns than
        floeline.schema.evolution.max.new.columns, the fields of the records with at most
        that many keys: a record with 100,000 keys becomes a row error (its keys match no
        column, state.evolution_refused says why) and does not stop the others' columns."""
        p = self.pipeline
        bound, normalize = p.config.table_settings.max_new_columns, p.config.column_normalization
        state.evolution_refused = None
        schema = p.tables.schema(state)
        if not p.config.schematization or (schema is not None and not schema.evolution) or sum(
                1 for name in fields if schema is None or schema.find(name, exact=normalize) is None) <= bound:
            return fields
        state.evolution_refused = (f"it has more keys than floeline.schema.evolution.max.new.columns ({bound}) "
                                   f"lets a batch add as columns: raise the setting, or nest such keys "
                                   f"under one key")
        valid = "v IS NOT NULL" + (" AND _error IS NULL" if "_error" in table_rows.columns else "")
        result = table_rows.where(f"{valid} AND coalesce(size(json_object_keys(to_json(v))), 0) <= {bound}") \
            .selectExpr("schema_of_variant_agg(v) AS s").first()
        return shaping.fields_of(result["s"] if result and result["s"] else "", normalize)

    @staticmethod
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


def _within_bound(new: list[Column], state: TableState, bound: int) -> list[Column]:
    """`new`, or none of them when they are more than `bound` (noted on `state` for the
    records' row error: they hold keys that now have no column)."""
    if len(new) <= bound:
        return new
    state.evolution_refused = (f"the batch's new keys would add {len(new)} columns, more than "
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


def display_name(ref) -> str:
    """DB.SCHEMA.TABLE as SQL writes it (quoted parts where needed), for messages."""
    return ".".join(display_identifier(p) for p in (ref.database, ref.schema, ref.name))


def first_lines(message: str, n: int = 6) -> str:
    """A Spark error without its JVM stack trace."""
    message = message.split("\n\nJVM stacktrace")[0]
    return "\n".join(message.splitlines()[:n])
