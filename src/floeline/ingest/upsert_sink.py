"""The sink of insert.mode=upsert (issue 27): one table's share of a micro-batch is
MERGEd into the table by primary key, in one Delta commit with its channels' new
positions, so a replayed batch changes nothing.

Per table:
  1. landing (landing.py): replays and bad records out; tombstones stay (deletes);
  2. change events (records/changes.py): what each record does; a record that is not
     a change floeline can apply (no key, no op, an unknown op, a key field missing or
     null) goes to the bad-record router as a row error, naming the fix; deletes with
     delete.enabled=false are skipped and counted;
  3. with floeline.cdc.changes.table=true, every record as it came is appended to
     `<TABLE>_CHANGES` (a table sink of its own, with its own positions) first: so the
     change log is never behind the table a restart resumes from;
  4. the table created (key columns NOT NULL) or evolved from the changes' rows
     (table_preparer.py), the rows shaped by the default pipe (records/shaping.py);
  5. the last change per key (records/changes.latest_per_key) MERGEd:
     warehouse/commits.merge, positions in the MERGE's own commit. A truncate event
     (truncate.enabled=true) drops the changes before it on its channel, and the same
     MERGE deletes every row the batch does not write: the table as it would be had the
     source table been emptied at that point. Kafka keeps no order across partitions, so
     the batch's changes on other channels count as after it (Debezium writes a table's
     changes to one partition unless told otherwise)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import functions as F

from floeline.errors import ServiceUnavailable, TableError
from floeline.ingest.bad_records import BadRecords
from floeline.ingest.landing import Landing, landing
from floeline.ingest.sink import TableBatch
from floeline.ingest.table_preparer import TablePreparer
from floeline.ingest.table_sink import TableSink, display_name
from floeline.ingest.table_state import Tables
from floeline.naming import column_match_key, column_name_for_key
from floeline.records import shaping, values_to_columns
from floeline.records.columns import stores_json
from floeline.records.changes import (
    CHANGE_STAGE, ChangePlan, change_events, change_rows, key_fields_of, latest_per_key)
from floeline.records.content import parse_object_schema, sql_string
from floeline.records.decode import AFTER_IMAGE_PREFIX
from floeline.sources.base import Committed, max_position_sql
from floeline.warehouse import tables
from floeline.warehouse.commits import merge
from floeline.warehouse.pipes import pipe_for_table
from floeline.warehouse.positions import committed_filter_sql

log = logging.getLogger("floeline")

# Columns the shaped rows carry for the MERGE and the last-change-per-key rule.
_CARRIED = ("_delete", "_ts_ms")


class UpsertSink:
    """Changes merged into the table by primary key (insert.mode=upsert)."""

    def __init__(self, config, spark, warehouse, tables_: Tables, bad: BadRecords,
                 preparer: TablePreparer, before_commit: Callable[[], None], metrics,
                 declared_types: Callable[[set, set], dict[str, str]]):
        self.config, self.spark, self.warehouse, self.tables = config, spark, warehouse, tables_
        self.bad, self.preparer, self.before_commit, self.metrics = bad, preparer, before_commit, metrics
        self.declared_types = declared_types
        # floeline.cdc.changes.table: the change log is appended by a table sink of its own
        self.change_log = (TableSink(config, spark, warehouse, tables_, bad, preparer, before_commit,
                                     metrics, declared_types)
                           if config.changes.changes_table else None)
        self._key_fields: dict[str, tuple[str, ...]] = {}  # table -> its record key's fields

    def start(self) -> None:
        """Nothing to do when the connector starts (the tables hold their positions)."""

    def key_fields_of(self, ref) -> tuple[str, ...]:
        """The primary key fields of table `ref`: primary.key.fields, else the key the
        table keeps (empty when it has none yet). What the one-pass MERGE keys by."""
        fields = self.config.changes.primary_key_fields
        if not fields:
            fields = self._key_fields.get(ref.full_name) or tables.read_primary_key(self.spark, ref)
            if fields:
                self._key_fields[ref.full_name] = fields
        return tuple(fields)

    def check(self, batch: TableBatch) -> None:
        """Raise the first row error of the table's rows (errors.tolerance=none)."""
        lands = landing(batch, "DEFAULT", self.bad)
        if lands.expected <= 0:
            return
        events, counts = self._events(batch, lands)
        if counts["errors"]:
            events, _rejected = self.bad.divert(events, "_change_error", sql_string(CHANGE_STAGE),
                                                batch.state.ref, batch.report, lands.after)
        if self.change_log is not None:
            self.change_log.check(self._change_log_batch(batch))
        prepared = self._shape(batch, lands, events, counts)
        if prepared is not None:
            self._divert_row_errors(batch, prepared[0], lands)

    def write(self, batch: TableBatch) -> int:
        """MERGE this batch's changes into one table, with its channels' new positions and
        the channels finished in this batch, in one Delta commit; the changes applied."""
        state, report = batch.state, batch.report
        lands = landing(batch, "DEFAULT", self.bad)  # tombstones are deletes here
        if lands.expected <= 0 and self.tables.schema(state) is None:
            self._append_change_log(batch)
            state.committed_through(lands.after)
            return 0
        events, counts = self._events(batch, lands)
        applied = lands.expected - counts["errors"] - counts["skipped"]
        if counts["errors"]:
            events, _rejected = self.bad.divert(events, "_change_error", sql_string(CHANGE_STAGE),
                                                state.ref, report, lands.after)
        report.skipped += counts["skipped"]
        truncated = self._truncated(events) if counts["truncates"] else {}
        if truncated:  # the changes before a truncate on its channel are gone with the rows
            events = events.where(committed_filter_sql(Committed(truncated)))
            log.info("table %s is emptied by the batch's truncate events (%s)", state.ref.full_name,
                     ", ".join(f"channel {ch} at {pos}" for ch, pos in sorted(truncated.items())))
        self._append_change_log(batch)  # before the table: never behind it
        prepared = self._shape(batch, lands, events, counts)
        if prepared is None:  # no table and nothing to create it with (deletes only)
            state.committed_through(lands.after)
            return 0
        shaped, keys, columns = prepared
        shaped, rejected = self._divert_row_errors(batch, shaped, lands)
        applied -= rejected
        latest = latest_per_key(shaped, [s for _c, s in keys], len(batch.channels) > 1)
        self._merge(batch, latest.select(*(s for _c, s in columns), "_delete"), keys, columns, lands,
                    truncate=bool(truncated))
        batch.phase("merge")
        # The next batch may take one pass (onepass_merge.py) when this one held only
        # Debezium envelopes and nothing went wrong: their after images' fields are known.
        clean = not counts["errors"] and not rejected and not counts["not_envelopes"]
        state.general_batch_committed(lands.after, _field_names(counts["images"]) if clean else (), clean,
                                      only_these=True)
        name = state.ref.name
        report.rows_written[name] = report.rows_written.get(name, 0) + applied
        return applied

    # ---- the steps -----------------------------------------------------------------

    def _events(self, batch: TableBatch, lands: Landing):
        """The change events of the landed rows and their counts (_changes)."""
        events, counts = self._changes(batch.state.ref, lands.rows)
        batch.phase("changes")
        return events, counts

    def _changes(self, ref, rows):
        """The change events of `rows`, and in one job: how many are errors, how many
        deletes are skipped, the merged schemas of the rows to write, whether any is an
        upsert and how many values are not Debezium envelopes."""
        plan = self._plan(ref, rows)
        events = change_events(rows, plan)
        applied = "_change_error IS NULL AND NOT _skipped"
        row = events.agg(
            F.count("_change_error").alias("errors"),
            F.count(F.when(F.expr("_change_error IS NULL AND _skipped"), 1)).alias("skipped"),
            F.count(F.when(F.expr("_change_error IS NULL AND _truncate AND NOT _skipped"), 1)).alias("truncates"),
            F.count(F.when(F.expr(f"{applied} AND NOT _delete"), 1)).alias("upserts"),
            F.expr(f"schema_of_variant_agg(CASE WHEN {applied} THEN _image END)").alias("images"),
            F.expr(f"schema_of_variant_agg(CASE WHEN {applied} THEN _old_key END)").alias("old_keys"),
            F.count(F.when(F.expr("v IS NOT NULL AND try_variant_get(v, '$.op', 'string') IS NULL"), 1))
            .alias("not_envelopes"),
        ).first()
        counts = row.asDict()
        counts["plan"] = plan
        return events, counts

    def _plan(self, ref, rows) -> ChangePlan:
        """Where the table's primary key comes from: primary.key.fields, else (record_key)
        the fields of the record key as the table keeps them or these rows' keys hold."""
        settings = self.config.changes
        fields = self.key_fields_of(ref)
        if not fields:
            merged = rows.where("_key IS NOT NULL").selectExpr("schema_of_variant_agg(_key) AS s").first()
            fields = key_fields_of(merged["s"] if merged else None)
            if fields:
                self._key_fields[ref.full_name] = fields
        return ChangePlan(settings.primary_key_mode, tuple(fields), settings.delete_enabled,
                          settings.truncate_enabled)

    @staticmethod
    def _truncated(events) -> dict[str, str]:
        """Channel -> the position of its last truncate event applied in this batch (a
        truncate is never a row error: change_events gives it none)."""
        rows = (events.where("_truncate AND NOT _skipped")
                .groupBy("channel").agg(F.expr(max_position_sql("position")).alias("position")).collect())
        return {row["channel"]: row["position"] for row in rows}

    def _shape(self, batch: TableBatch, lands: Landing, events, counts):
        """The changes in the table's columns (the table created or evolved for them):
        (shaped rows, key (column, source) pairs, written (column, source) pairs); None
        when there is no table and no upsert to create it with."""
        cfg, state = self.config, batch.state
        ref = state.ref
        if pipe_for_table(self.warehouse, ref.database, ref.schema, ref.name) is not None:
            raise TableError(f"table {ref.full_name} has a pipe, and insert.mode=upsert writes with the "
                             f"default pipe only: drop the pipe, or use insert.mode=insert")
        plan: ChangePlan = counts["plan"]
        if self.tables.schema(state) is None and not counts["upserts"]:
            return None
        if not plan.key_fields:
            raise TableError(f"table {ref.full_name}: the record keys are not structs, so there is no "
                             f"primary key to merge by: set primary.key.fields to the key's column")
        rows = change_rows(events)
        normalize = cfg.column_normalization
        fields = with_key_fields(shaping.fields_of(_merged(counts["images"], counts["old_keys"]), normalize),
                                  plan.key_fields, normalize)
        state.refuse_evolution(None)
        schema = self.preparer.prepare(state, rows.where("NOT _delete"), fields, self._declared(batch),
                                       primary_key=plan.key_fields)
        batch.phase("table")
        reject = schema.evolution or cfg.validation == "client_side"
        shaped = shaping.default_pipe_rows(schema, rows, fields, True, display_name(ref),
                                           reject_unmatched=reject,
                                           rules=values_to_columns.rules_for(cfg.validation),
                                           evolution_refused=state.evolution_refused, carry=_CARRIED)
        index = {c.name: i for i, c in enumerate(schema.columns)}
        keys = [(name, f"_c{index[name]}") for name in
                (_key_column(schema, f, normalize, ref) for f in plan.key_fields)]
        columns = [(c.name, f"_c{i}") for i, c in enumerate(schema.columns) if f"_c{i}" in shaped.columns]
        if "_row_error" in shaped.columns:
            # A delete writes its key only: the other columns' checks are not its own.
            key_null = " OR ".join(f"{s} IS NULL" for _c, s in keys)
            shaped = shaped.withColumn("_row_error", F.expr(
                f"CASE WHEN _delete THEN CASE WHEN {key_null} THEN "
                f"{sql_string('the primary key of a delete does not fit the type of the key columns')} END "
                f"ELSE _row_error END"))
        return shaped, keys, columns

    def _declared(self, batch: TableBatch) -> dict[str, str]:
        """The column types the changes' schemas declare (JsonConverter's envelope, Avro):
        an envelope's after-image fields (decode's `after.<field>` entries) over a
        flattened record's top-level fields."""
        channels = batch.channels.values()
        declared = self.declared_types(set().union(*(c.schema_ids for c in channels)),
                                       set().union(*(c.declared_types for c in channels)))
        image = {name[len(AFTER_IMAGE_PREFIX):]: kind for name, kind in declared.items()
                 if name.startswith(AFTER_IMAGE_PREFIX)}
        return {**{n: k for n, k in declared.items() if not n.startswith(AFTER_IMAGE_PREFIX)}, **image}

    def _divert_row_errors(self, batch: TableBatch, shaped, lands: Landing):
        """The shaped rows without those that cannot be written (sent on by the
        bad-record router), and how many those were."""
        if "_row_error" not in shaped.columns:
            return shaped, 0
        return self.bad.divert(shaped, "_row_error", "'table write'", batch.state.ref,
                               batch.report, lands.after, "_src_")

    def _merge(self, batch: TableBatch, source, keys, columns, lands: Landing, truncate: bool) -> None:
        state = batch.state
        try:
            merge(source, state.ref, self.config.name, lands.after, self.before_commit,
                  keys=keys, columns=columns, delete="_delete", truncate=truncate)
        except (TableError, ServiceUnavailable):
            state.commit_failed()
            self.metrics.table_commit_error(state.ref.full_name)
            raise

    # ---- the change log ------------------------------------------------------------

    def _append_change_log(self, batch: TableBatch) -> None:
        """floeline.cdc.changes.table: append the batch's records as they came to
        `<TABLE>_CHANGES` (replays of it dropped by its own positions)."""
        if self.change_log is not None:
            self.change_log.write(self._change_log_batch(batch))

    def _change_log_batch(self, batch: TableBatch) -> TableBatch:
        """The change log's share of the batch: its records without those that could
        not be decoded (the table's landing sent them on already)."""
        state = self.tables.state(self.warehouse.changes_table(batch.state.ref))
        channels = {ch: replace(c, records=c.records - c.bad, bad=0) for ch, c in batch.channels.items()}
        return TableBatch(state, batch.rows.where("_error IS NULL"), channels, batch.finished,
                          batch.report, batch.phase, batch.routes)


def _merged(images: str | None, old_keys: str | None) -> str:
    """One object schema of the rows' images and the old keys of moved rows (both
    schema_of_variant_agg results), for shaping.fields_of."""
    if not old_keys:
        return images or ""
    fields = dict(parse_object_schema(images or ""))
    for key, vtype in parse_object_schema(old_keys):
        fields[key] = vtype if fields.get(key, vtype) == vtype else "VARIANT"
    return "OBJECT<" + ", ".join(f"`{k.replace('`', '``')}`: {t}" for k, t in fields.items()) + ">"


def _field_names(images: str | None) -> tuple[str, ...]:
    """The fields of the images' merged schema (schema_of_variant_agg)."""
    return tuple(name for name, _type in parse_object_schema(images or ""))


def with_key_fields(fields: dict, key_fields: tuple[str, ...], normalize: bool) -> dict:
    """`fields` (shaping.fields_of) with a field for each primary key field no change of
    the batch holds (a batch of errors and skipped deletes still commits by the key)."""
    names = {column_match_key(name) for name in fields}
    out = dict(fields)
    for key in key_fields:
        name = column_name_for_key(key, normalize)
        if column_match_key(name) not in names:
            out[name] = ([key], "VOID")
    return out


def _key_column(schema, field: str, normalize: bool, ref) -> str:
    """The table column of primary key field `field`."""
    column = schema.find(column_name_for_key(field, normalize))
    if column is None:
        raise TableError(f"table {ref.full_name} has no column for primary key field {field!r}: "
                         f"add it (ALTER TABLE {display_name(ref)} ADD COLUMN ...) or fix primary.key.fields")
    if column.type == "variant" or stores_json(column):
        raise TableError(f"table {ref.full_name}: primary key column {column.name} is semi-structured "
                         f"(its values had several types when the table was created), and MERGE cannot "
                         f"compare such values: drop the table and let the connector create it again "
                         f"from changes whose key values have one type, or create it by hand")
    return column.name
