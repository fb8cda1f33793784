"""Bad records: what happens to a record that cannot go to its table.

With errors.tolerance=none the first one (in channel and position order) stops the
connector with a RecordError naming it, after going to the dead-letter queue when one
is set; nothing of the batch is committed. With `all` they go to the dead-letter queue
(dead_letters.py) or, without one, to the error table `<TABLE>_ERRORS` beside the
table; either way before the table's commit, counted per table and logged when
errors.log.enable is set.

The error table keeps the record as it came (channel, position, the source's own
coordinates as RECORD_SOURCE, key, value, headers, timestamp) and why it failed. Its
commits carry the same channel positions as the table's, so a replayed batch adds no
record twice."""

from __future__ import annotations

import logging

from pyspark import StorageLevel

from floeline.errors import RecordError
from floeline.ingest.dead_letters import BadRecord, DeadLetterQueue
from floeline.ingest.progress import BatchReport
from floeline.ingest.table_state import Tables
from floeline.records.content import sql_string
from floeline.sources.base import Committed, position_after_sql
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.commits import commit
from floeline.warehouse.positions import commit_metadata
from floeline.warehouse.tables import Column

log = logging.getLogger("floeline")

# The error table's layout: the record as it came from its source, and its failure.
ERROR_TABLE_COLUMNS = (
    ("RECORD_CHANNEL", "string"), ("RECORD_POSITION", "string"), ("RECORD_SOURCE", "variant"),
    ("RECORD_TIMESTAMP", "timestamp"), ("RECORD_KEY", "binary"), ("RECORD_VALUE", "binary"),
    ("RECORD_HEADERS", "array<struct<key:string,value:binary>>"),
    ("STAGE", "string"), ("ERROR", "string"), ("ERROR_CLASS", "string"),
    ("CONNECTOR", "string"), ("FAILED_AT", "timestamp"),
)
_COORDS = ("channel", "position", "timestamp", "headers", "source")


def ordered(frame):
    """Rows in channel and position order (positions compare as numbers)."""
    from pyspark.sql import functions as F

    return frame.orderBy("channel", F.length("position"), "position")


def committed_filter_sql(committed: Committed) -> str | None:
    """SQL: TRUE for rows a table holding `committed` does not hold yet (a map lookup
    per row, however many channels), or None when it holds nothing."""
    if not committed.positions:
        return None
    pairs = ", ".join(f"{sql_string(c)}, {sql_string(p)}" for c, p in sorted(committed.positions.items()))
    held = f"element_at(map({pairs}), channel)"
    return f"({held} IS NULL OR {position_after_sql('position', held)})"


class BadRecords:
    """Routes a batch's bad records per the connector's errors.* settings."""

    def __init__(self, config, spark, tables_: Tables, source, queue: DeadLetterQueue | None,
                 metrics=None):
        self.config, self.spark, self.tables, self.source, self.queue = (
            config, spark, tables_, source, queue)
        self.metrics = metrics  # ops/metrics.py ConnectorMetrics: records sent to a DLQ / error table
        self.row_errors: dict[str, int] = {}  # table -> rows rejected (rowsErrorCount)

    def divert(self, frame, error_column: str, stage_sql: str, ref: TableRef | None,
               report: BatchReport, committed_after: Committed | None, prefix: str = ""):
        """Handle the rows of `frame` whose `error_column` is set (see the module doc).
        `committed_after`: the table's positions once this batch commits. Returns the
        other rows (without `error_column`) and how many were diverted."""
        cfg = self.config
        bad = frame.where(f"{error_column} IS NOT NULL").selectExpr(
            *[f"{prefix}{c} AS {c}" for c in _COORDS],
            "_raw_key", "_raw_value", f"{error_column} AS _error_text", f"{stage_sql} AS _stage_text",
            f"{prefix}_error_class AS _class")
        if cfg.errors_tolerance == "none":
            first = ordered(bad).limit(1).collect()
            if not first:
                return frame.drop(error_column), 0
            row = first[0]
            if self.queue is not None:
                self.queue.send([self._bad_record(row)])
                self._count(ref, "dlq", 1)
            where = f" (table {ref.full_name})" if ref is not None else ""
            raise RecordError(
                f"{row['_error_text']}{where}. Fix the producer, the transforms or the table, or "
                f"set errors.tolerance=all to route bad records to the dead-letter queue. Nothing "
                f"of this batch was committed, so a restart resumes at this record.",
                stage=row["_stage_text"], where=self.source.describe(_fields(row)),
                channel=row["channel"], position=row["position"])
        if self.queue is not None:
            records = ordered(bad).collect()
            self.queue.send([self._bad_record(r) for r in records])
            count = len(records)
            self._count(ref, "dlq", count)
        else:
            count = self._write_error_table(bad, ref, committed_after)
            self._count(ref, "error_table", count)
        if count == 0:  # none, or all held already by the error table (a replayed batch)
            return frame.where(f"{error_column} IS NULL").drop(error_column), 0
        report.errors += count
        report.errors_by_table[ref.name] = report.errors_by_table.get(ref.name, 0) + count
        self.count_row_errors(ref, count)
        if cfg.errors_log_enable:
            for r in bad.select("source", "_stage_text", "_error_text").collect():
                detail = f": {r['_error_text']}" if cfg.errors_log_include_messages else ""
                log.error("bad record %s stage=%s%s", self.source.describe(_fields(r)),
                          r["_stage_text"], detail)
        return frame.where(f"{error_column} IS NULL").drop(error_column), count

    def count_row_errors(self, ref: TableRef, rows: int) -> None:
        """Rows of `ref` rejected elsewhere (a staged file that failed to load)."""
        self.row_errors[ref.full_name] = self.row_errors.get(ref.full_name, 0) + rows

    def _count(self, ref: TableRef | None, destination: str, records: int) -> None:
        if self.metrics is not None and records:
            self.metrics.dead_letters(ref.full_name if ref is not None else "", destination, records)

    @staticmethod
    def _bad_record(row) -> BadRecord:
        stamp = int(row["timestamp"].timestamp() * 1000) if row["timestamp"] else None
        return BadRecord(row["channel"], row["position"], _fields(row), stamp,
                         row["_raw_key"], row["_raw_value"],
                         [(h["key"], h["value"]) for h in (row["headers"] or [])],
                         row["_stage_text"], row["_error_text"], row["_class"] or "DataException")

    def _write_error_table(self, bad, ref: TableRef, committed_after: Committed) -> int:
        """Append the bad records to `<TABLE>_ERRORS`, with the same channel positions as
        the table's commit, so a replayed batch adds none twice. Returns how many."""
        errors_ref = self.tables.warehouse.error_table(ref)
        state = self.tables.state(errors_ref)
        schema = self.tables.schema(state)
        if schema is None:
            tables.create_table(self.spark, errors_ref,
                                [Column(n, t) for n, t in ERROR_TABLE_COLUMNS], evolution=False)
            state.forget_schema()
        else:
            missing = [Column(n, t) for n, t in ERROR_TABLE_COLUMNS if schema.find(n) is None]
            if missing:  # an error table from an older floeline: add the new columns
                tables.add_columns(self.spark, errors_ref, missing)
                state.forget_schema()
        not_held = committed_filter_sql(state.replay_base(
            commit_metadata(self.config.name, committed_after)))
        if not_held:
            bad = bad.where(not_held)
        rows = bad.selectExpr(
            "channel AS RECORD_CHANNEL", "position AS RECORD_POSITION",
            "to_variant_object(source) AS RECORD_SOURCE",
            "timestamp AS RECORD_TIMESTAMP", "_raw_key AS RECORD_KEY", "_raw_value AS RECORD_VALUE",
            "headers AS RECORD_HEADERS", "_stage_text AS STAGE", "_error_text AS ERROR",
            "coalesce(_class, 'DataException') AS ERROR_CLASS",
            f"{sql_string(self.config.name)} AS CONNECTOR", "current_timestamp() AS FAILED_AT",
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            count = rows.count()
            if count:
                commit(rows, errors_ref, self.config.name, committed_after, self.tables.check_owned)
                state.committed_through(committed_after)
            return count
        finally:
            rows.unpersist()


def _fields(row) -> dict:
    source = row["source"]
    return source.asDict() if source is not None else {}
