"""Bad records: what happens to a record that cannot go to its table.

With errors.tolerance=none the first one (in channel and position order) stops the
connector with a RecordError naming it, after going to the dead-letter queue when one
is set; nothing of the batch is committed. With `all` they go to the connector's
dead-letter queue (dead_letters.py: a DLQ topic or stream, or without one the error
table `<TABLE>_ERRORS`, error_table.py) before the table's commit, counted per table
and logged when errors.log.enable is set."""

from __future__ import annotations

import logging

from floeline.errors import RecordError
from floeline.ingest.dead_letters import DeadLetterQueue, bad_record, ordered, source_fields
from floeline.ingest.progress import BatchReport
from floeline.sources.base import Committed
from floeline.warehouse.catalog import TableRef

log = logging.getLogger("floeline")

_COORDS = ("channel", "position", "timestamp", "headers", "source")


class BadRecords:
    """Routes a batch's bad records per the connector's errors.* settings to its
    dead-letter queue."""

    def __init__(self, config, source, queue: DeadLetterQueue, metrics=None):
        self.config, self.source, self.queue = config, source, queue
        self.metrics = metrics  # the connector's metrics: records sent to a DLQ / error table
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
            self._stop_at_first(bad, ref)
            return frame.drop(error_column), 0
        count = self.queue.put(bad, ref, committed_after)
        self._count(ref, self.queue.destination, count)
        if count == 0:  # none, or all held already by the error table (a replayed batch)
            return frame.where(f"{error_column} IS NULL").drop(error_column), 0
        report.errors += count
        report.errors_by_table[ref.name] = report.errors_by_table.get(ref.name, 0) + count
        self.count_row_errors(ref, count)
        if cfg.errors_log_enable:
            self._log(bad)
        return frame.where(f"{error_column} IS NULL").drop(error_column), count

    def _stop_at_first(self, bad, ref: TableRef | None) -> None:
        """errors.tolerance=none: raise the RecordError of the first bad record (after
        handing it to a DLQ topic or stream); nothing when there is none."""
        first = ordered(bad).limit(1).collect()
        if not first:
            return
        row = first[0]
        self._count(ref, self.queue.destination, self.queue.put_stopping(bad_record(row)))
        where = f" (table {ref.full_name})" if ref is not None else ""
        raise RecordError(
            f"{row['_error_text']}{where}. Fix the producer, the transforms or the table, or "
            f"set errors.tolerance=all to route bad records to the dead-letter queue. Nothing "
            f"of this batch was committed, so a restart resumes at this record.",
            stage=row["_stage_text"], where=self.source.describe(source_fields(row)),
            channel=row["channel"], position=row["position"])

    def _log(self, bad) -> None:
        cfg = self.config
        for r in bad.select("source", "_stage_text", "_error_text").collect():
            detail = f": {r['_error_text']}" if cfg.errors_log_include_messages else ""
            log.error("bad record %s stage=%s%s", self.source.describe(source_fields(r)),
                      r["_stage_text"], detail)

    def count_row_errors(self, ref: TableRef, rows: int) -> None:
        """Rows of `ref` rejected (sent to the DLQ or error table, or in a staged file
        that failed to load)."""
        self.row_errors[ref.full_name] = self.row_errors.get(ref.full_name, 0) + rows

    def _count(self, ref: TableRef | None, destination: str, records: int) -> None:
        if self.metrics is not None and records:
            self.metrics.dead_letters(ref.full_name if ref is not None else "", destination, records)
