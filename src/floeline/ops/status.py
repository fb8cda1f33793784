"""`floeline status CONFIG`: per table and channel, what the table holds (committed
position, last commit time), the source's head and the lag, and error counts. No
Spark: the positions come from the tables' Delta logs (warehouse/delta_log.py), the
heads from the source itself (Kafka: the partitions' log end offsets). It reads what
a running connector has committed, so it works while one runs and after it stopped.

Positions are shown as floeline keeps them: the last committed record's position
(Snowflake's offset token; one less than the consumer group's offset). Lag is in
records for Kafka. Kinesis does not tell a shard's newest sequence number, so for
Kinesis the latest position is not shown and the lag is time: how long the oldest
record not yet committed has been in the stream (ms; 0 when none is waiting), from one
GetRecords of one record after the committed position; a finished (closed and fully
read) shard says so.

Error counts: the rows of the table's error table `<TABLE>_ERRORS` (bad records when
there is no dead-letter queue), and the records in the dead-letter topic when one is
set (all of them: the topic is not split by table).

A connector a `floeline worker` runs (its config in the warehouse's worker store) also
shows that worker's REST URL, from the worker lease it renews (worker/store.py);
`floeline status --worker worker.properties` shows the worker alone: the active one's
URL, host and pid, and every stored connector's target state."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from floeline.errors import FloelineError
from floeline.records.decode import transform_chain_for
from floeline.sources import source_for
from floeline.sources.base import Head, Lag, position_key, total_lag
from floeline.sources.routes import table_for_route
from floeline.warehouse import delta_log, owners
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.positions import committed_in_log
from floeline.worker.store import ConnectorStore, WorkerLease


@dataclass
class ChannelStatus:
    channel: str
    committed: str | None  # the last committed record's position; None: nothing committed
    latest: str | None  # the source's newest record's position; None: unknown or empty
    lag: int | None  # behind the source's head, in `lag_unit`; None: unknown
    lag_unit: str = "records"
    finished: bool = False  # a closed Kinesis shard read to its end


@dataclass
class TableStatus:
    table: str  # DB.SCHEMA.TABLE
    exists: bool
    rows: int | None = None
    last_commit: str | None = None  # this connector's last commit to the table (UTC, ISO 8601)
    version: int | None = None  # that commit's Delta version
    error_table: str | None = None  # <TABLE>_ERRORS when it exists
    error_rows: int | None = None
    lag: int | None = None  # the channels' lags: records added up, or the largest time (ms)
    lag_unit: str = "records"
    channels: list[ChannelStatus] = field(default_factory=list)
    # S3 warehouses: who owns the table (warehouse/owners.py), e.g. "orders@node-3:4242";
    # None for a local warehouse or a table no connector holds.
    owner: str | None = None


@dataclass
class ConnectorStatus:
    connector: str
    source: str
    tables: list[TableStatus] = field(default_factory=list)
    dead_letter_topic: str | None = None
    dead_letter_records: int | None = None
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    # A connector a floeline worker runs: that worker, as WorkerStatus.describe says it.
    worker: str | None = None


@dataclass
class WorkerStatus:
    """The warehouse's worker, from its lease (None fields: no worker holds it)."""

    warehouse: str
    rest_url: str | None = None
    host: str | None = None
    pid: int | None = None
    renewed_s_ago: float | None = None
    active: bool = False  # renewed within its timeout
    connectors: dict[str, str] = field(default_factory=dict)  # name -> target state

    def describe(self) -> str:
        if self.host is None:
            return "none (no worker holds the warehouse's lease)"
        where = f"host {self.host}, pid {self.pid}, lease renewed {self.renewed_s_ago:.1f} s ago"
        state = "active" if self.active else "not renewing its lease: gone or stalled; a standby takes over"
        return f"{self.rest_url or '(no REST URL recorded)'} ({state}; {where})"


def worker_status(warehouse: Warehouse, with_connectors: bool = True) -> WorkerStatus:
    """Who holds the warehouse's worker lease, and (with_connectors) the stored
    connectors' target states."""
    status = WorkerStatus(warehouse.location)
    holder = WorkerLease(warehouse.storage, warehouse.location).holder()
    if holder is not None:
        now = int(time.time() * 1000)
        status.rest_url, status.host, status.pid = holder.listener, holder.host, holder.pid
        status.renewed_s_ago = max(0, now - holder.heartbeat_ms) / 1000
        status.active = not holder.stale(now)
    if with_connectors:
        stored = ConnectorStore(warehouse.storage, warehouse.location).load_all()
        status.connectors = {s.name: s.target_state for s in stored}
    return status


def _run_by_worker(warehouse: Warehouse, name: str) -> str | None:
    """The worker running connector `name`, described; None when no worker stores it."""
    if ConnectorStore(warehouse.storage, warehouse.location).load(name) is None:
        return None
    return worker_status(warehouse, with_connectors=False).describe()


def connector_status(config) -> ConnectorStatus:
    """The connector's status, read from its tables and its source."""
    status = ConnectorStatus(config.name, config.source)
    source = source_for(config)
    warehouse = Warehouse(config.warehouse, config.warehouse_s3)
    files = warehouse.storage
    chain = transform_chain_for(config.decoding.transforms)
    try:
        channels = source.channels()
        routes = {c.route for c in channels}
    except FloelineError as exc:
        status.notes.append(f"cannot list the source's channels: {exc}")
        channels = []
        routes = set(config.topics) or set(config.kinesis.streams if config.kinesis else ())
    listed: dict[str, list[str]] = {}  # table -> its channels the source lists
    refs: dict[str, TableRef] = {}
    for route in sorted(routes):
        ref = warehouse.table(config.database, config.schema,
                              table_for_route(route, chain, source.table_name))
        refs[ref.full_name] = ref
        listed.setdefault(ref.full_name, []).extend(c.id for c in channels if c.route == route)
    try:
        status.worker = _run_by_worker(warehouse, config.name)
    except FloelineError as exc:
        status.notes.append(f"cannot read the warehouse's worker records: {exc}")
    held = {name: committed_in_log(ref.path, config.name, files) for name, ref in refs.items()}
    positions: dict[str, str] = {}
    for committed, _commit in held.values():
        positions.update(committed.positions)
    heads: dict[str, Head] = {}
    try:
        heads = source.heads(positions)
    except Exception as exc:  # noqa: BLE001 - the tables' side is still worth showing
        status.notes.append(f"cannot read the source's latest positions: {exc}")
    if config.source == "kinesis":
        status.notes.append("Kinesis does not tell a shard's newest sequence number: latest is not "
                            "shown; lag is how long the oldest record not yet committed has waited")
    for name, ref in refs.items():
        committed, commit = held[name]
        table = TableStatus(name, delta_log.is_table(ref.path, files))
        if table.exists:
            table.rows = delta_log.row_count(ref.path, files)
        if commit is not None:
            table.version = commit.version
            table.last_commit = _utc(commit.timestamp_ms)
        table.owner = _owner(warehouse, ref)
        errors = warehouse.error_table(ref)
        if delta_log.is_table(errors.path, files):
            table.error_table, table.error_rows = errors.full_name, delta_log.row_count(errors.path, files)
        ids = sorted(set(listed[name]) | set(committed.positions) | committed.finished,
                     key=_channel_order)
        for channel in ids:
            head = heads.get(channel) or Head(None, None)
            lag = head.lag
            table.channels.append(ChannelStatus(
                channel, committed.positions.get(channel), head.latest,
                None if lag is None else lag.value, "records" if lag is None else lag.unit or "records",
                channel in committed.finished))
        lag = total_lag({c.channel: Head(None, None if c.lag is None else Lag(
            c.lag, "" if c.lag_unit == "records" else c.lag_unit)) for c in table.channels})
        if lag is not None:
            table.lag, table.lag_unit = lag.value, lag.unit or "records"
        status.tables.append(table)
    if config.dlq_topic:
        status.dead_letter_topic = config.dlq_topic
        try:
            status.dead_letter_records = _topic_records(source, config.dlq_topic)
        except Exception as exc:  # noqa: BLE001
            status.notes.append(f"cannot count the dead-letter topic's records: {exc}")
    return status


def _topic_records(source, topic: str) -> int:
    """Records a topic holds now (its partitions' log end less log start offsets)."""
    cluster = source.cluster
    counts = cluster.partitions((topic,))
    tps = [(topic, p) for p in range(counts.get(topic, 0))]
    latest, earliest = cluster.latest(tps), cluster.earliest(tps)
    return sum(latest[tp] - earliest.get(tp, 0) for tp in tps)


def _channel_order(channel: str):
    route, _, rest = channel.rpartition("/")
    return (route, position_key(rest) if rest.isdigit() else (0, rest))


def _utc(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


# ---- output -------------------------------------------------------------------------


def _owner(warehouse: Warehouse, ref: TableRef) -> str | None:
    """The table's owner record as `connector@host:pid` (" (stale)" when not renewed in
    time), for warehouses that keep one (S3)."""
    if not owners.needed(warehouse):
        return None
    text = warehouse.storage.read_text(owners.record_location(warehouse, ref))
    if text is None:
        return None
    try:
        owner = owners.Owner.from_json(text)
    except (ValueError, TypeError):
        return "(unreadable owner record)"
    stale = " (stale)" if owner.stale(int(time.time() * 1000)) else ""
    return f"{owner.connector}@{owner.host}:{owner.pid}{stale}"


def format_json(status: ConnectorStatus) -> str:
    return json.dumps(asdict(status), indent=2)


def format_text(status: ConnectorStatus) -> str:
    lines = [f"connector {status.connector} ({status.source})"]
    if status.worker:
        lines.append(f"worker: {status.worker}")
    for table in status.tables:
        if not table.exists:
            lines.append(f"{table.table}: no table yet")
        else:
            errors = (f"error_rows={_show(table.error_rows)} ({table.error_table})"
                      if table.error_table else "error_rows=0")
            lines.append(f"{table.table}: rows={_show(table.rows)} last_commit={_show(table.last_commit)} "
                         f"version={_show(table.version)} {errors} lag={_lag(table.lag, table.lag_unit)}"
                         + (f" owner={table.owner}" if table.owner else ""))
        rows = [("CHANNEL", "COMMITTED", "LATEST", "LAG")]
        for c in table.channels:
            rows.append((c.channel, _show(c.committed), _show(c.latest),
                         "finished" if c.finished else _lag(c.lag, c.lag_unit)))
        if len(rows) > 1:
            widths = [max(len(r[i]) for r in rows) for i in range(3)]
            lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[3]
                      for r in rows]
    if status.dead_letter_topic:
        lines.append(f"dead-letter topic {status.dead_letter_topic}: "
                     f"records={_show(status.dead_letter_records)}")
    lines += [f"note: {n}" for n in status.notes]
    return "\n".join(lines)


def _lag(value: int | None, unit: str) -> str:
    return _show(value) + ("ms" if value is not None and unit == "ms" else "")


def _show(value) -> str:
    return "-" if value is None else str(value)


def format_worker_text(status: WorkerStatus) -> str:
    lines = [f"worker: {status.describe()}", f"warehouse: {status.warehouse}"]
    if status.connectors:
        width = max(len("CONNECTOR"), *(len(n) for n in status.connectors))
        lines.append(f"  {'CONNECTOR'.ljust(width)}  TARGET")
        lines += [f"  {name.ljust(width)}  {target}" for name, target in sorted(status.connectors.items())]
    else:
        lines.append("no connectors stored")
    return "\n".join(lines)


def format_worker_json(status: WorkerStatus) -> str:
    return json.dumps(asdict(status), indent=2)
