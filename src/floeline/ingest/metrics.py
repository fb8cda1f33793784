"""A connector's Prometheus metrics: their names, and what each batch adds to them.

Names follow Prometheus' conventions: `floeline_` first, the unit in the name
(`_seconds`, `_records`), `_total` on counters. Every series has a `connector` label;
per-channel series add `channel` (`orders/0`: a Kafka topic partition, or a Kinesis
shard), per-table ones `table` (DB.SCHEMA.TABLE).

Positions are gauges holding the position as a number: exact for Kafka offsets; a
Kinesis sequence number (up to 128 bits) keeps only a float's 53 bits, so compare
Kinesis positions with `floeline status`, which prints them whole.

The metrics live in prometheus-client's default registry (with its process_* and
python_* series), whether or not floeline.metrics.port serves them: counting costs
next to nothing. The `_created` series are turned off."""

from __future__ import annotations

import threading
import time

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

from floeline.sources.base import Committed, Head, Lag, total_lag

prometheus_client.disable_created_metrics()

_CHANNEL = ("connector", "channel")
_TABLE = ("connector", "table")

PROCESSED_POSITION = Gauge(
    "floeline_channel_processed_position",
    "Position of the last record of the micro-batch being processed or last processed", _CHANNEL)
COMMITTED_POSITION = Gauge(
    "floeline_channel_committed_position",
    "Position of the last record committed to the channel's table (Snowflake's offset token)",
    _CHANNEL)
LATEST_POSITION = Gauge(
    "floeline_channel_latest_position",
    "Position of the newest record in the source (Kafka: log end offset - 1)", _CHANNEL)
LAG_RECORDS = Gauge(
    "floeline_channel_lag_records",
    "Records in the source after the committed position (Kafka: log end offset - committed - 1)",
    _CHANNEL)
RECORDS_READ = Counter("floeline_records_read", "Records read from the source", ("connector",))
ROWS_WRITTEN = Counter("floeline_table_rows_written", "Rows committed to the table", _TABLE)
ROW_ERRORS = Counter(
    "floeline_table_row_errors",
    "Records that could not go to the table (Snowflake's rowsErrorCount)", _TABLE)
DEAD_LETTERS = Counter(
    "floeline_table_dead_letter_records",
    "Records sent to a dead-letter queue (destination dlq) or the error table (error_table)",
    _TABLE + ("destination",))
BATCH_DURATION = Histogram(
    "floeline_batch_duration_seconds", "Time a micro-batch took, from its start to its commits",
    ("connector",), buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
LATENCY = Histogram(
    "floeline_end_to_end_latency_seconds",
    "Per committed micro-batch: from its median record's source timestamp to the commit",
    ("connector",), buckets=(0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600))
LAST_COMMIT = Gauge(
    "floeline_last_commit_timestamp_seconds",
    "When the last micro-batch committed (Unix time)", ("connector",))
QUERY_ACTIVE = Gauge(
    "floeline_query_active", "1 while the connector's streaming query runs", ("connector",))
SOURCE_READ_ERRORS = Counter(
    "floeline_source_read_errors",
    "Failed reads of the source: the query failing in its source, head (latest offset) lookups",
    ("connector",))
SOURCE_COMMIT_ERRORS = Counter(
    "floeline_source_commit_errors",
    "Failed mirrors of committed positions to the source (consumer group, Kinesis lease table)",
    ("connector",))
TABLE_COMMIT_ERRORS = Counter(
    "floeline_table_commit_errors", "Failed Delta commits to the table", _TABLE)


# Every family with its label names: what forget_connector clears.
_FAMILIES = (
    (PROCESSED_POSITION, _CHANNEL), (COMMITTED_POSITION, _CHANNEL), (LATEST_POSITION, _CHANNEL),
    (LAG_RECORDS, _CHANNEL), (RECORDS_READ, ("connector",)), (ROWS_WRITTEN, _TABLE),
    (ROW_ERRORS, _TABLE), (DEAD_LETTERS, _TABLE + ("destination",)),
    (BATCH_DURATION, ("connector",)), (LATENCY, ("connector",)), (LAST_COMMIT, ("connector",)),
    (QUERY_ACTIVE, ("connector",)), (SOURCE_READ_ERRORS, ("connector",)),
    (SOURCE_COMMIT_ERRORS, ("connector",)), (TABLE_COMMIT_ERRORS, _TABLE),
)


def forget_connector(connector: str) -> None:
    """Remove every series labelled with `connector` (a worker deleted it), so /metrics
    stops showing a connector that no longer exists."""
    for family, label_names in _FAMILIES:
        labelled = {tuple(sample.labels[n] for n in label_names)
                    for metric in family.collect() for sample in metric.samples
                    if sample.labels.get("connector") == connector}
        for labels in labelled:
            try:
                family.remove(*labels)
            except KeyError:  # removed meanwhile by another deletion
                pass


def position_value(position: str) -> float:
    """A position (a digit string) as a gauge's value."""
    return float(int(position))


class ConnectorMetrics:
    """One connector's series. Thread-safe where the HTTP thread meets the batches:
    the heads (latest positions and lag) are refreshed by both."""

    def __init__(self, connector: str, database: str, schema: str):
        self.connector = connector
        self._table_prefix = f"{database}.{schema}."
        self._lock = threading.Lock()
        self._heads: dict[str, Head] = {}
        self.heads_at = 0.0  # time.monotonic() of the last refresh; 0: never
        RECORDS_READ.labels(connector)  # (series at 0 from the start, not from the first event)
        SOURCE_READ_ERRORS.labels(connector)
        SOURCE_COMMIT_ERRORS.labels(connector)
        QUERY_ACTIVE.labels(connector).set(0)

    def table(self, name: str) -> str:
        """A table's label, DB.SCHEMA.TABLE (batch reports name tables unqualified)."""
        return name if "." in name else self._table_prefix + name

    def started(self, committed: Committed) -> None:
        """The positions the tables hold when the query starts."""
        for channel, position in committed.positions.items():
            COMMITTED_POSITION.labels(self.connector, channel).set(position_value(position))

    def processing(self, positions: dict[str, str]) -> None:
        """A micro-batch started that ends at these positions."""
        for channel, position in positions.items():
            PROCESSED_POSITION.labels(self.connector, channel).set(position_value(position))

    def committed(self, report, positions: dict[str, str]) -> None:
        """A micro-batch committed: `report` is its BatchReport, `positions` the last
        position per channel it read."""
        c = self.connector
        for channel, position in positions.items():
            PROCESSED_POSITION.labels(c, channel).set(position_value(position))
            COMMITTED_POSITION.labels(c, channel).set(position_value(position))
        RECORDS_READ.labels(c).inc(report.records_read)
        for table, rows in report.rows_written.items():
            ROWS_WRITTEN.labels(c, self.table(table)).inc(rows)
        for table, errors in report.errors_by_table.items():
            ROW_ERRORS.labels(c, self.table(table)).inc(errors)
        BATCH_DURATION.labels(c).observe(report.duration_s)
        if report.latency_p50_ms is not None:
            LATENCY.labels(c).observe(max(0, report.latency_p50_ms) / 1000)
        LAST_COMMIT.labels(c).set(time.time())

    def dead_letters(self, table: str, destination: str, records: int) -> None:
        DEAD_LETTERS.labels(self.connector, self.table(table), destination).inc(records)

    def table_commit_error(self, table: str) -> None:
        TABLE_COMMIT_ERRORS.labels(self.connector, self.table(table)).inc()

    def source_read_error(self) -> None:
        SOURCE_READ_ERRORS.labels(self.connector).inc()

    def source_commit_error(self) -> None:
        SOURCE_COMMIT_ERRORS.labels(self.connector).inc()

    def query_active(self, active: bool) -> None:
        QUERY_ACTIVE.labels(self.connector).set(1 if active else 0)

    def set_heads(self, heads: dict[str, Head]) -> None:
        """The source's heads, as just asked: latest positions and lag per channel."""
        with self._lock:
            self._heads = dict(heads)
            self.heads_at = time.monotonic()
            for channel, head in heads.items():
                if head.latest is not None:
                    LATEST_POSITION.labels(self.connector, channel).set(position_value(head.latest))
                if head.lag is not None and head.lag.unit == "":
                    LAG_RECORDS.labels(self.connector, channel).set(head.lag.value)

    def lag(self) -> Lag | None:
        """The lag of the last heads asked for, added up over channels."""
        with self._lock:
            return total_lag(self._heads)
