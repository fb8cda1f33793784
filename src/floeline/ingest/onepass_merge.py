"""The steady-state micro-batch of insert.mode=upsert: Debezium change events read
straight into the table's types, the last change per key kept and MERGEd, from one
read of the batch (issue 27).

Why: the general path (upsert_sink.py) decodes every record to VARIANT, caches the
batch, runs its statistics job, a job for the changes' schemas and the table's checks,
then MERGEs a source computed from all of that (measured: 0.13x the append's changes/s
on the same records). Once a clean general-path batch has shown a table's primary key
and the exact fields of its after images, a batch of plain Debezium envelopes needs
none of it.

As in onepass.py, every record is checked inside the one job that reads the batch: a
record that needs the general path (an after image with other fields, a value that
does not fit its column, a key that is not the table's key, an op other than c, u, r
and d, a Connect schema/payload wrapper, a tombstone with delete.enabled=false, ...)
makes that job fail (raise_error) before anything is committed, and the connector runs
the batch again on the general path, which applies, evolves or reports it. The job
keeps the batch's last change per key (a local checkpoint): the MERGE reads that, with
Delta's own copy of the source turned off, and commits it with the channels' new
positions, exactly once as the general path's MERGE does.

Scope (else the general path): primary.key.mode=record_key with a key that is a JSON
object of the key fields; values read by SQL (no converter or transform in Python);
no change-log table; one table in the batch."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import Observation
from pyspark.sql import functions as F

from floeline import jvm
from floeline.errors import ServiceUnavailable, TableError, first_lines
from floeline.ingest.onepass import (
    CORRUPT_FIELD, FAILURE_MARK, ONE_PASS_SAMPLE, batch_functions, column_read, from_json_sql,
    one_table_batch)
from floeline.ingest.progress import BatchReport
from floeline.ingest.results import BatchResult
from floeline.ingest.upsert_sink import with_key_fields
from floeline.naming import column_match_key, column_name_for_key
from floeline.records import shaping
from floeline.records.changes import (
    DELETE_OP, UPSERT_OPS, key_fields_of, latest_per_key)
from floeline.records.columns import METADATA_COLUMN, TableSchema
from floeline.records.content import parse_object_schema, quote_column, sql_string
from floeline.records.metadata import field, field_unless_null, metadata_value_sql
from floeline.records.values_to_columns import SERVER_SIDE, Rules, rules_for
from floeline.sources.base import BatchEnd
from floeline.warehouse.commits import merge

log = logging.getLogger("floeline")

# The top-level fields of Debezium's envelope (3.x). A value with any other is left to
# the general path, which reads only op, ts_ms, source, before and after.
ENVELOPE_FIELDS = frozenset({"before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"})


UPSERT_OPS_SQL = ", ".join(f"'{op}'" for op in UPSERT_OPS)
# RECORD_METADATA's fields a change adds (as records/changes.py's metadata_with_change_sql
# does on the general path): op, never NULL here, and ts_ms when the event has one.
CHANGE_FIELDS = (field("op", "_op"), field_unless_null("ts_ms", "_ts_ms"))

@dataclass(frozen=True)
class MergePlan:
    """How to read a batch of change events in one pass (its checks call the JVM
    functions jvm.exact_fields_function names for `exact_fields`)."""
    value_schema: str  # from_json DDL of the envelope (after typed as the table's columns)
    key_schema: str  # from_json DDL of the record key (its fields typed as the key columns)
    columns: list[tuple[str, str, str]]  # (table column, source column, SQL over j, k, _meta)
    keys: list[tuple[str, str]]  # (key column, source column)
    unusual: str  # SQL: TRUE when a record needs the general path
    exact_fields: tuple[tuple[str | None, frozenset[str]], ...]  # (member, fields) checked


def merge_plan(schema: TableSchema, key_fields: tuple[str, ...], image_fields: frozenset[str],
               delete_enabled: bool, normalize: bool = False, rules: Rules = SERVER_SIDE,
               headers_check: str | None = None) -> MergePlan | None:
    """The one-pass plan for a table keyed by the record key's `key_fields` whose after
    images hold exactly `image_fields`; None when a column needs the general path."""
    if not key_fields or not image_fields:
        return None
    by_column: dict[str, list[str]] = {}
    for field in image_fields:
        by_column.setdefault(column_match_key(column_name_for_key(field, normalize)), []).append(field)
    key_of = {column_match_key(column_name_for_key(f, normalize)): f for f in key_fields}
    if not schema.columns or any(schema.find(n) is None for n in by_column) or set(key_of) - set(by_column):
        return None
    after_fields, key_json, columns, keys, unusual = [], [], [], [], []
    for i, column in enumerate(schema.columns):
        match, source = column_match_key(column.name), f"_c{i}"
        fields = by_column.get(match, [])
        if column.name.upper() == METADATA_COLUMN and not fields:
            columns.append((column.name, source, "_meta" if column.type == "variant"
                            else metadata_value_sql(column.type)))
            continue
        if len(fields) > 1 or column.default is not None:
            return None
        if not fields:
            if not column.nullable:
                return None
            continue  # left out of the MERGE, as the general path leaves it
        if match in key_of:
            read = column_read(column, f"k.{quote_column(key_of[match])}", rules)
            if read is None or read.json_type == "variant":
                return None
            key_json.append(f"{quote_column(key_of[match])} {read.json_type}")
            unusual += [*read.unusual, f"{read.value} IS NULL"]
            keys.append((column.name, source))
        else:
            read = column_read(column, f"j.after.{quote_column(fields[0])}", rules)
            if read is None:
                return None
            after_fields.append(f"{quote_column(fields[0])}: {read.json_type}")
            unusual += [f"(NOT _delete AND {u})" for u in read.unusual]
        columns.append((column.name, source, read.value))
    if len(keys) != len(key_fields):
        return None
    after_exact, key_exact = ("after", frozenset(image_fields)), (None, frozenset(key_fields))
    tombstone = f"{_bool(not delete_enabled)}"
    envelope = " OR ".join([
        f"j.{CORRUPT_FIELD} IS NOT NULL",
        f"NOT {jvm.known_keys_function(ENVELOPE_FIELDS)}(value)",
        f"j.op IS NULL OR j.op NOT IN ({UPSERT_OPS_SQL}, '{DELETE_OP}')",
        # an upsert's after image has exactly the fields the table's images have had
        f"(j.op != '{DELETE_OP}' AND NOT {jvm.exact_fields_function(*after_exact)}(value))",
        f"(j.op = '{DELETE_OP}' AND j.before IS NULL)",  # not an envelope: a row with an op field
    ])
    record_key = (f"key IS NULL OR k.{CORRUPT_FIELD} IS NOT NULL OR "
                  f"NOT {jvm.exact_fields_function(*key_exact)}(key)")
    checks = [f"CASE WHEN _tombstone THEN {tombstone} ELSE {envelope} END", record_key, *unusual]
    if headers_check:
        checks.append(headers_check)
    after = f"STRUCT<{', '.join(after_fields)}>" if after_fields else "STRING"
    return MergePlan(
        # before: only whether there is one (an empty struct: its fields are skipped,
        # not copied into a string as a STRING field's would be)
        value_schema=(f"op STRING, ts_ms BIGINT, source STRUCT<ts_ms: BIGINT>, before STRUCT<>, "
                      f"after {after}, {CORRUPT_FIELD} STRING"),
        key_schema=f"{', '.join(key_json)}, {CORRUPT_FIELD} STRING",
        columns=columns, keys=keys, unusual=" OR ".join(f"({c})" for c in checks),
        exact_fields=(after_exact, key_exact))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def run_one_pass_merge(pipeline, df, batch_id: int, started: float, start: BatchEnd, end: BatchEnd):
    """MERGE the batch in one pass when its table and records allow it; None when the
    batch must take the general path (also when a record turns out to need it: nothing
    was committed). Returns the BatchResult."""
    cfg = pipeline.config
    changes = cfg.changes
    if (not changes.upsert or not cfg.schematization or pipeline.decode or changes.changes_table
            or changes.primary_key_mode != "record_key"):
        return None
    one_table = one_table_batch(pipeline, start, end)
    if one_table is None:
        return None
    state, channels, finished = one_table
    sampled = not state.one_pass_ready
    if sampled and not _learned_from_sample(pipeline, state, df):
        return None  # the general path first; a clean batch there shows the key and the images
    sample_s = time.time() - started if sampled else 0.0
    schema = pipeline.tables.schema(state)
    key_fields = pipeline.sink.key_fields_of(state.ref)
    plan = (merge_plan(schema, key_fields, state.known_keys, changes.delete_enabled,
                       cfg.column_normalization, rules_for(cfg.validation), pipeline.headers_check)
            if schema is not None else None)
    if plan is None:
        return None
    push_time = batch_functions(df, ENVELOPE_FIELDS, started, batch_id, plan.exact_fields)
    if push_time is None:
        return None
    report = BatchReport(batch_id)
    observed = Observation(f"floeline-{cfg.name}-{batch_id}")
    # What RECORD_METADATA is made of and the last change per key is found by (channel,
    # position, timestamp), each once: every byte carried is shuffled.
    carried = [c for c in df.columns if c not in ("value", "route")]
    changes_read = df.selectExpr(
        *carried, "value", "value IS NULL OR length(value) = 0 AS _tombstone",
        f"{from_json_sql(plan.value_schema)} AS j",
        f"{from_json_sql(plan.key_schema, 'key')} AS k",
    ).selectExpr("*", f"CASE WHEN _tombstone THEN '{DELETE_OP}' ELSE j.op END AS _op",
                 "CASE WHEN _tombstone THEN NULL ELSE coalesce(j.ts_ms, j.source.ts_ms) END AS _ts_ms",
                 ).selectExpr("*", f"_op <=> '{DELETE_OP}' AS _delete")
    skipped = f"_delete AND NOT {_bool(changes.delete_enabled)}"
    changes_read = changes_read.observe(
        observed, F.count(F.lit(1)).alias("records"),
        F.count(F.when(F.expr(skipped), 1)).alias("skipped"),
        F.min(F.unix_millis("timestamp")).alias("ts_min"),
        F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid"))
    # The check sits inside the first key column: the window partitions by it, so it is
    # computed for every record the batch holds (a separate column would be pruned).
    # RECORD_METADATA is made once the last change per key is known (most rows are gone
    # by then), from the source's columns, with the change's op and ts_ms: adding them to
    # a made RECORD_METADATA (variant -> map -> variant) took ~40 % of the dedupe's job.
    first_source = plan.keys[0][1]
    selected, final = [], []
    for name, source, value in plan.columns:
        if name.upper() == METADATA_COLUMN:
            final.append(f"{value} AS {source}")
            continue
        if source == first_source:
            value = f"CASE WHEN {plan.unusual} THEN raise_error({sql_string(FAILURE_MARK)}) ELSE {value} END"
        selected.append(f"{value} AS {source}")
        final.append(source)
    rows = changes_read.where(f"NOT ({skipped})").selectExpr(*carried, "_ts_ms", "_delete", "_op", *selected)
    meta = pipeline.source.metadata_sql(cfg.metadata, push_time, extra=CHANGE_FIELDS)
    latest = latest_per_key(rows, [s for _c, s in plan.keys], len(channels) > 1, prefix="").selectExpr(
        "*", f"{meta} AS _meta").selectExpr(*final, "_delete")
    positions = {ch: last for ch, (_before, last) in channels.items()}
    after = state.after(positions, finished)
    try:
        source = latest.localCheckpoint(eager=True)  # the one read of the batch, checked
    except Exception as exc:  # a record needing the general path (or the source failing: it retries)
        log.info("batch %s takes the general path: %s", batch_id, first_lines(str(exc), 2))
        state.one_pass_failed()
        return None
    if sampled:
        report.phases["one pass merge sample"] = sample_s
    report.phases["one pass merge read"] = time.time() - started - sample_s
    try:
        merge(source, state.ref, cfg.name, after, pipeline.before_commit,
              keys=plan.keys, columns=[(c, s) for c, s, _v in plan.columns], delete="_delete",
              materialized=True)
    except (TableError, ServiceUnavailable) as exc:  # a commit conflict: the general path retries
        log.info("batch %s takes the general path: %s", batch_id, first_lines(str(exc.__cause__ or exc), 2))
        state.one_pass_failed(committing=True)
        return None
    finally:
        _release(source)
    state.one_pass_committed(after)  # first: whatever fails next, the table holds the batch
    stats = observed.get
    report.records_read = stats["records"]
    report.skipped = stats["skipped"]
    report.rows_written[state.ref.name] = stats["records"] - stats["skipped"]
    report.phases["one pass merge"] = time.time() - started - sample_s - report.phases["one pass merge read"]
    return BatchResult(report, positions, [(stats["ts_mid"], stats["records"])], stats["ts_min"])


def _learned_from_sample(pipeline, state, df) -> bool:
    """Once per table and run, before its first batch: create or evolve the table from
    the change events among the batch's first records and learn their key and after
    images' fields, so a connector's first batch (and the first after a restart) can
    take one pass too. One small job: whatever the sample does not show exactly (a bad
    record, a flattened row) fails the one pass, and the general path takes the batch.
    True when the table is ready."""
    if state.known_keys or not state.first_one_pass_sample():
        return False
    cfg, sink = pipeline.config, pipeline.sink
    sample = df.limit(ONE_PASS_SAMPLE).selectExpr(
        "try_parse_json(CAST(value AS STRING)) AS d", "try_parse_json(CAST(key AS STRING)) AS k").selectExpr(
        "try_variant_get(d, '$.op', 'string') AS op", "try_variant_get(d, '$.after', 'variant') AS v", "k",
    ).persist()
    try:
        seen = sample.selectExpr(
            f"count(CASE WHEN op IN ({UPSERT_OPS_SQL}) AND v IS NOT NULL "
            f"AND NOT is_variant_null(v) THEN 1 END) AS upserts",
            "schema_of_variant_agg(CASE WHEN op IS NOT NULL THEN v END) AS images",
            "schema_of_variant_agg(k) AS keys").first()
        key_fields = sink.key_fields_of(state.ref) or key_fields_of(seen["keys"])
        if not seen["upserts"] or not key_fields or not seen["images"]:
            return False
        normalize = cfg.column_normalization
        fields = with_key_fields(shaping.fields_of(seen["images"], normalize), key_fields, normalize)
        state.refuse_evolution(None)
        pipeline.preparer.prepare(state, sample.where(f"op IN ({UPSERT_OPS_SQL})"),
                                  fields, primary_key=key_fields)
        state.learn_keys(name for name, _type in parse_object_schema(seen["images"]))
        return True
    finally:
        sample.unpersist()


def _release(checkpointed) -> None:
    """Free the blocks of a local checkpoint now rather than at the JVM's next GC."""
    try:
        checkpointed._jdf.queryExecution().analyzed().rdd().unpersist(False)
    except Exception as exc:  # only memory held a little longer
        log.debug("could not release a local checkpoint: %s", exc)
