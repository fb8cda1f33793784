"""The streaming job: one Spark Structured Streaming query per connector; each
micro-batch is routed topic -> table, shaped by the default pipe, and committed to
each table together with its channels' offsets.

Per micro-batch (foreachBatch):
  1. parse values to VARIANT, build RECORD_METADATA, classify bad records;
  2. drop records a table already holds (offset <= the channel's committed offset:
     this is what makes replays and lost checkpoints duplicate-free);
  3. per table: create or evolve it, map first-level keys to columns
     case-insensitively, convert types, append with the new channel offsets in the
     same Delta commit;
  4. advance the Kafka consumer group, print one progress line.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import functions as F

from floeline.config import ConnectorConfig
from floeline.errors import FloelineError, RecordError, TableError
from floeline.naming import column_name_for_key, table_for_topic
from floeline.progress import BatchReport
from floeline.records.content import (
    PARSE_ERROR_SQL, PARSE_VALUE_SQL, column_type_for, conversion_error_sql, conversion_is_safe,
    extract_sql,
    parse_object_schema, present_sql, quote_column, sql_string)
from floeline.records.metadata import metadata_sql
from floeline.records.support import check_supported
from floeline.sources.kafka import (
    KafkaCluster, average_record_bytes, group_id, starting_offsets_json)
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.channels import commit_metadata, read_offsets
from floeline.warehouse.tables import METADATA_COLUMN, Column, TableSchema

log = logging.getLogger("floeline")

CONTENT_COLUMN = "RECORD_CONTENT"  # legacy layout, snowflake.enable.schematization=false
_COORDS = ("topic", "partition", "offset")


@dataclass
class _TableState:
    ref: TableRef
    offsets: dict[tuple[str, int], int]  # channel (topic, partition) -> last committed offset
    schema: TableSchema | None = None  # cached; re-read after DDL, failures and SCHEMA_TTL_S
    schema_read_at: float = 0.0


# How long a table's cached schema is trusted before it is read again, so that changes
# made from outside (ALTER TABLE, the evolution flag) are picked up while running.
SCHEMA_TTL_S = 30.0


class Connector:
    """One connector: its config, its tables' committed offsets, its streaming query."""

    def __init__(self, config: ConnectorConfig, spark, out=None):
        check_supported(config)
        self.config = config
        self.spark = spark
        self.out = out or sys.stdout
        self.warehouse = Warehouse(config.warehouse)
        self.cluster = KafkaCluster(config.bootstrap_servers)
        self.group = group_id(config.name)
        self._tables: dict[str, _TableState] = {}
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read, for lag
        self.record_bytes: float | None = None  # sampled mean record size at start
        self.row_errors: dict[str, int] = {}  # table -> rows rejected (rowsErrorCount)
        self.reports: list[BatchReport] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()

    # ---- routing and offsets -------------------------------------------------------

    def table_ref(self, topic: str) -> TableRef:
        name = table_for_topic(topic, self.config.topic_map)
        return self.warehouse.table(self.config.database, self.config.schema, name)

    def _state(self, ref: TableRef) -> _TableState:
        state = self._tables.get(ref.full_name)
        if state is None:
            state = _TableState(ref, read_offsets(self.spark, ref, self.config.name))
            self._tables[ref.full_name] = state
        return state

    def start_positions(self) -> tuple[dict[tuple[str, int], int], int]:
        """Where each partition starts when there is no Spark checkpoint: after the
        offset its table holds; else the consumer group's offset (Snowflake's rule
        when the offset token is NULL); else the earliest. Also the partition count."""
        counts = self.cluster.partitions(self.config.topics, self.config.topics_regex)
        partitions = [(t, p) for t, n in counts.items() for p in range(n)]
        group = self.cluster.group_offsets(self.group, partitions)
        earliest = self.cluster.earliest(partitions)
        self.record_bytes = average_record_bytes(self.config.bootstrap_servers,
                                                 self.cluster.latest(partitions), earliest)
        positions = {}
        for tp in partitions:
            committed = self._state(self.table_ref(tp[0])).offsets.get(tp)
            if committed is not None:
                positions[tp] = committed + 1
            elif tp in group:
                positions[tp] = group[tp]
            else:
                positions[tp] = -2
            self.positions[tp] = positions[tp] if positions[tp] >= 0 else earliest[tp]
        return positions, len(partitions)

    def records_per_partition(self) -> int:
        """The per-partition batch bound: buffer.count.records, lowered so that a batch of
        records of the sampled mean size stays within buffer.size.bytes."""
        limit = self.config.count_records
        if self.record_bytes:
            limit = min(limit, max(1, int(self.config.size_bytes // self.record_bytes)))
        return limit

    # ---- the streaming query -------------------------------------------------------

    def _has_checkpoint(self) -> bool:
        offsets_dir = os.path.join(self.config.checkpoint_dir, "offsets")
        return os.path.isdir(offsets_dir) and bool(os.listdir(offsets_dir))

    def build_stream(self):
        cfg = self.config
        positions, partition_count = self.start_positions()
        reader = (self.spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                  .option("includeHeaders", "true")
                  .option("maxOffsetsPerTrigger",
                          str(self.records_per_partition() * max(1, partition_count))))
        if cfg.topics_regex:
            reader = reader.option("subscribePattern", cfg.topics_regex)
        else:
            reader = reader.option("subscribe", ",".join(cfg.topics))
        if positions and not self._has_checkpoint():
            reader = reader.option("startingOffsets", starting_offsets_json(positions))
        else:
            reader = reader.option("startingOffsets", "earliest")
        return reader.load()

    def run(self, until_caught_up: bool = False) -> None:
        """Run the connector: until the topics are caught up, or until stopped by
        SIGINT/SIGTERM (or `stop()`). Raises the batch's error when one failed."""
        writer = (self.build_stream().writeStream
                  .foreachBatch(self._process_batch_safely)
                  .option("checkpointLocation", self.config.checkpoint_dir)
                  .queryName(f"floeline-{self.config.name}"))
        if until_caught_up:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.flush_time_s} seconds")
        query = writer.start()
        restore = _install_stop_signals(self._stop)
        try:
            while query.isActive and not self._stop.is_set():
                query.awaitTermination(0.5)
        except Exception as exc:
            if self.failure is None:  # the query failed outside a batch (source, planning)
                raise FloelineError(f"connector {self.config.name} stopped: "
                                    f"{_first_lines(str(exc))}") from exc
        finally:
            if query.isActive:
                # Let a micro-batch in flight finish its commits before stopping.
                deadline = time.time() + 120
                while query.isActive and query.status["isTriggerActive"] and time.time() < deadline:
                    time.sleep(0.2)
                query.stop()
            restore()
        if self.failure is not None:
            raise self.failure
        if query.exception() is not None:
            raise FloelineError(f"connector {self.config.name} stopped: "
                                f"{_first_lines(str(query.exception()))}")

    def stop(self) -> None:
        self._stop.set()

    def _process_batch_safely(self, df, batch_id: int) -> None:
        try:
            self.process_batch(df, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise

    # ---- one micro-batch -----------------------------------------------------------

    def process_batch(self, df, batch_id: int) -> BatchReport:
        started = time.time()
        cfg = self.config
        report = BatchReport(batch_id)
        parsed = df.selectExpr("*", f"{PARSE_VALUE_SQL} AS v")
        # Cached for the batch: only what routing, the pipe and the commit read.
        rows = parsed.selectExpr(
            "topic", "partition", "offset", "timestamp", "value IS NULL AS _tombstone", "v",
            f"{PARSE_ERROR_SQL} AS _error",
            f"{metadata_sql(cfg.metadata, int(started * 1000))} AS _meta",
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One pass over the batch gives routing, offsets, error and latency figures.
            phase = _Phases(report)
            stats = {(r["topic"], r["partition"]): r for r in rows.groupBy("topic", "partition").agg(
                F.min("offset").alias("first"), F.max("offset").alias("last"),
                F.count(F.lit(1)).alias("records"), F.count("_error").alias("bad"),
                F.count(F.when(F.col("_tombstone"), 1)).alias("tombstones"),
                F.min(F.unix_millis("timestamp")).alias("ts_min"),
                F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid"),
                F.expr("schema_of_variant_agg(CASE WHEN _error IS NULL THEN v END)").alias("keys"),
            ).collect()}
            phase("read+stats")
            report.records_read = sum(r["records"] for r in stats.values())
            by_table: dict[str, list[tuple[str, int]]] = {}
            for topic, partition in stats:
                state = self._state(self.table_ref(topic))
                by_table.setdefault(state.ref.full_name, []).append((topic, partition))
            for full_name, tps in by_table.items():
                self._write_table(self._tables[full_name], rows, {tp: stats[tp] for tp in tps},
                                  report, phase)
            return self._finish(report, started, stats)
        finally:
            rows.unpersist()

    def _write_table(self, state: _TableState, rows, channels: dict, report: BatchReport, phase):
        """Append this batch's rows of one table, with its channels' new offsets, in one
        Delta commit. `channels` holds the batch statistics of each (topic, partition)."""
        cfg = self.config
        ref = state.ref
        mine = " OR ".join(f"(topic = {sql_string(t)} AND partition = {p})" for t, p in channels)
        table_rows = rows.where(mine)
        expected = sum(c["records"] for c in channels.values())
        # Replays: rows this table already holds (offset <= the channel's offset token).
        replayed = [(t, p, state.offsets[(t, p)]) for (t, p), c in channels.items()
                    if (t, p) in state.offsets and c["first"] <= state.offsets[(t, p)]]
        if replayed:
            seen = " OR ".join(f"(topic = {sql_string(t)} AND partition = {p} AND offset <= {o})"
                               for t, p, o in replayed)
            table_rows = table_rows.where(f"NOT ({seen})")
            expected = table_rows.count()
            report.skipped += sum(c["records"] for c in channels.values()) - expected
        if cfg.null_values == "IGNORE" and any(c["tombstones"] for c in channels.values()):
            tombstones = (table_rows.where("_tombstone").count() if replayed
                          else sum(c["tombstones"] for c in channels.values()))
            report.skipped += tombstones
            expected -= tombstones
            table_rows = table_rows.where("NOT _tombstone")
        if any(c["bad"] for c in channels.values()):
            table_rows, rejected = self._reject_bad(table_rows, "_error", ref, "value converter", report)
            expected -= rejected

        fields = self._record_fields(table_rows, channels) if cfg.schematization else {}
        phase("keys")
        schema = self._prepare_table(state, table_rows, fields)
        phase("table")
        shaped = self._shape(schema, table_rows, fields)
        columns = [f"_c{i} AS {quote_column(c.name)}" for i, c in enumerate(schema.columns)]
        can_fail = "_row_error" in shaped.columns
        if can_fail and cfg.errors_tolerance == "none":
            # Checked inside the write: a bad row fails it before anything commits.
            out = shaped.where("assert_true(_row_error IS NULL, _row_error) IS NULL").selectExpr(*columns)
        elif can_fail:
            out = shaped.where("_row_error IS NULL").selectExpr(*columns)
        else:
            out = shaped.selectExpr(*columns)
        new_offsets = dict(state.offsets)
        new_offsets.update({tp: c["last"] for tp, c in channels.items()})
        user_metadata = commit_metadata(cfg.name, new_offsets)
        try:
            out.write.format("delta").mode("append").option("userMetadata", user_metadata).save(ref.path)
        except Exception as exc:
            if can_fail and cfg.errors_tolerance == "none":
                # Name the first bad record (raises RecordError) if that was the cause.
                self._reject_bad(shaped, "_row_error", ref, "table write", report, "_src_")
            state.schema = None  # the table may have changed under us: read it again next time
            raise TableError(f"writing to table {ref.full_name} failed: {_first_lines(str(exc))}") from exc
        if can_fail and cfg.errors_tolerance == "all":
            written = tables.rows_in_commit(self.spark, ref, user_metadata)
            if written is None or written < expected:  # None: another commit came after ours
                _, rejected = self._reject_bad(shaped, "_row_error", ref, "table write", report, "_src_")
                expected -= rejected
        phase("convert+write")
        state.offsets = new_offsets
        report.rows_written[ref.name] = report.rows_written.get(ref.name, 0) + expected

    def _reject_bad(self, frame, error_column: str, ref: TableRef, stage: str, report: BatchReport,
                    prefix: str = ""):
        """Count, log and drop records whose `error_column` is set; with
        errors.tolerance=none the first one stops the connector instead. Returns the
        remaining rows (without `error_column`) and how many were dropped."""
        bad = frame.where(f"{error_column} IS NOT NULL")
        coords = [f"{prefix}{c} AS {c}" for c in _COORDS]
        first = bad.selectExpr(*coords, error_column).orderBy(*_COORDS).limit(1).collect()
        if not first:
            return frame.drop(error_column), 0
        row = first[0]
        if self.config.errors_tolerance == "none":
            raise RecordError(
                f"{row[error_column]} (table {ref.full_name}). Fix the producer or the table, or "
                f"set errors.tolerance=all to skip bad records. This batch was not committed to "
                f"{ref.full_name}, so a restart resumes at this record.",
                row["topic"], row["partition"], row["offset"], stage)
        count = bad.count()
        report.errors += count
        self.row_errors[ref.full_name] = self.row_errors.get(ref.full_name, 0) + count
        if self.config.errors_log_enable:
            for r in bad.selectExpr(*coords, error_column).collect():
                log.error("skipped record topic=%s partition=%s offset=%s stage=%s: %s",
                          r["topic"], r["partition"], r["offset"], stage, r[error_column])
        return frame.where(f"{error_column} IS NULL").drop(error_column), count

    # ---- the default pipe: keys -> columns ---------------------------------------

    def _schema(self, state: _TableState, refresh: bool = False) -> TableSchema | None:
        if refresh or state.schema is None or time.time() - state.schema_read_at > SCHEMA_TTL_S:
            state.schema = tables.read_schema(self.spark, state.ref)
            state.schema_read_at = time.time()
        return state.schema

    def _prepare_table(self, state: _TableState, table_rows, fields) -> TableSchema:
        """Create the table on its first record, or evolve it for new keys and for
        NOT NULL columns that records leave empty; returns its schema to write with."""
        ref = state.ref
        schema = self._schema(state)
        if schema is None:
            if not self.config.schematization:
                columns = [Column(METADATA_COLUMN, "variant"), Column(CONTENT_COLUMN, "variant")]
            else:
                # snowflake.metadata.all=false writes no metadata: no RECORD_METADATA column.
                columns = [Column(METADATA_COLUMN, "variant")] if self.config.metadata.all_ else []
                columns += [Column(name, column_type_for(vtype))
                            for name, (_keys, vtype) in fields.items()]
            tables.create_table(self.spark, ref, columns, evolution=True)
            # The table is what was just created: no need to read it back.
            state.schema, state.schema_read_at = TableSchema(tuple(columns), True), time.time()
            return state.schema
        if not schema.evolution or not self.config.schematization:
            return schema
        new = [Column(name, column_type_for(vtype)) for name, (_k, vtype) in fields.items()
               if schema.find(name) is None]
        changed = False
        if new:
            tables.add_columns(self.spark, ref, new)
            changed = True
        for column in schema.columns:
            if column.nullable or column.name == METADATA_COLUMN:
                continue
            keys, _vtype = self._field_for(column, fields)
            missing = table_rows.where(f"NOT ({present_sql(keys)})" if keys else "true")
            if missing.limit(1).count():
                tables.drop_not_null(self.spark, ref, column.name)
                changed = True
        return self._schema(state, refresh=True) if changed else schema

    def _record_fields(self, table_rows, channels: dict) -> dict[str, tuple[list[str], str]]:
        """Column name -> (the JSON keys that map to it, their merged variant type). The
        batch's stats pass already merged each channel's keys; only when the table's
        channels disagree are they merged again over the table's rows."""
        schemas = {c["keys"] for c in channels.values()} - {None}
        if len(schemas) <= 1:
            merged = next(iter(schemas), "")
        else:
            valid = "v IS NOT NULL" + (" AND _error IS NULL" if "_error" in table_rows.columns else "")
            result = table_rows.where(valid).selectExpr(
                "schema_of_variant_agg(v) AS s").first()
            merged = result["s"] if result and result["s"] else ""
        fields: dict[str, tuple[list[str], str]] = {}
        upper_index: dict[str, str] = {}
        for key, vtype in parse_object_schema(merged):
            name = column_name_for_key(key)
            existing = upper_index.get(name.upper())
            if existing is None:
                upper_index[name.upper()] = name
                fields[name] = ([key], vtype)
            else:
                keys, old = fields[existing]
                fields[existing] = (keys + [key], old if old == vtype else "VARIANT")
        return fields

    @staticmethod
    def _field_for(column: Column, fields) -> tuple[list[str], str]:
        """The JSON keys matching `column` (case-insensitively) and their batch type."""
        for name, field in fields.items():
            if name.upper() == column.name.upper():
                return field
        return [], "VOID"

    def _shape(self, schema: TableSchema, table_rows, fields):
        """Rows in the table's column layout (as _c0, _c1, ...), with `_row_error` naming
        a conversion failure when some column can fail. Values are extracted in one
        projection and checked in the next, so each is computed once."""
        values, errors = [], []
        for i, column in enumerate(schema.columns):
            ref = f"_c{i}"
            keys, batch_type = self._field_for(column, fields)
            if column.name.upper() == METADATA_COLUMN and not keys:
                values.append(f"CAST(_meta AS {column.type}) AS {ref}" if column.type == "variant"
                              else f"CAST(to_json(_meta) AS {column.type}) AS {ref}")
            elif column.name.upper() == CONTENT_COLUMN and not self.config.schematization:
                # A tombstone kept by behavior.on.null.values=DEFAULT is an empty object.
                values.append(f"CASE WHEN _tombstone THEN parse_json('{{}}') ELSE v END AS {ref}")
            elif keys:
                values.append(f"{extract_sql(keys, column.type)} AS {ref}")
                # Checked per row only when this batch holds values that may not convert.
                if not conversion_is_safe(batch_type, column.type):
                    errors.append(conversion_error_sql(column.name, ref, keys, column.type))
            else:
                values.append(f"CAST(NULL AS {column.type}) AS {ref}")
            if not column.nullable:
                errors.append(f"CASE WHEN {ref} IS NULL THEN "
                              f"{sql_string('NOT NULL column ' + column.name + ' receives null')} END")
        coords = [f"{c} AS _src_{c}" for c in _COORDS]
        shaped = table_rows.selectExpr(*coords, "v", *values)
        if errors:
            shaped = shaped.selectExpr("*", f"coalesce({', '.join(errors)}) AS _row_error")
        return shaped

    # ---- end of batch ----------------------------------------------------------------

    def _finish(self, report: BatchReport, started: float, stats: dict) -> BatchReport:
        """Advance the consumer group, measure lag and latency, print the progress line."""
        if stats:
            next_offsets = {tp: c["last"] + 1 for tp, c in stats.items()}
            self.positions.update(next_offsets)
            try:
                self.cluster.commit_group_offsets(self.group, next_offsets)
            except Exception as exc:  # lag reporting only; the table holds the truth
                log.warning("could not advance consumer group %s: %s", self.group, exc)
            committed_ms = int(time.time() * 1000)
            # p50 over the batch: the record-weighted median of the channels' medians.
            mids = sorted((c["ts_mid"], c["records"]) for c in stats.values())
            half, running = report.records_read / 2, 0
            for mid, records in mids:
                running += records
                if running >= half:
                    report.latency_p50_ms = committed_ms - mid
                    break
            report.latency_max_ms = committed_ms - min(c["ts_min"] for c in stats.values())
        try:
            latest = self.cluster.latest(self.positions)
            report.offsets_behind = sum(max(0, latest[tp] - pos) for tp, pos in self.positions.items()
                                        if tp in latest)
        except Exception as exc:
            log.warning("could not read latest offsets: %s", exc)
        report.duration_s = time.time() - started
        self.reports.append(report)
        print(report.line(), file=self.out, flush=True)
        return report


def _first_lines(message: str, n: int = 6) -> str:
    """A Spark error without its JVM stack trace."""
    message = message.split("\n\nJVM stacktrace")[0]
    return "\n".join(message.splitlines()[:n])


class _Phases:
    """Seconds spent per phase of a batch, shown with FLOELINE_PROFILE=1."""

    def __init__(self, report: BatchReport):
        self.report, self.last = report, time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.report.phases[name] = self.report.phases.get(name, 0.0) + now - self.last
        self.last = now


def _install_stop_signals(stop: threading.Event):
    """SIGINT/SIGTERM ask the connector to stop after the current batch."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())

    def restore():
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore
