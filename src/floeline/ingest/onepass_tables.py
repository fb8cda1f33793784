"""The steady-state micro-batch of a connector writing many tables of one layout: one
pass from the source to every table's files, then a commit per table (issue 26).

onepass.py writes one table's batch in one pass (from_json straight into the table's
types, every record checked inside the write). When a batch holds several tables that
each took a clean batch before (their keys known, `one_pass_ready`) and that share
their columns and keys, the same plan computes every table's rows: the record's table
is one more column, and tables_together.write_and_commit writes all files in one job
and commits each table with its positions. A record that needs the general path fails
the write before anything commits, and the batch takes the general path, as with one
table.

A batch with tables whose keys are not known yet (a connector's first batch, or a
table's first records beside known tables) first learns each such table's keys, as one
pass does for one table from a sample: here from the first records of each channel
(the source's first_records_sql; a sample of the batch's first records would hold a few
of its tables only), in one job whose shuffle is a row per table and partition
(schema_of_variant_agg). The more tables learn at once, the fewer records each
samples (TABLE_SAMPLE_BUDGET): parsing every record of a batch of 100 new tables to
learn their keys cost 5.5-6.3 s of a 20 s batch (bench/RESULTS.md). A key the sample
missed fails the write before anything commits, and the batch takes the general path,
which learns it."""

from __future__ import annotations

import logging
import time

from pyspark.sql import Observation
from pyspark.sql import functions as F

from floeline.errors import ServiceUnavailable, TableError, first_lines
from floeline.ingest.identity_order import generates_identity
from floeline.ingest.onepass import (ONE_PASS_SAMPLE, batch_functions, from_json_sql, metadata_as_json,
                                     replayed, typed_plan)
from floeline.ingest.progress import BatchReport
from floeline.ingest.results import BatchResult
from floeline.ingest.table_sink import TableSink
from floeline.ingest.general import Phases
from floeline.ingest.tables_together import TableShare, table_column_sql, write_and_commit
from floeline.jvm import kafka_metadata_function
from floeline.records import shaping
from floeline.records.content import PARSE_VALUE_SQL
from floeline.records.values_to_columns import rules_for
from floeline.sources.base import BatchEnd
from floeline.warehouse import shared_write
from floeline.warehouse.pipes import pipe_for_table

log = logging.getLogger("floeline")

# Records sampled for their keys in a batch whose tables learn them, in all: each table
# samples its share of it, but never fewer than TABLE_SAMPLE_MIN nor more than one
# table's ONE_PASS_SAMPLE.
TABLE_SAMPLE_BUDGET = 10 * ONE_PASS_SAMPLE
TABLE_SAMPLE_MIN = 100


def run_one_pass_tables(pipeline, df, batch_id: int, started: float, start: BatchEnd,
                        end: BatchEnd) -> BatchResult | None:
    """Write the batch's tables in one pass when they allow it (see the module doc);
    None when the batch must take another path (nothing was committed then)."""
    cfg = pipeline.config
    if (not cfg.schematization or pipeline.decode or cfg.changes.upsert
            or not isinstance(pipeline.sink, TableSink)):
        return None
    tables = _tables_of_batch(pipeline, start, end)
    if tables is None:
        return None
    states = [state for state, _channels, _finished in tables.values()]
    key_of_route = {route: f"t{i}" for i, (_name, (_s, channels, finished)) in enumerate(tables.items())
                    for route in {pipeline.source.route_of(ch) for ch in set(channels) | finished}}
    learning = {s.ref.full_name: s for s in states if not s.known_keys}
    if learning:
        most_channels = max(len(channels) for name, (_s, channels, _f) in tables.items() if name in learning)
        sample = pipeline.source.first_records_sql(start, sample_per_channel(len(learning), most_channels))
        if not _learned_from_batch(pipeline, df if sample is None else df.where(sample), states, learning,
                                   key_of_route):
            return None
    learned_s = time.time() - started if learning else 0.0
    schema = pipeline.tables.schema(states[0])
    keys = states[0].known_keys
    if schema is None or not keys or any(
            not (s.one_pass_ready or s.ref.full_name in learning)
            or s.known_keys != keys or pipeline.tables.schema(s) != schema for s in states):
        return None
    plan = typed_plan(schema, keys, pipeline.headers_check, cfg.column_normalization,
                      rules_for(cfg.validation))
    if plan is None or generates_identity(schema, plan.written):
        return None
    push_time = batch_functions(df, plan.known_keys, started, batch_id, metadata=cfg.metadata)
    if push_time is None:
        return None
    observed = Observation(f"floeline-{cfg.name}-{batch_id}")
    meta = pipeline.source.metadata_sql(cfg.metadata, push_time, function=kafka_metadata_function(cfg.metadata),
                                        as_json=metadata_as_json(schema))
    frame = df.selectExpr(
        "route", "value", "headers", "timestamp",
        f"{from_json_sql(plan.json_schema)} AS j", f"{meta} AS _meta",
    ).observe(observed, F.min(F.unix_millis("timestamp")).alias("ts_min"),
              F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid")).selectExpr(
        table_column_sql(key_of_route, "route"), *plan.columns)
    shares = [TableShare(state, state.after({ch: last for ch, (_b, last) in channels.items()}, finished),
                         None, tuple(keys), True)
              for state, channels, finished in tables.values()]
    report = BatchReport(batch_id)
    if learning:
        report.phases["one pass keys"] = learned_s
    try:
        written = write_and_commit(pipeline, frame, shares, Phases(report))
    except (TableError, ServiceUnavailable) as exc:  # a record needing it, or a commit conflict
        log.info("batch %s takes the general path: %s", batch_id, first_lines(str(exc.__cause__ or exc), 2))
        for state in states:
            state.one_pass_failed(committing=True)
        return None
    if written is None:
        return None
    for state in states:
        report.rows_written[state.ref.name] = written[state.ref.full_name]
    report.records_read = sum(written.values())
    positions = {ch: last for _s, channels, _f in tables.values() for ch, (_b, last) in channels.items()}
    stats = observed.get
    return BatchResult(report, positions, [(stats["ts_mid"], report.records_read)], stats["ts_min"])


def sample_per_channel(tables: int, channels: int) -> int:
    """How many first records of each channel a batch whose `tables` learn their keys
    samples, the most channels of one such table being `channels`."""
    per_table = min(ONE_PASS_SAMPLE, max(TABLE_SAMPLE_MIN, TABLE_SAMPLE_BUDGET // max(1, tables)))
    return -(-per_table // max(1, channels))


def _learned_from_batch(pipeline, df, states, learning: dict, key_of_route: dict[str, str]) -> bool:
    """Once per table and run, before the first batch of the tables `learning` (full
    name -> state: those of the batch's `states` without known keys): create or evolve each from the
    keys of its records in `df` (the batch's sample, see the module doc) and learn them, so the
    batch can take one pass.
    False (the general path) when one of them had its try, or has no record whose keys
    make columns; those that were usable are ready all the same."""
    if not all([s.first_one_pass_sample() for s in learning.values()]):
        return False
    values = df.selectExpr(table_column_sql(key_of_route, "route"), f"{PARSE_VALUE_SQL} AS v").where(
        "v IS NOT NULL")
    try:
        merged = {r[0]: r[1] or "" for r in values.groupBy(shared_write.TABLE_COLUMN).agg(
            F.expr("schema_of_variant_agg(v)")).collect()}
    except Exception as exc:  # the general path reads the batch again and reports what is wrong
        log.info("a batch of %d tables takes the general path: %s", len(states), first_lines(str(exc), 2))
        return False
    usable = True
    for i, state in enumerate(states):
        if state.ref.full_name not in learning:
            continue
        fields = shaping.fields_of(merged.get(f"t{i}", ""), pipeline.config.column_normalization)
        if not fields or "" in fields:
            usable = False
            continue
        # An existing table's records are read again only to drop a NOT NULL no record
        # fills; a new table has none (and making a DataFrame per table cost ~10 ms).
        rows = (values.where(f"{shared_write.TABLE_COLUMN} = 't{i}'")
                if pipeline.tables.schema(state) is not None else None)
        pipeline.preparer.prepare(state, rows, fields, first_commit_creates=True)
        state.learn_keys(k for keys, _t in fields.values() for k in keys)
    return usable


def _tables_of_batch(pipeline, start: BatchEnd, end: BatchEnd):
    """table -> (state, channel -> (position before, last position), finished channels)
    when the batch holds new records for several tables, repeats nothing they hold and
    none has a user-defined pipe; else None."""
    channels = {ch: (start.positions.get(ch), last) for ch, last in end.positions.items()
                if start.positions.get(ch) != last}
    finished = set(end.finished - start.finished)
    tables: dict[str, tuple] = {}
    for ch in set(channels) | finished:
        state = pipeline.tables.state(pipeline.table_ref(pipeline.source.route_of(ch)))
        _state, table_channels, table_finished = tables.setdefault(state.ref.full_name, (state, {}, set()))
        if ch in channels:
            table_channels[ch] = channels[ch]
        else:
            table_finished.add(ch)
    if len(tables) < 2 or any(not table_channels for _s, table_channels, _f in tables.values()):
        return None
    for state, table_channels, _f in tables.values():
        ref = state.ref
        if (any(replayed(state, ch, before) for ch, (before, _last) in table_channels.items())
                or pipe_for_table(pipeline.warehouse, ref.database, ref.schema, ref.name)):
            return None
    return tables
