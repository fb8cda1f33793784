"""The general path of a micro-batch: every record is decoded and checked, so any
batch can take it (new keys, bad records, tombstones, replays, several tables,
user-defined pipes, converters and transforms).

  1. decode (`records`): converters and transforms in Python when the config needs
     them; parse values to VARIANT; RECORD_METADATA from the source's fields; classify
     bad records;
  2. one statistics pass per (channel, route) (`channel_groups`): positions, counts,
     keys, latency;
  3. route (`table_batches`): each table's share of the batch (a TableBatch);
  4. errors.tolerance=none (`check_before_commits`): the batch's first bad record stops
     the connector before any table commits (with several tables, every table's rows
     are checked first by its sink);
  5. per table: the sink (sink.py: table_sink.py or snowpipe_sink.py) commits the rows
     with the channels' new positions in one Delta commit; or, when every table of the
     batch has the same columns computed the same way, one job writes all their files
     and each table commits its own (tables_together.py)."""

from __future__ import annotations

import time

from pyspark import StorageLevel
from pyspark.sql import functions as F

from floeline.errors import batch_failure
from floeline.ingest.progress import BatchReport
from floeline.ingest.results import BatchResult, ChannelStats
from floeline.ingest.sink import TableBatch
from floeline.ingest.tables_together import write_tables_together
from floeline.records.content import (
    BLANK_VALUE_SQL, PARSE_ERROR_ANY_JSON_SQL, PARSE_ERROR_SQL, PARSE_VALUE_SQL, sql_string)
from floeline.records.changes import record_key_sql
from floeline.records.decode import decode_frame, with_converted_headers
from floeline.records.header_rules import HEADER_STAGE
from floeline.sources.base import later_position, max_position_sql, min_position_sql


class Phases:
    """Seconds spent per phase of a batch, shown with FLOELINE_PROFILE=1."""

    def __init__(self, report: BatchReport):
        self.report, self.last = report, time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.report.phases[name] = self.report.phases.get(name, 0.0) + now - self.last
        self.last = now


def run_general_batch(pipeline, df, batch_id: int, started: float, finished: set[str],
                      routes: list[str]) -> BatchResult:
    """Process the batch on the general path; its BatchResult. `routes`: the source's
    routes when the query started."""
    report = BatchReport(batch_id)
    # Cached for the batch: only what routing, the pipe, the commit and the DLQ read.
    rows = records(pipeline, fewer_partitions(pipeline, df, routes), started, routes).persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        phase = Phases(report)
        groups = channel_groups(rows)
        phase("read+stats")
        report.records_read = sum(g["records"] for g in groups)
        batches = table_batches(pipeline, rows, groups, finished, routes, report, phase)
        if write_tables_together(pipeline, rows, groups, batches):
            return _result(report, groups)
        if pipeline.config.errors_tolerance == "none":
            check_before_commits(pipeline, rows, groups, batches, batch_id)
        for batch in batches:
            if not batch.channels and not _has_table(pipeline, batch.state):
                continue  # a finished channel whose table does not exist yet: nothing to hold
            pipeline.sink.write(batch)
        return _result(report, groups)
    finally:
        rows.unpersist()


def channel_groups(rows) -> list:
    """The statistics pass: one row per (channel, route) with its positions, counts,
    timestamps and merged keys. Raises the batch's failure when a record could not be
    decoded for a reason that is not the record's (the schema registry is down)."""
    groups = rows.groupBy("channel", "_route").agg(
        F.expr(min_position_sql("position")).alias("first"),
        F.expr(max_position_sql("position")).alias("last"),
        F.count(F.lit(1)).alias("records"), F.count("_error").alias("bad"),
        F.count("_batch_failure").alias("failures"),
        F.count(F.when(F.col("_tombstone"), 1)).alias("tombstones"),
        F.count(F.when(F.col("_skip"), 1)).alias("filtered"),
        F.min(F.unix_millis("timestamp")).alias("ts_min"),
        F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid"),
        F.expr("schema_of_variant_agg(CASE WHEN _error IS NULL THEN v END)").alias("keys"),
        F.expr("collect_set(CASE WHEN _error IS NULL THEN _schema_id END)").alias("schema_ids"),
        F.expr("collect_set(CASE WHEN _error IS NULL THEN _declared_types END)").alias("declared_types"),
    ).collect()
    if any(g["failures"] for g in groups):
        # Not a record's fault: the batch fails whole, before any table or dead-letter
        # queue sees a row of it.
        first = rows.where("_batch_failure IS NOT NULL").select(
            "_batch_failure", "_error").limit(1).collect()[0]
        raise batch_failure(first["_batch_failure"], first["_error"])
    return groups


def table_batches(pipeline, rows, groups, finished: set[str], routes: list[str],
                  report: BatchReport, phase) -> list[TableBatch]:
    """Route the batch: each table's rows, channel statistics and finished channels
    (channels finished in this batch are recorded by the tables of their routes)."""
    by_table: dict[str, tuple[set[str], dict[str, ChannelStats]]] = {}
    for g in groups:
        state = pipeline.tables.state(pipeline.table_ref(g["_route"]))
        table_routes, channels = by_table.setdefault(state.ref.full_name, (set(), {}))
        table_routes.add(g["_route"])
        _merge_channel(channels, g["channel"], ChannelStats.from_group(g))
    if len(by_table) > 1:
        merge_keys_per_table(rows, by_table)
    finished_by_table = _finished_by_table(pipeline, finished)
    for name in finished_by_table:
        by_table.setdefault(name, (set(), {}))
    batches = []
    for name, (table_routes, channels) in by_table.items():
        state = pipeline.tables.states[name]
        where = (f"_route IN ({', '.join(sql_string(r) for r in sorted(table_routes))})"
                 if table_routes else "false")
        batches.append(TableBatch(state, rows.where(where), channels, finished_by_table.get(name, set()),
                                  report, phase, _query_routes_of(pipeline, name, routes)))
    return batches


def check_before_commits(pipeline, rows, groups, batches: list[TableBatch], batch_id: int) -> None:
    """errors.tolerance=none: the batch's first bad record stops the connector before
    any table commits; with several tables, every table's rows are checked first."""
    if any(g["bad"] for g in groups):
        pipeline.bad.divert(rows, "_error", "_stage", None, BatchReport(batch_id), None)
    if len(batches) > 1:
        for batch in batches:
            pipeline.sink.check(TableBatch(batch.state, batch.rows, batch.channels, set(),
                                           BatchReport(batch_id), Phases(BatchReport(batch_id)),
                                           batch.routes))


def _result(report: BatchReport, groups) -> BatchResult:
    positions: dict[str, str] = {}
    for g in groups:
        positions[g["channel"]] = later_position(positions.get(g["channel"]), g["last"])
    samples = [(g["ts_mid"], g["records"]) for g in groups]
    ts_min = min((g["ts_min"] for g in groups if g["ts_min"] is not None), default=None)
    return BatchResult(report, positions, samples, ts_min)


def _query_routes_of(pipeline, table: str, routes: list[str]) -> set[str]:
    """The query's routes whose records go to `table` (after transforms)."""
    return {r for r in routes if pipeline.table_of_route(r).full_name == table}


def fewer_partitions(pipeline, df, routes: list[str]):
    """The batch in at most spark.default.parallelism partitions when the connector
    writes several tables. Each table's write scans every partition of the cached
    batch, so 100 topics x 4 partitions made 400 tasks per table and 40,000 per batch
    (bench/bench_scale.py: 0.18x the single-table rows/s with 10 tables); a source
    partition holds one route, so merging them costs a table nothing but a filter.
    With one table the read keeps its tasks (at most read_tasks.read_task_limit)."""
    tables = {pipeline.table_of_route(r).full_name for r in routes}
    if len(tables) <= 1:
        return df
    return df.coalesce(max(1, df.sparkSession.sparkContext.defaultParallelism))


def records(pipeline, df, started: float, routes: list[str]):
    """The batch's records, decoded: channel, position, the route after transforms
    (`_route`), the value as VARIANT (`v`) and its schema registry id (`_schema_id`),
    why a record cannot be ingested (`_error`, `_stage`), RECORD_METADATA (`_meta`; also
    as JSON text, `_meta_json`, with floeline.variant.storage=json), and the original
    bytes (`_raw_key`, `_raw_value`, `headers`, `timestamp`, `source`) for bad records;
    with insert.mode=upsert, the record key as VARIANT (`_key`)."""
    cfg = pipeline.config
    if pipeline.decode:
        # Converters and transforms in Python; the columns below read their output.
        df = decode_frame(df, cfg).selectExpr(
            "channel", "position", "route", "timestamp", "headers", "source",
            "key AS _raw_key", "value AS _raw_value", "_key_json", "_headers_json",
            "CAST(_value_json AS BINARY) AS value", "_schema_id", "_declared_types",
            "_route_topic AS _route", "_skip", "_decode_error", "_decode_stage", "_error_class",
            "_batch_failure")
        routed_routes = {r: pipeline.routed(r) for r in routes}
        if any(r != routed for r, routed in routed_routes.items()):
            # A record a Filter dropped or a transform failed on has no routed route of
            # its own: it belongs with its route's other records (positions, error table).
            lookup = "map(" + ", ".join(f"{sql_string(r)}, {sql_string(t)}"
                                        for r, t in sorted(routed_routes.items())) + ")"
            df = df.withColumn("_route", F.expr(
                f"CASE WHEN _skip OR _decode_error IS NOT NULL THEN "
                f"coalesce(element_at({lookup}, route), route) ELSE _route END"))
    else:
        # Header values by header.converter (only those SQL cannot write go to Python).
        df = with_converted_headers(df, cfg, pipeline.headers_check).selectExpr(
            "channel", "position", "route", "key", "headers", "timestamp", "source",
            f"CASE WHEN {BLANK_VALUE_SQL} THEN NULL ELSE value END AS value",
            "key AS _raw_key", "value AS _raw_value", "route AS _route", "_headers_json",
            "CAST(NULL AS INT) AS _schema_id", "CAST(NULL AS STRING) AS _declared_types",
            "false AS _skip", "_headers_error AS _decode_error",
            f"CASE WHEN _headers_error IS NOT NULL THEN '{HEADER_STAGE}' END AS _decode_stage",
            "CASE WHEN _headers_error IS NOT NULL THEN 'ConverterError' END AS _error_class",
            "CAST(NULL AS STRING) AS _batch_failure")
    parse_error = PARSE_ERROR_SQL if cfg.schematization else PARSE_ERROR_ANY_JSON_SQL
    parts = {"key_json": "_key_json" if pipeline.decode else None,
             "headers_json": None if pipeline.headers_in_sql else "_headers_json"}
    metadata = pipeline.source.metadata_sql(cfg.metadata, int(started * 1000), **parts)
    # insert.mode=upsert: the record key as a VARIANT, where primary keys come from.
    key = [f"{record_key_sql('_key_json' if pipeline.decode else None)} AS _key"] if cfg.changes.upsert else []
    # RECORD_METADATA's JSON text built as such, for the tables that store it so
    # (records/shaping.py): to_json of the VARIANT costs ten times as much.
    text = ([pipeline.source.metadata_sql(cfg.metadata, int(started * 1000), **parts, as_json=True)
             + " AS _meta_json"] if cfg.table_settings.variant_storage == "json" else [])
    return df.selectExpr("*", f"{PARSE_VALUE_SQL} AS v").selectExpr(
        "channel", "position", "timestamp", "headers", "source", "_raw_key", "_raw_value",
        "_route", "_skip", "_schema_id", "_declared_types",
        "value IS NULL AND _decode_error IS NULL AND NOT _skip AS _tombstone", "v",
        f"CASE WHEN _skip THEN NULL ELSE coalesce(_decode_error, {parse_error}) END AS _error",
        "CASE WHEN _decode_error IS NOT NULL THEN _decode_stage ELSE 'value converter' END AS _stage",
        "coalesce(_error_class, 'DataException') AS _error_class", "_batch_failure",
        f"{metadata} AS _meta", *key, *text,
    )


def merge_keys_per_table(rows, by_table: dict) -> None:
    """Give each one-route table whose channels saw different key types (integers of
    other precisions, say) its route's merged keys, from one job for all such tables.
    Else each table's sink merges them with a job of its own (table_preparer.record_fields),
    twice with errors.tolerance=none: 100 tables made 200 jobs a batch."""
    mixed = {name: next(iter(routes)) for name, (routes, channels) in by_table.items()
             if len(routes) == 1 and len(set().union(*(c.keys for c in channels.values())) - {None}) > 1}
    if not mixed:
        return
    wanted = ", ".join(sql_string(r) for r in sorted(set(mixed.values())))
    merged = {r["_route"]: r["keys"] for r in rows.where(
        f"_error IS NULL AND v IS NOT NULL AND NOT _skip AND _route IN ({wanted})").groupBy("_route").agg(
        F.expr("schema_of_variant_agg(v)").alias("keys")).collect()}
    for name, route in mixed.items():
        for channel in by_table[name][1].values():
            channel.keys = {merged.get(route)}


def _finished_by_table(pipeline, finished: set[str]) -> dict[str, set[str]]:
    by_table: dict[str, set[str]] = {}
    for channel in finished:
        route = pipeline.source.route_of(channel)
        state = pipeline.tables.state(pipeline.table_of_route(route))
        by_table.setdefault(state.ref.full_name, set()).add(channel)
    return by_table


def _has_table(pipeline, state) -> bool:
    return pipeline.tables.schema(state) is not None


def _merge_channel(channels: dict[str, ChannelStats], channel: str, stats: ChannelStats) -> None:
    """Add one (channel, route) group's statistics to the channel's."""
    old = channels.get(channel)
    if old is None:
        channels[channel] = stats
    else:
        old.add(stats)
