"""One table's Snowpipe Streaming channels: the rows applications append to them,
buffered in the worker's memory until a batch is due (buffer.flush.time,
buffer.count.records, buffer.size.bytes, as a connector's), then committed by the
same micro-batch code as a connector's (connector.py's process_batch: the one-pass or
general path, the table's pipe, schema evolution, the error table, and the channels'
positions in the same Delta commit as the rows).

As in Snowpipe Streaming, an append is accepted into the buffer, not committed: after a
crash the rows not committed are gone, and the application reopens the channel, reads
its latest committed offset token and sends again from the row after it. Rules that
make that exact (sources/channels.py has how tokens become positions):

- each open gives the channel a new continuation token; an append must carry the
  latest, so a client that did not reopen after a crash or after another client took
  the channel over is refused (StaleContinuation) instead of appending out of order;
- an append's offset token must be after the channel's last one (the committed one
  right after an open); the same token as the last append again is a retry whose
  answer was lost, and its rows are dropped (a duplicate); an earlier one is refused;
- an open waits for the batch in flight, so the committed token it answers is final:
  nothing taken before the open commits after it;
- a batch takes every row buffered for the table, whole appends only, so a committed
  position is always the last row of an append; a failed batch puts its rows back
  (a transient failure, retried with the connector's backoff and bound) or marks its
  channels as needing a reopen (a terminal one, or the bound spent: the error is in
  their status).

Rows that do not fit the table are row errors (errors.tolerance=all): they go to the
table's error table, and each channel's status counts them and keeps the last one's
message."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

import orjson

from floeline import retry, startup, waits
from floeline.errors import FloelineError, first_lines
from floeline.ingest.connector import Connector
from floeline.records.content import sql_string
from floeline.sources.base import Channel, position_after_sql
from floeline.ingest.read_tasks import read_task_limit
from floeline.sources.channels import MAX_ROWS_PER_APPEND, TOKEN_SHIFT, ChannelSource, row_position, token_of
from floeline.config import locations
from floeline.warehouse import checkpoints

log = logging.getLogger("floeline")


class ChannelError(FloelineError):
    """An append or a status the channel refuses; `code` is Snowflake's status code name."""

    code = "ERR_CHANNEL_INVALID"


class ChannelNotOpen(ChannelError):
    code = "ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED"


class StaleContinuation(ChannelError):
    code = "ERR_STALE_CONTINUATION_TOKEN_SEQUENCER"


class TokenBackwards(ChannelError):
    code = "ERR_OFFSET_TOKEN_OUT_OF_ORDER"


class MustReopen(ChannelError):
    code = "ERR_CHANNEL_MUST_BE_REOPENED"


class BadRows(ChannelError):
    code = "ERR_INVALID_ROWS"


class BufferFull(ChannelError):
    """Transient: the table's buffer holds as much as it may; try again shortly."""

    code = "ERR_TOO_MANY_REQUESTS"


@dataclass
class Append:
    token: int
    body: bytes  # its rows, one JSON object a line, joined by b"\n" (no blank lines)
    rows: int
    size: int  # the request body's bytes
    received: float  # epoch seconds


@dataclass
class ChannelState:
    """One open channel."""

    name: str
    continuation: str
    committed: str | None  # the position the table holds (None: nothing)
    taken: str | None  # the last position handed to a batch that committed (or `committed`)
    last_token: int | None  # the last appended (or, right after an open, committed) token
    pending: deque = field(default_factory=deque)
    rows_parsed: int = 0
    rows_inserted: int = 0
    rows_error: int = 0
    last_error_message: str | None = None
    last_error_token: str | None = None
    last_error_at: float | None = None
    invalid: str | None = None  # why it must be reopened
    opened_at: float = field(default_factory=time.time)
    last_commit_latency_ms: int | None = None


def ndjson_batch(body: bytes) -> tuple[bytes, int]:
    """An NDJSON body's rows joined by b"\\n" (each line stripped, blank lines dropped,
    so that a batch splits them in Spark by position) and how many there are, or
    BadRows naming the first line that is not a JSON object and the fix."""
    lines = [line.strip() for line in body.split(b"\n")]
    rows = [line for line in lines if line]
    if not rows:
        raise BadRows("the append has no rows: send one JSON object per line (NDJSON)")
    if len(rows) >= MAX_ROWS_PER_APPEND:
        raise BadRows(f"the append has {len(rows)} rows; send at most {MAX_ROWS_PER_APPEND - 1} per append")
    for number, line in enumerate(lines, 1):
        if line:
            _check_row(number, line)
    return b"\n".join(rows), len(rows)


def _check_row(number: int, line: bytes) -> None:
    """BadRows unless `line` is a JSON object. orjson answers most rows (4.5x faster
    than json); what it refuses or does not take as an object, json decides and words
    the error (orjson is stricter: NaN, integers past 64 bits, lone surrogates)."""
    try:
        if isinstance(orjson.loads(line), dict):
            return
    except ValueError:
        pass
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:
        reason = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise BadRows(f"line {number} of the body is not JSON ({reason}): {bytes(line[:80])!r}; send one "
                      f"JSON object per line (NDJSON), each a row of column names and values. "
                      f"Nothing of this append was taken: fix the line and send the whole batch again "
                      f"with the same offset token") from None
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number")
        raise BadRows(f"line {number} of the body is {kind}, not a JSON object: a row is an object of "
                      f"column names and values. Nothing of this append was taken: fix the line and "
                      f"send the whole batch again with the same offset token")


# A batch's appends (one row each) as ChannelSource's rows: each body split into its
# lines, each line's position its append's offset token and its index (row_position).
_APPEND_LINES = ("channel", "token", "received", "route", "posexplode(split(CAST(body AS STRING), '\\n')) AS (i, line)")
_ROWS_OF_APPENDS = (
    "channel",
    "CASE WHEN token = '0' THEN CAST(i AS STRING) "
    f"ELSE concat(token, lpad(CAST(i AS STRING), {len(str(TOKEN_SHIFT)) - 1}, '0')) END AS position",
    "route", "CAST(NULL AS BINARY) AS key", "CAST(line AS BINARY) AS value",
    "timestamp_micros(received) AS timestamp",
)


# A slice's bodies are one Arrow record batch, whose binary column holds at most 2 GB:
# a buffer of hundreds of channels is cut into more slices rather than overflow it.
MAX_SLICE_BYTES = 512 * 1024 * 1024


def appends_in_slices(appends: list[tuple[str, Append]], slice_bytes: float) -> list[list[tuple[str, Append]]]:
    """`appends` in order, cut into slices of about `slice_bytes` (a slice ends at the
    first append that takes it to `slice_bytes` or more)."""
    slices: list[list[tuple[str, Append]]] = []
    size = 0
    for name, append in appends:
        if not slices or size >= slice_bytes:
            slices.append([])
            size = 0
        slices[-1].append((name, append))
        size += append.size
    return slices


def rows_of_appends(spark, route: str, appends: list[tuple[str, Append]]):
    """(channel, append) pairs as a DataFrame of ChannelSource's rows. The driver hands
    Spark one row per append (its body whole), in as many slices as a batch has read
    tasks, and Spark splits the bodies into rows: no per-row work in Python."""
    import pyarrow as pa

    total = sum(append.size for _, append in appends)
    slices = appends_in_slices(appends, min(total / read_task_limit(spark), MAX_SLICE_BYTES))
    schema = pa.schema([("channel", pa.string()), ("token", pa.string()), ("received", pa.int64()),
                        ("route", pa.string()), ("body", pa.binary())])
    batches = [pa.record_batch([
        pa.array([name for name, _ in part], pa.string()),
        pa.array([str(append.token) for _, append in part], pa.string()),
        pa.array([int(append.received * 1_000_000) for _, append in part], pa.int64()),
        pa.array([route] * len(part), pa.string()),
        pa.array([append.body for _, append in part], pa.binary()),
    ], schema=schema) for part in slices]
    df = spark.createDataFrame(pa.Table.from_batches(batches, schema))
    return df.selectExpr(*_APPEND_LINES).selectExpr(*_ROWS_OF_APPENDS)


class TableChannels:
    """The channels of one table (see the module doc): their buffers, and the thread
    that commits them batch by batch through `connector` (a Connector over a
    ChannelSource, whose own streaming query is never started)."""

    def __init__(self, config, spark, table: str, out=None, batch_slots=None,
                 max_buffer_bytes: int | None = None):
        self.config, self.spark, self.table = config, spark, table
        self.name = config.name
        self.source = ChannelSource(config, table)
        self.connector = Connector(config, spark, out=out, source=self.source,
                                   clock=startup.StartupClock(launched_at=time.time()))
        self.connector.routes = [table]
        self.ref = self.connector.pipeline.table_of_route(table)
        self.batch_slots = batch_slots
        self._max_buffer_bytes = max_buffer_bytes
        self._lock = threading.Condition()  # channel states and buffers
        self._batch = threading.Lock()  # held while a batch is built and committed
        self.channels: dict[str, ChannelState] = {}
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._oldest: float | None = None  # monotonic time of the oldest buffered append
        self._batch_id = 0
        self._failures = 0
        self._failing_since: float | None = None
        self._retry_at = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"floeline-channels-{table}", daemon=True)
        self._thread.start()

    # ---- the REST API's calls ------------------------------------------------------------

    def open(self, channel: str) -> ChannelState:
        """Open (or reopen) `channel`: a new continuation token; its committed position
        read from the table once the batch in flight (if any) is done; rows an earlier
        open buffered and did not commit are dropped, as Snowpipe Streaming drops them."""
        with self._batch:
            if self.table_failed():
                self.connector.pipeline.tables.commits_failed()
            committed = self.connector.pipeline.committed([Channel(channel, self.table)]).positions.get(channel)
            with self._lock:
                old = self.channels.get(channel)
                state = ChannelState(channel, uuid.uuid4().hex, committed, committed,
                                     None if committed is None else int(token_of(committed)))
                if old is not None:
                    self._forget_pending(old)
                    state.rows_parsed, state.rows_inserted = old.rows_parsed, old.rows_inserted
                    state.rows_error, state.last_error_message = old.rows_error, old.last_error_message
                    state.last_error_token, state.last_error_at = old.last_error_token, old.last_error_at
                self.channels[channel] = state
                self.source.open_channels.add(channel)
                return state

    def table_failed(self) -> bool:
        return self._failures > 0

    def append(self, channel: str, continuation: str | None, token: int, body: bytes, rows: int,
               size: int) -> tuple[ChannelState, bool]:
        """Buffer `rows` rows (`body`, as ndjson_batch gives them), the batch ending at
        offset token `token`; (the channel, whether the append repeated the last one and
        was dropped)."""
        with self._lock:
            state = self.state(channel)
            if state.invalid is not None:
                raise MustReopen(f"channel {channel} must be reopened: {state.invalid}")
            if continuation != state.continuation:
                raise StaleContinuation(
                    f"channel {channel} was opened again since this client's continuation token was "
                    f"given (by another client, or after the worker restarted): reopen the channel, read "
                    f"its last_committed_offset_token and send the rows after it")
            if state.last_token is not None and token <= state.last_token:
                if token == state.last_token:
                    return state, True  # the last batch again (its answer was lost, or committed): dropped
                committed = token_of(state.committed)
                raise TokenBackwards(
                    f"offset token {token} of channel {channel} is not after its last one, "
                    f"{state.last_token} (committed: {committed}); offset tokens must grow batch by batch. "
                    f"Send the rows after the last appended batch, or reopen the channel and send from "
                    f"its last_committed_offset_token")
            limit = self.buffer_limit()
            if self._buffered_bytes + size > limit and self._buffered_rows:
                raise BufferFull(f"table {self.ref.full_name}'s channels hold {self._buffered_bytes} bytes "
                                 f"not yet committed (at most {limit}); try again in a moment")
            state.pending.append(Append(token, body, rows, size, time.time()))
            state.last_token = token
            state.rows_parsed += rows
            self._buffered_rows += rows
            self._buffered_bytes += size
            if self._oldest is None:
                self._oldest = time.monotonic()
            if self._due():
                self._lock.notify_all()
            return state, False

    def buffer_limit(self) -> int:
        """What the table's buffer may hold (appends over it are answered 429,
        BufferFull): buffer.size.bytes for each open channel, at least 4 of them and
        64 MB, as a Kafka connector's batch reads up to buffer.size.bytes from each
        partition. A batch takes the whole buffer, so this also bounds a batch."""
        if self._max_buffer_bytes:
            return self._max_buffer_bytes
        return max(max(4, len(self.channels)) * self.config.size_bytes, 64 * 1024 * 1024)

    def state(self, channel: str) -> ChannelState:
        state = self.channels.get(channel)
        if state is None:
            raise ChannelNotOpen(f"channel {channel} of table {self.ref.full_name} is not open on this "
                                 f"worker (never opened, dropped, or opened before the worker restarted): "
                                 f"open it (PUT .../channels/{channel}), read its last_committed_offset_token "
                                 f"and send the rows after it")
        return state

    def drop(self, channel: str) -> None:
        """Forget the channel and its rows not committed (its committed position stays
        in the table, so opening it again resumes there)."""
        with self._batch, self._lock:
            state = self.state(channel)
            self._forget_pending(state)
            del self.channels[channel]
            self.source.open_channels.discard(channel)

    def idle(self) -> bool:
        with self._lock:
            return not self.channels

    def close(self, flush: bool = True, timeout: float = 120.0) -> None:
        """Stop: commit what is buffered first (`flush`), then release the tables."""
        with self._lock:
            self._stop = True
            if not flush:
                for state in self.channels.values():
                    self._forget_pending(state)
            self._lock.notify_all()
        self._thread.join(timeout)
        checkpoints.drain(state.ref.path for state in list(self.connector.pipeline.tables.states.values()))
        self.connector.pipeline.release()
        from floeline.ingest.metrics import forget_connector

        forget_connector(self.name)

    def _forget_pending(self, state: ChannelState) -> None:
        for append in state.pending:
            self._buffered_rows -= append.rows
            self._buffered_bytes -= append.size
        state.pending.clear()
        if not self._buffered_rows:
            self._oldest = None

    # ---- batches ------------------------------------------------------------------------

    def _due(self) -> bool:
        if not self._buffered_rows or time.monotonic() < self._retry_at:
            return False
        cfg = self.config
        return (self._stop or self._buffered_rows >= cfg.count_records or self._buffered_bytes >= cfg.size_bytes
                or time.monotonic() - self._oldest >= cfg.flush_time_s)

    def _wait_s(self) -> float:
        now = time.monotonic()
        if not self._buffered_rows:
            return 1.0
        if now < self._retry_at:
            return self._retry_at - now
        return max(0.01, self.config.flush_time_s - (now - self._oldest))

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._due() and not (self._stop and not self._buffered_rows):
                    if self._stop and self._failures:
                        return  # stopping while commits fail: what is buffered is given up
                    self._lock.wait(self._wait_s())
                if self._stop and not self._buffered_rows:
                    return
            try:
                self._flush_once()
            except Exception:  # noqa: BLE001 - the thread outlives any one batch
                log.exception("channels of table %s: a batch failed unexpectedly", self.ref.full_name)

    def _take(self) -> dict[str, tuple[ChannelState, list[Append]]]:
        with self._lock:
            taken = {}
            for name, state in self.channels.items():
                if state.pending and state.invalid is None:
                    taken[name] = (state, list(state.pending))
                    self._forget_pending(state)
            return taken

    def _flush_once(self) -> None:
        with self._batch:
            taken = self._take()
            if not taken:
                return
            df, start, end = self._frame(taken)
            batch_id = self._batch_id
            self._write_offsets(batch_id, start, end)
            errors_before = sum(self.connector.row_errors.values())
            try:
                slots = self.batch_slots if self.batch_slots is not None else contextlib.nullcontext()
                with waits.working_for(self.name), slots:
                    self.connector.process_batch(df, batch_id)
            except Exception as exc:  # noqa: BLE001 - a failed batch is the channels' to report
                self.connector.pipeline.tables.commits_failed()
                self._failed(taken, exc)
                return
            self._batch_id += 1
            self._failures, self._failing_since, self._retry_at = 0, None, 0.0
            errors = (self._row_errors(taken, start)
                      if sum(self.connector.row_errors.values()) > errors_before else {})
            held = self.connector.pipeline.tables.state(self.ref).committed.positions
            now = time.time()
            with self._lock:
                for name, (state, appends) in taken.items():
                    if self.channels.get(name) is not state:
                        continue
                    state.committed = held.get(name, end[name])
                    state.taken = state.committed
                    failed, message, token = errors.get(name, (0, None, None))
                    state.rows_inserted += sum(a.rows for a in appends) - failed
                    if failed:
                        state.rows_error += failed
                        state.last_error_message, state.last_error_token, state.last_error_at = message, token, now
                    state.last_commit_latency_ms = int((now - appends[0].received) * 1000)

    def _frame(self, taken):
        """The batch's rows as a DataFrame in ChannelSource's layout, and where each
        channel starts and ends."""
        appends, start, end = [], {}, {}
        for name, (state, pending) in taken.items():
            if state.taken is not None:
                start[name] = state.taken
            appends.extend((name, append) for append in pending)
            end[name] = row_position(pending[-1].token, pending[-1].rows - 1)
        return rows_of_appends(self.spark, self.table, appends), start, end

    def _write_offsets(self, batch_id: int, start: dict, end: dict) -> None:
        """Where the batch starts and ends, where batch_range (onepass.py) reads a
        streaming query's offset log: this batcher's own checkpoint folder."""
        from floeline.sources.base import BatchEnd

        self.source.first = BatchEnd(dict(start))
        files = self.connector.pipeline.warehouse.storage_for(self.config.checkpoint_dir)
        folder = locations.join(self.config.checkpoint_dir, "offsets")
        for number, positions in ((batch_id - 1, start), (batch_id, end)):
            if number >= 0:
                files.write_text(locations.join(folder, str(number)),
                                 "v1\n{}\n" + self.source.offsets_json(positions) + "\n")
        if batch_id >= 2:
            with contextlib.suppress(OSError):
                files.delete(locations.join(folder, str(batch_id - 2)))

    def _row_errors(self, taken, start: dict) -> dict[str, tuple[int, str, str]]:
        """channel -> (rows of this batch in the error table, the last one's message and
        offset token)."""
        from pyspark.sql import functions as F

        errors_ref = self.connector.pipeline.warehouse.error_table(self.ref)
        key = "named_struct('n', length(RECORD_POSITION), 'p', RECORD_POSITION)"
        mine = []
        for name in taken:
            after = (f" AND {position_after_sql('RECORD_POSITION', sql_string(start[name]))}"
                     if name in start else "")
            mine.append(f"(RECORD_CHANNEL = {sql_string(name)}{after})")
        try:
            found = (self.spark.read.format("delta").load(errors_ref.path)
                     .where(f"CONNECTOR = {sql_string(self.name)} AND ({' OR '.join(mine)})")
                     .groupBy("RECORD_CHANNEL")
                     .agg(F.expr("count(*) AS n"), F.expr(f"max_by(ERROR, {key}) AS e"),
                          F.expr(f"max({key}).p AS p"))
                     .collect())
        except Exception as exc:  # noqa: BLE001 - counting is reporting only
            log.warning("channels of table %s: could not count the batch's row errors: %s",
                        self.ref.full_name, first_lines(str(exc), 1))
            return {}
        return {r["RECORD_CHANNEL"]: (r["n"], r["e"], token_of(r["p"])) for r in found}

    def _failed(self, taken, exc: Exception) -> None:
        """A batch failed before or while committing: transient, its rows go back to the
        front of their buffers and the batch is retried after the retry policy's delay;
        terminal (or the policy's bound spent), its channels must be reopened."""
        policy = self.config.retry
        now = time.monotonic()
        self._failures += 1
        self._failing_since = self._failing_since or now
        message = first_lines(str(exc), 3)
        transient = retry.is_transient(exc) and not policy.spent(now - self._failing_since)
        with self._lock:
            for name, (state, appends) in taken.items():
                if self.channels.get(name) is not state:
                    continue
                if transient:
                    state.pending.extendleft(reversed(appends))
                    self._buffered_rows += sum(a.rows for a in appends)
                    self._buffered_bytes += sum(a.size for a in appends)
                    self._oldest = self._oldest or now
                else:
                    state.invalid = message
                    state.last_error_message, state.last_error_at = message, time.time()
            if transient:
                delay = policy.delay_s(self._failures)
                self._retry_at = now + delay
                log.warning("channels of table %s: a batch failed (%s); trying again in %.1f s (%s)",
                            self.ref.full_name, first_lines(str(exc), 1), delay, retry.limit_text(policy))
            else:
                self._failures, self._failing_since = 0, None
                log.error("channels of table %s: a batch failed: %s; its channels must be reopened",
                          self.ref.full_name, message)
