"""The streaming job: one Spark Structured Streaming query per connector; each
micro-batch is routed topic -> table, shaped by the table's pipe, and committed to
each table together with its channels' offsets.

Per micro-batch (foreachBatch):
  0. steady state: one pass straight into the table (fastpath.py); anything unusual
     in the batch fails that pass before Delta commits and the batch goes on below;
  1. decode (converters and transforms in Python when the config needs them), parse
     values to VARIANT, build RECORD_METADATA, classify bad records;
  2. drop records a table already holds (offset <= the channel's committed offset:
     this is what makes replays and lost checkpoints duplicate-free);
  3. bad records: stop the connector (errors.tolerance=none) or send them to the DLQ
     topic or the `<TABLE>_ERRORS` table before the table's commit;
  4. per table: create or evolve it, compute its rows with the default or the user's
     pipe (records/shaping.py), append them with the new channel offsets in the same
     Delta commit;
  5. advance the Kafka consumer group, print one progress line.
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
from pyspark.sql import Observation
from pyspark.sql import functions as F

from floeline import fastpath, jvm
from floeline.config import ConnectorConfig
from floeline.errors import FloelineError, RecordError, ServiceUnavailable, TableError
from floeline.naming import table_for_topic
from floeline.progress import BatchReport
from floeline.records.content import (
    PARSE_ERROR_ANY_JSON_SQL, PARSE_ERROR_SQL, PARSE_VALUE_SQL, column_type_for, present_sql,
    quote_column, sql_string)
from floeline.records.decode import decode_frame, needs_python_decode, transform_chain_for
from floeline.records.dlq import ERROR_TABLE_COLUMNS, ERROR_TABLE_SUFFIX, BadRecord, send_to_dlq
from floeline.records import shaping
from floeline.records.metadata import metadata_sql
from floeline.records.transforms import routed_topic
from floeline.records.support import check_supported
from floeline.sources.kafka import (
    SPARK_SOURCE_OPTIONS, KafkaCluster, average_record_bytes, group_id, starting_offsets_json)
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.pipes import pipe_for_table
from floeline.warehouse.channels import commit_metadata, parse_commit_metadata, read_offsets
from floeline.warehouse.tables import METADATA_COLUMN, Column, TableSchema

log = logging.getLogger("floeline")

_COORDS = ("topic", "partition", "offset")


@dataclass
class _TableState:
    ref: TableRef
    offsets: dict[tuple[str, int], int]  # channel (topic, partition) -> last committed offset
    schema: TableSchema | None = None  # cached; re-read after DDL, failures and SCHEMA_TTL_S
    schema_read_at: float = 0.0
    # The exact JSON keys earlier batches held, and whether the last batch was clean
    # (no bad records, tombstones or row errors): what the one-pass path needs.
    known_keys: frozenset[str] = frozenset()
    one_pass_ready: bool = False
    one_pass_tried: bool = False  # whether a sample of the first batch set known_keys
    # An error table is written up to twice per batch (decode errors, row errors): both
    # writes filter replays against the offsets it held before the batch.
    batch_metadata: str | None = None
    batch_base: dict[tuple[str, int], int] | None = None


# How long a table's cached schema is trusted before it is read again, so that changes
# made from outside (ALTER TABLE, the evolution flag) are picked up while running.
SCHEMA_TTL_S = 30.0
# How many records of a table's first batch decide its columns before that batch
# tries one pass (see fastpath.py).
ONE_PASS_SAMPLE = 1000


class Connector:
    """One connector: its config, its tables' committed offsets, its streaming query."""

    def __init__(self, config: ConnectorConfig, spark, out=None):
        check_supported(config)
        self.config = config
        self.decode = needs_python_decode(config)  # converters/transforms run in Python
        self.transforms = transform_chain_for(config.raw)
        self.spark = spark
        self.out = out or sys.stdout
        self.warehouse = Warehouse(config.warehouse)
        self.cluster = KafkaCluster(config.bootstrap_servers)
        self.group = group_id(config.name)
        self._tables: dict[str, _TableState] = {}
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read, for lag
        self.first_offsets: dict[tuple[str, int], int] = {}  # where batch 0 starts, resolved
        self.record_bytes: float | None = None  # sampled mean record size at start
        self.row_errors: dict[str, int] = {}  # table -> rows rejected (rowsErrorCount)
        self.reports: list[BatchReport] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()

    # ---- routing and offsets -------------------------------------------------------

    def table_ref(self, topic: str) -> TableRef:
        """The table records of `topic` (after transforms such as RegexRouter) go to."""
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
            committed = self._state(self.table_ref(self._routed_topic(tp[0]))).offsets.get(tp)
            if committed is not None:
                positions[tp] = committed + 1
            elif tp in group:
                positions[tp] = group[tp]
            else:
                positions[tp] = -2
            self.positions[tp] = positions[tp] if positions[tp] >= 0 else earliest[tp]
        self.first_offsets = dict(self.positions)
        return positions, len(partitions)

    def _routed_topic(self, topic: str) -> str:
        """The topic `topic`'s records are routed as (RegexRouter); a restart resumes
        content-dependent routes from the consumer group's offsets."""
        return routed_topic(self.transforms, topic)

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
                  .options(**SPARK_SOURCE_OPTIONS)
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
            # A short wait: --until-caught-up returns as soon as the last batch is done.
            while query.isActive and not self._stop.is_set():
                query.awaitTermination(0.1)
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
        report = self._one_pass_batch(df, batch_id, started)
        if report is not None:
            return report
        return self._general_batch(df, batch_id, started)

    def _one_pass_batch(self, df, batch_id: int, started: float) -> BatchReport | None:
        """Write the batch in one pass when its table and records allow it (see
        fastpath.py); None when the batch must take the general path, which is also
        what happens when a record turns out to need it (nothing was committed)."""
        cfg = self.config
        if not cfg.schematization or self.decode:
            return None
        end = fastpath.batch_offsets(cfg.checkpoint_dir, batch_id)
        start = (fastpath.batch_offsets(cfg.checkpoint_dir, batch_id - 1) if batch_id > 0
                 else self.first_offsets)
        if not end or start is None or any(tp not in start for tp in end):
            return None
        channels = {tp: (start[tp], e) for tp, e in end.items() if e > start[tp]}
        refs = {ref.full_name: ref for ref in map(self.table_ref, {t for t, _p in channels})}
        if len(refs) != 1:
            return None
        state = self._state(next(iter(refs.values())))
        if any(state.offsets.get(tp, -1) >= first for tp, (first, _e) in channels.items()):
            return None  # a replay: the general path drops what the table holds
        if pipe_for_table(self.warehouse, state.ref.database, state.ref.schema, state.ref.name):
            return None  # a user-defined pipe computes the columns (general path)
        if not state.known_keys and not state.one_pass_tried:
            state.one_pass_tried = True  # sample once per table, not after every failure
            if not self._learn_from_sample(state, df):
                return None
        elif not state.one_pass_ready:
            return None
        schema = self._schema(state)
        plan = fastpath.typed_plan(schema, state.known_keys) if schema else None
        if plan is None:
            return None
        report = BatchReport(batch_id)
        observed = Observation(f"floeline-{cfg.name}-{batch_id}")
        try:
            # The batch's session is the stream's own (a clone): the functions go there.
            jvm.ensure_known_keys(df.sparkSession, plan.known_keys)
            push_time = jvm.register_push_time(df.sparkSession, int(started * 1000)) + "()"
        except Exception as exc:  # no floeline jar in this session (see jvm.py)
            log.info("batch %s takes the general path: no floeline JVM functions: %s", batch_id, exc)
            return None
        frame = df.selectExpr(
            "value", "timestamp",
            f"{fastpath.from_json_sql(plan.json_schema)} AS j",
            f"{metadata_sql(cfg.metadata, push_time)} AS _meta",
        ).observe(observed, F.count(F.lit(1)).alias("records"),
                  F.min(F.unix_millis("timestamp")).alias("ts_min"),
                  F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid"))
        new_offsets = dict(state.offsets)
        new_offsets.update({tp: e - 1 for tp, (_s, e) in channels.items()})
        try:
            (frame.selectExpr(*plan.columns).write.format("delta").mode("append")
             .option("userMetadata", commit_metadata(cfg.name, new_offsets)).save(state.ref.path))
        except Exception as exc:
            log.info("batch %s takes the general path: %s", batch_id, _first_lines(str(exc), 2))
            state.one_pass_ready, state.schema = False, None
            return None
        report.phases["one pass write"] = time.time() - started
        stats = observed.get
        state.offsets, state.one_pass_ready = new_offsets, True
        report.records_read = stats["records"]
        report.rows_written[state.ref.name] = stats["records"]
        report.phases["one pass"] = time.time() - started
        report.phases["one pass stats"] = time.time() - started - report.phases["one pass write"]
        return self._finish(report, started, {tp: e for tp, (_s, e) in channels.items()},
                            [(stats["ts_mid"], stats["records"])], stats["ts_min"])

    def _general_batch(self, df, batch_id: int, started: float) -> BatchReport:
        cfg = self.config
        report = BatchReport(batch_id)
        # Cached for the batch: only what routing, the pipe, the commit and the DLQ read.
        rows = self._records(df, started).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One pass over the batch gives routing, offsets, error and latency figures.
            phase = _Phases(report)
            groups = rows.groupBy("topic", "partition", "_route_topic").agg(
                F.min("offset").alias("first"), F.max("offset").alias("last"),
                F.count(F.lit(1)).alias("records"), F.count("_error").alias("bad"),
                F.count(F.when(F.col("_tombstone"), 1)).alias("tombstones"),
                F.count(F.when(F.col("_skip"), 1)).alias("filtered"),
                F.min(F.unix_millis("timestamp")).alias("ts_min"),
                F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("ts_mid"),
                F.expr("schema_of_variant_agg(CASE WHEN _error IS NULL THEN v END)").alias("keys"),
            ).collect()
            phase("read+stats")
            report.records_read = sum(g["records"] for g in groups)
            by_table: dict[str, tuple[set[str], dict]] = {}
            for g in groups:
                state = self._state(self.table_ref(g["_route_topic"]))
                route_topics, channels = by_table.setdefault(state.ref.full_name, (set(), {}))
                route_topics.add(g["_route_topic"])
                _merge_channel(channels, (g["topic"], g["partition"]), g)
            if cfg.errors_tolerance == "none" and any(g["bad"] for g in groups):
                # The batch's first bad record stops the connector before any table commits.
                self._divert_bad(rows, "_error", "_stage", None, report, "")
            writes = [(self._tables[name], rows.where(
                f"_route_topic IN ({', '.join(sql_string(t) for t in sorted(route_topics))})"),
                channels) for name, (route_topics, channels) in by_table.items()]
            if cfg.errors_tolerance == "none" and len(writes) > 1:
                # A row error in any table must stop the batch before the first commit.
                for state, table_rows, channels in writes:
                    self._write_table(state, table_rows, channels, BatchReport(batch_id),
                                      _Phases(BatchReport(batch_id)), check_only=True)
            for state, table_rows, channels in writes:
                self._write_table(state, table_rows, channels, report, phase)
            next_offsets: dict[tuple[str, int], int] = {}
            for g in groups:
                tp = (g["topic"], g["partition"])
                next_offsets[tp] = max(next_offsets.get(tp, 0), g["last"] + 1)
            return self._finish(report, started, next_offsets,
                                [(g["ts_mid"], g["records"]) for g in groups],
                                min((g["ts_min"] for g in groups), default=None))
        finally:
            rows.unpersist()

    def _records(self, df, started: float):
        """The batch's records, decoded: coordinates, the value as VARIANT (`v`), why a
        record cannot be ingested (`_error`, `_stage`), RECORD_METADATA (`_meta`), and the
        original bytes (`_raw_key`, `_raw_value`, `headers`, `timestamp`) for the DLQ."""
        cfg = self.config
        if self.decode:
            # Converters and transforms in Python; the columns below read their output.
            df = decode_frame(df, cfg).selectExpr(
                "topic", "partition", "offset", "timestamp", "timestampType", "headers",
                "key AS _raw_key", "value AS _raw_value",
                "CAST(_key_text AS BINARY) AS key", "CAST(_value_json AS BINARY) AS value",
                "_route_topic", "_skip", "_decode_error", "_decode_stage", "_error_class")
            routes = {t: self._routed_topic(t) for t, _p in self.positions}
            if any(t != r for t, r in routes.items()):
                # A record a Filter dropped or a transform failed on has no routed topic of
                # its own: it belongs with its topic's other records (offsets, error table).
                lookup = "map(" + ", ".join(f"{sql_string(t)}, {sql_string(r)}"
                                            for t, r in sorted(routes.items())) + ")"
                df = df.withColumn("_route_topic", F.expr(
                    f"CASE WHEN _skip OR _decode_error IS NOT NULL THEN "
                    f"coalesce(element_at({lookup}, topic), topic) ELSE _route_topic END"))
        else:
            df = df.selectExpr(
                "*", "key AS _raw_key", "value AS _raw_value", "topic AS _route_topic",
                "false AS _skip", "CAST(NULL AS STRING) AS _decode_error",
                "CAST(NULL AS STRING) AS _decode_stage", "CAST(NULL AS STRING) AS _error_class")
        parse_error = PARSE_ERROR_SQL if cfg.schematization else PARSE_ERROR_ANY_JSON_SQL
        return df.selectExpr("*", f"{PARSE_VALUE_SQL} AS v").selectExpr(
            "topic", "partition", "offset", "timestamp", "headers", "_raw_key", "_raw_value",
            "_route_topic", "_skip",
            "value IS NULL AND _decode_error IS NULL AND NOT _skip AS _tombstone", "v",
            f"CASE WHEN _skip THEN NULL ELSE coalesce(_decode_error, {parse_error}) END AS _error",
            "CASE WHEN _decode_error IS NOT NULL THEN _decode_stage ELSE 'value converter' END AS _stage",
            "coalesce(_error_class, 'DataException') AS _error_class",
            f"{metadata_sql(cfg.metadata, int(started * 1000))} AS _meta",
        )

    def _write_table(self, state: _TableState, table_rows, channels: dict, report: BatchReport,
                     phase, check_only: bool = False):
        """Append this batch's rows of one table, with its channels' new offsets, in one
        Delta commit. `channels` holds the batch statistics of each (topic, partition).
        `check_only`: stop at the first row error (raising it) without writing."""
        cfg = self.config
        ref = state.ref
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
        if any(c["filtered"] for c in channels.values()):  # dropped by a Filter transform
            filtered = (table_rows.where("_skip").count() if replayed
                        else sum(c["filtered"] for c in channels.values()))
            report.skipped += filtered
            expected -= filtered
            table_rows = table_rows.where("NOT _skip")
        if cfg.null_values == "IGNORE" and any(c["tombstones"] for c in channels.values()):
            tombstones = (table_rows.where("_tombstone").count() if replayed
                          else sum(c["tombstones"] for c in channels.values()))
            report.skipped += tombstones
            expected -= tombstones
            table_rows = table_rows.where("NOT _tombstone")
        new_offsets = dict(state.offsets)
        new_offsets.update({tp: c["last"] for tp, c in channels.items()})
        user_metadata = commit_metadata(cfg.name, new_offsets)
        if any(c["bad"] for c in channels.values()):
            table_rows, rejected = self._divert_bad(table_rows, "_error", "_stage", ref, report,
                                                    user_metadata)
            expected -= rejected

        if expected <= 0 and self._schema(state) is None:
            # Nothing lands and there is no table: none is created just to hold offsets
            # (on a restart, the consumer group's offsets say where to resume).
            state.offsets = new_offsets
            return
        pipe = pipe_for_table(self.warehouse, ref.database, ref.schema, ref.name)
        if pipe is not None:
            # A user-defined pipe (or interactive table) computes the columns itself:
            # no key matching, no schema evolution.
            schema = self._schema(state, refresh=True)
            if schema is None:
                raise TableError(f"table {ref.full_name} has {pipe.kind} {pipe.name} but the table "
                                 f"is gone; create it again or DROP PIPE {pipe.name}")
            fields = {}
            shaped = shaping.pipe_rows(schema, table_rows, pipe)
        else:
            fields = self._record_fields(table_rows, channels) if cfg.schematization else {}
            if "" in fields:  # no column can be named by an empty key
                table_rows = table_rows.selectExpr("*", (
                    "CASE WHEN try_variant_get(v, '$[\"\"]', 'variant') IS NOT NULL THEN 'the record "
                    "has an empty key (\"\"), which cannot be a column name: rename it in the producer "
                    "or with the ReplaceField transform' END AS _key_error"))
                table_rows, rejected = self._divert_bad(table_rows, "_key_error", "'table write'", ref,
                                                        report, user_metadata)
                expected -= rejected
                fields.pop("")
            phase("keys")
            schema = self._prepare_table(state, table_rows, fields)
            phase("table")
            shaped = shaping.default_pipe_rows(schema, table_rows, fields, cfg.schematization)
        columns = [f"_c{i} AS {quote_column(c.name)}" for i, c in enumerate(schema.columns)]
        row_stage = "'pipe expression'" if pipe is not None else "'table write'"
        can_fail = "_row_error" in shaped.columns
        if check_only:
            if can_fail:
                self._divert_bad(shaped, "_row_error", row_stage, ref, report, user_metadata,
                                 "_src_")
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
            _, rejected = self._divert_bad(shaped, "_row_error", row_stage, ref, report,
                                           user_metadata, "_src_")
            expected -= rejected
        try:
            out.write.format("delta").mode("append").option("userMetadata", user_metadata).save(ref.path)
        except Exception as exc:
            if can_fail and cfg.errors_tolerance == "none":
                # Name the first bad record (raises RecordError) if that was the cause.
                self._divert_bad(shaped, "_row_error", row_stage, ref, report, user_metadata,
                                 "_src_")
            state.schema = None  # the table may have changed under us: read it again next time
            raise TableError(f"writing to table {ref.full_name} failed: {_first_lines(str(exc))}") from exc
        phase("convert+write")
        state.offsets = new_offsets
        # The next batch may take one pass if this one held nothing unusual.
        clean = not any(c["bad"] or c["tombstones"] or c["filtered"] for c in channels.values())
        state.known_keys |= frozenset(k for keys, _t in fields.values() for k in keys)
        state.one_pass_ready = clean and not replayed and not can_fail and bool(fields)
        report.rows_written[ref.name] = report.rows_written.get(ref.name, 0) + expected

    def _divert_bad(self, frame, error_column: str, stage_sql: str, ref: TableRef,
                    report: BatchReport, user_metadata: str, prefix: str = ""):
        """Records whose `error_column` is set: with errors.tolerance=none the first one
        stops the connector (after going to the DLQ when one is set); with `all` they go
        to the DLQ topic, or else to the error table `<TABLE>_ERRORS`, are counted and
        logged. Returns the remaining rows (without `error_column`) and how many went."""
        cfg = self.config
        bad = frame.where(f"{error_column} IS NOT NULL").selectExpr(
            *[f"{prefix}{c} AS {c}" for c in _COORDS + ("timestamp", "headers")],
            "_raw_key", "_raw_value", f"{error_column} AS _error_text", f"{stage_sql} AS _stage_text",
            f"{prefix}_error_class AS _class")
        if cfg.errors_tolerance == "none":
            first = bad.orderBy(*_COORDS).limit(1).collect()
            if not first:
                return frame.drop(error_column), 0
            row = first[0]
            if row["_class"] == "RegistryUnavailable":
                raise ServiceUnavailable(row["_error_text"])
            if cfg.dlq_topic:
                self._send_to_dlq([row])
            where = f" (table {ref.full_name})" if ref is not None else ""
            raise RecordError(
                f"{row['_error_text']}{where}. Fix the producer, the transforms or the table, or "
                f"set errors.tolerance=all to route bad records to the dead-letter queue. Nothing "
                f"of this batch was committed, so a restart resumes at this record.",
                row["topic"], row["partition"], row["offset"], row["_stage_text"])
        if cfg.dlq_topic:
            records = bad.orderBy(*_COORDS).collect()
            if any(r["_class"] == "RegistryUnavailable" for r in records):
                raise ServiceUnavailable(next(r["_error_text"] for r in records
                                              if r["_class"] == "RegistryUnavailable"))
            self._send_to_dlq(records)
            count = len(records)
        else:
            count = self._write_error_table(bad, ref, user_metadata)
        if count == 0:
            return frame.drop(error_column), 0
        report.errors += count
        report.errors_by_table[ref.name] = report.errors_by_table.get(ref.name, 0) + count
        self.row_errors[ref.full_name] = self.row_errors.get(ref.full_name, 0) + count
        if cfg.errors_log_enable:
            for r in bad.select(*_COORDS, "_stage_text", "_error_text").collect():
                detail = f": {r['_error_text']}" if cfg.errors_log_include_messages else ""
                log.error("bad record topic=%s partition=%s offset=%s stage=%s%s",
                          r["topic"], r["partition"], r["offset"], r["_stage_text"], detail)
        return frame.where(f"{error_column} IS NULL").drop(error_column), count

    def _send_to_dlq(self, rows) -> None:
        cfg = self.config
        records = [BadRecord(r["topic"], r["partition"], r["offset"],
                             int(r["timestamp"].timestamp() * 1000) if r["timestamp"] else None,
                             r["_raw_key"], r["_raw_value"],
                             [(h["key"], h["value"]) for h in (r["headers"] or [])],
                             r["_stage_text"], r["_error_text"], r["_class"] or "DataException")
                   for r in rows]
        send_to_dlq(cfg.bootstrap_servers, cfg.dlq_topic, cfg.name, records,
                    cfg.dlq_context_headers)

    def _write_error_table(self, bad, ref: TableRef, user_metadata: str) -> int:
        """Append the bad records to `<TABLE>_ERRORS`, with the same channel offsets as
        the table's commit, so a replayed batch adds none twice. Returns how many."""
        errors_ref = self.warehouse.table(ref.database, ref.schema, ref.name + ERROR_TABLE_SUFFIX)
        state = self._state(errors_ref)
        if self._schema(state) is None:
            tables.create_table(self.spark, errors_ref,
                                [Column(n, t) for n, t in ERROR_TABLE_COLUMNS], evolution=False)
            state.schema = None
        if state.batch_metadata != user_metadata:  # the batch's first write to this table
            state.batch_metadata, state.batch_base = user_metadata, dict(state.offsets)
        if state.batch_base:
            seen = " OR ".join(f"(topic = {sql_string(t)} AND partition = {p} AND offset <= {o})"
                               for (t, p), o in state.batch_base.items())
            bad = bad.where(f"NOT ({seen})")
        rows = bad.selectExpr(
            "topic AS RECORD_TOPIC", "partition AS RECORD_PARTITION", "offset AS RECORD_OFFSET",
            "timestamp AS RECORD_TIMESTAMP", "_raw_key AS RECORD_KEY", "_raw_value AS RECORD_VALUE",
            "headers AS RECORD_HEADERS", "_stage_text AS STAGE", "_error_text AS ERROR",
            "coalesce(_class, 'DataException') AS ERROR_CLASS",
            f"{sql_string(self.config.name)} AS CONNECTOR", "current_timestamp() AS FAILED_AT",
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            count = rows.count()
            if count:
                rows.write.format("delta").mode("append").option("userMetadata", user_metadata) \
                    .save(errors_ref.path)
                state.offsets = parse_commit_metadata(user_metadata, self.config.name) or {}
            return count
        finally:
            rows.unpersist()

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
                columns = [Column(METADATA_COLUMN, "variant"), Column(shaping.CONTENT_COLUMN, "variant")]
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
            keys, _vtype = shaping.field_for(column, fields)
            missing = table_rows.where(f"NOT ({present_sql(keys)})" if keys else "true")
            if missing.limit(1).count():
                tables.drop_not_null(self.spark, ref, column.name)
                changed = True
        return self._schema(state, refresh=True) if changed else schema

    def _record_fields(self, table_rows, channels: dict) -> dict[str, tuple[list[str], str]]:
        """Column name -> (the JSON keys that map to it, their merged variant type). The
        batch's stats pass already merged each channel's keys; only when the table's
        channels disagree are they merged again over the table's rows."""
        schemas = set().union(*(c["keys"] for c in channels.values())) - {None}
        if len(schemas) <= 1:
            merged = next(iter(schemas), "")
        else:
            valid = "v IS NOT NULL" + (" AND _error IS NULL" if "_error" in table_rows.columns else "")
            result = table_rows.where(valid).selectExpr(
                "schema_of_variant_agg(v) AS s").first()
            merged = result["s"] if result and result["s"] else ""
        return shaping.fields_of(merged)

    def _learn_from_sample(self, state: _TableState, df) -> bool:
        """Before a table's first batch: create or evolve the table from the keys of
        the batch's first records, so the whole batch can try one pass (a record with
        other keys sends it to the general path). True when the sample was usable."""
        sample = df.limit(ONE_PASS_SAMPLE).selectExpr(
            f"{PARSE_VALUE_SQL} AS v").where("v IS NOT NULL").persist()
        try:
            merged = sample.selectExpr("schema_of_variant_agg(v) AS s").first()["s"] or ""
            fields = shaping.fields_of(merged)
            if not fields or "" in fields:
                return False
            self._prepare_table(state, sample, fields)
            state.known_keys = frozenset(k for keys, _t in fields.values() for k in keys)
            return True
        finally:
            sample.unpersist()


    # ---- end of batch ----------------------------------------------------------------

    def _finish(self, report: BatchReport, started: float, next_offsets: dict,
                mids: list[tuple[int, int]], ts_min: int | None) -> BatchReport:
        """Advance the consumer group, measure lag and latency, print the progress line.
        `mids` holds (median CreateTime, records) per channel or per batch."""
        if next_offsets and report.records_read:
            self.positions.update(next_offsets)
            try:
                self.cluster.commit_group_offsets(self.group, next_offsets)
            except Exception as exc:  # lag reporting only; the table holds the truth
                log.warning("could not advance consumer group %s: %s", self.group, exc)
            committed_ms = int(time.time() * 1000)
            # p50 over the batch: the record-weighted median of the channels' medians.
            half, running = report.records_read / 2, 0
            for mid, records in sorted(mids):
                running += records
                if running >= half:
                    report.latency_p50_ms = committed_ms - mid
                    break
            report.latency_max_ms = committed_ms - ts_min
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


def _merge_channel(channels: dict, tp: tuple[str, int], group) -> None:
    """Add one (topic, partition, routed topic) group's statistics to the channel's."""
    old = channels.get(tp)
    new = {k: group[k] for k in ("first", "last", "records", "bad", "tombstones", "filtered",
                                 "ts_min", "ts_mid")}
    new["keys"] = {group["keys"]}
    if old is None:
        channels[tp] = new
        return
    for k in ("records", "bad", "tombstones", "filtered"):
        old[k] += new[k]
    old["first"], old["last"] = min(old["first"], new["first"]), max(old["last"], new["last"])
    old["ts_min"] = min(old["ts_min"], new["ts_min"])
    old["keys"] |= new["keys"]


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
