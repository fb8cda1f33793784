"""The rows of one table's share of a batch that land in the table: without replays
(rows the table holds), rows a Filter dropped, ignored tombstones and bad records
(routed by the bad-record router). Shared by the table sink and the SNOWPIPE sink."""

from __future__ import annotations

from dataclasses import dataclass

from floeline.ingest.bad_records import BadRecords
from floeline.ingest.sink import TableBatch
from floeline.sources.base import Committed
from floeline.warehouse.positions import committed_filter_sql


@dataclass
class Landing:
    rows: object  # the rows that land (a Spark DataFrame)
    expected: int  # how many there are
    replayed: dict[str, str]  # channel -> the position the table held (replayed channels)
    after: Committed  # the table's positions once the batch commits


def landing(batch: TableBatch, null_values: str, bad: BadRecords) -> Landing:
    """What of `batch` lands (see the module doc); `null_values`: behavior.on.null.values."""
    state, channels, report = batch.state, batch.channels, batch.report
    table_rows = batch.rows
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
    if null_values == "IGNORE" and any(c.tombstones for c in channels.values()):
        tombstones = (table_rows.where("_tombstone").count() if replayed
                      else sum(c.tombstones for c in channels.values()))
        report.skipped += tombstones
        expected -= tombstones
        table_rows = table_rows.where("NOT _tombstone")
    after = state.after({ch: c.last for ch, c in channels.items()}, batch.finished)
    if any(c.bad for c in channels.values()):
        table_rows, rejected = bad.divert(table_rows, "_error", "_stage", state.ref, report, after)
        expected -= rejected
    return Landing(table_rows, expected, replayed, after)
