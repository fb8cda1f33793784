"""Snowpipe Streaming's channels on the worker's REST listener: any application opens a
channel on a table's pipe, appends rows (NDJSON) with offset tokens, asks a channel's
status (its latest committed offset token) and drops it; the rows are committed by the
same code as a connector's (ingest/channel_batches.py). Paths and fields are those of
Snowflake's Snowpipe Streaming REST API (high-performance architecture), under the
listener's own auth, TLS and body limits (rest.py, limits.py: 16 MB, Snowflake's too):

    PUT    /v2/streaming/databases/{db}/schemas/{schema}/pipes/{pipe}/channels/{channel}
           open (or reopen): {"next_continuation_token", "channel_status"}
    POST   /v2/streaming/data/databases/{db}/schemas/{schema}/pipes/{pipe}/channels/{channel}/rows
           ?continuationToken=...&offsetToken=...   body: NDJSON rows
           -> {"next_continuation_token"}
    POST   /v2/streaming/databases/{db}/schemas/{schema}/pipes/{pipe}:bulk-channel-status
           body {"channel_names": [...]} -> {"channel_statuses": {name: status}}
    GET    /v2/streaming/databases/{db}/schemas/{schema}/pipes/{pipe}/channels/{channel}
           one channel's status (floeline's; Snowflake has only the bulk call)
    DELETE /v2/streaming/databases/{db}/schemas/{schema}/pipes/{pipe}/channels/{channel}
           drop: its rows not committed are dropped, its committed offset token stays

The pipe is the table's default pipe `{TABLE}-STREAMING` (the table is created from
the first rows, as a connector creates it, and evolves with them) or a pipe made with
CREATE PIPE named like its table (its COPY ... SELECT shapes the rows), Snowflake's
rule for streaming. Database, schema and pipe names are identifiers (case-insensitive
unless double-quoted); channel names are kept as given.

Where floeline differs: offset tokens are non-negative integers compared as numbers
(sources/channels.py: they become the rows' positions); there is no hostname or
scoped-token exchange (the listener's Basic auth and TLS apply); gzip/zstd bodies are
not read; the counts in a status are those since the worker started. Errors answer
{"error_code": HTTP status, "code": Snowflake's code name, "message": what and the fix}.

The worker's keys for its channels (worker.properties; the connector keys' meaning):

    floeline.streaming.buffer.flush.time=1        seconds between commits of a table's channels
    floeline.streaming.buffer.count.records=10000 rows buffered for a table that make a commit due
    floeline.streaming.buffer.size.bytes=20000000 bytes buffered for a table that make a commit due
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import threading
import traceback
from urllib.parse import unquote

from floeline.errors import ConfigError, FloelineError, NamingError
from floeline.naming import normalize_identifier
from floeline.secrets import scrub
from floeline.sources.channels import BadOffsetToken, parse_offset_token, token_of
from floeline.warehouse import pipes
from floeline.worker.errors import BadRequest, NotFound, RestError

log = logging.getLogger("floeline")

PREFIX = "/v2/streaming/"
FLUSH_TIME_KEY = "floeline.streaming.buffer.flush.time"
COUNT_KEY = "floeline.streaming.buffer.count.records"
SIZE_KEY = "floeline.streaming.buffer.size.bytes"
KEYS = (FLUSH_TIME_KEY, COUNT_KEY, SIZE_KEY)
DEFAULTS = {FLUSH_TIME_KEY: "1", COUNT_KEY: "10000", SIZE_KEY: "20000000"}
CONNECTOR_PREFIX = "snowpipe-streaming:"

_PART = r"[^/]+"
_BASE = rf"/v2/streaming/databases/(?P<db>{_PART})/schemas/(?P<schema>{_PART})/pipes"
ROUTES = [(re.compile(p), m) for p, m in [
    (rf"^{_BASE}/(?P<pipe>[^/]+?):bulk-channel-status$", {"POST": "bulk_status"}),
    (rf"^{_BASE}/(?P<pipe>{_PART})/channels/(?P<channel>{_PART})$",
     {"PUT": "open", "GET": "status", "DELETE": "drop"}),
    (rf"^/v2/streaming/data/databases/(?P<db>{_PART})/schemas/(?P<schema>{_PART})/pipes/"
     rf"(?P<pipe>{_PART})/channels/(?P<channel>{_PART})/rows$", {"POST": "append"}),
]]


class ChannelService:
    """The worker's channels, one TableChannels per table (made at its first open,
    closed when its last channel is dropped)."""

    def __init__(self, spark, settings, out=None, batch_slots=None):
        self.spark, self.settings, self.out = spark, settings, out
        self.batch_slots = batch_slots  # a callable: the herder's batch slots
        self._tables: dict[tuple[str, str, str], object] = {}
        self._lock = threading.Lock()
        self._out_lock = threading.Lock()
        # Where each table's batcher writes its batches' offsets (a fresh folder per
        # worker process: the tables hold the positions that matter).
        self._checkpoints = tempfile.mkdtemp(prefix="floeline-channels-")
        self._closed = False

    # ---- names ---------------------------------------------------------------------------

    def resolve(self, db: str, schema: str, pipe: str) -> tuple[str, str, str]:
        """(DATABASE, SCHEMA, TABLE) the pipe loads, by Snowflake's streaming rule."""
        try:
            database, schema_ = normalize_identifier(db), normalize_identifier(schema)
        except NamingError as exc:
            raise BadRequest(f"{exc}") from None
        name = pipe.strip()
        if name.upper().endswith(pipes.DEFAULT_PIPE_SUFFIX) and len(name) > len(pipes.DEFAULT_PIPE_SUFFIX):
            table = name[:-len(pipes.DEFAULT_PIPE_SUFFIX)]
            try:
                return database, schema_, normalize_identifier(table)
            except NamingError as exc:
                raise BadRequest(f"pipe {pipe!r}: its table's name {table!r}: {exc}") from None
        try:
            stored_name = normalize_identifier(name)
        except NamingError as exc:
            raise BadRequest(f"pipe {pipe!r}: {exc}") from None
        from floeline.warehouse.catalog import Warehouse

        warehouse = Warehouse(self.settings.warehouse, self.settings.warehouse_s3)
        found = pipes.load(warehouse, database, schema_, "pipe", stored_name)
        if found is None:
            raise NotFound(f"pipe {database}.{schema_}.{stored_name} does not exist: open the channel on "
                           f"the table's default pipe ({stored_name}{pipes.DEFAULT_PIPE_SUFFIX}, which "
                           f"creates the table from the first rows), or create the pipe first "
                           f"(CREATE PIPE {stored_name} AS COPY INTO {stored_name} FROM (SELECT ... FROM "
                           f"TABLE(DATA_SOURCE(TYPE => 'STREAMING'))))")
        if found.loads_files or (found.table, found.database, found.schema) != (stored_name, database, schema_):
            raise BadRequest(f"pipe {database}.{schema_}.{stored_name} cannot take channels: a streaming pipe "
                             f"is named like the table it copies into and reads "
                             f"TABLE(DATA_SOURCE(TYPE => 'STREAMING')); open the channel on "
                             f"{found.table}{pipes.DEFAULT_PIPE_SUFFIX} or create such a pipe")
        return database, schema_, stored_name

    def _table_channels(self, key: tuple[str, str, str], create: bool):
        with self._lock:
            found = self._tables.get(key)
            if found is not None or not create:
                if found is None:
                    raise NotFound(f"no channel of table {'.'.join(key)} is open on this worker: open one first "
                                   f"(PUT .../channels/NAME)")
                return found
            if self._closed:
                raise RestError("the worker is stopping")
            found = self._start_table(key)
            self._tables[key] = found
            return found

    def _start_table(self, key: tuple[str, str, str]):
        from floeline.config import config_from_dict
        from floeline.ingest.channel_batches import TableChannels
        from floeline.worker.herder import LinePrefixer

        database, schema, table = key
        name = CONNECTOR_PREFIX + ".".join(key).replace("/", "%2F").replace("\\", "%5C")
        props = self.settings.properties
        # The worker's defaults for where tables live (warehouse, its S3 keys), not its
        # Kafka converters or consumer keys: a channel's rows are JSON objects.
        settings = {k: v for k, v in self.settings.connector_settings({"name": name}).items()
                    if not k.startswith(("key.converter", "value.converter", "header.converter",
                                         "consumer."))}
        settings.update({
            "name": name,
            "topics": "floeline_channels",  # read by no one: the rows come from the channels
            "snowflake.database.name": _quoted(database),
            "snowflake.schema.name": _quoted(schema),
            "snowflake.enable.schematization": "true",
            "snowflake.ingestion.method": "SNOWPIPE_STREAMING",
            "errors.tolerance": "all",
            "floeline.checkpoint.dir": tempfile.mkdtemp(dir=self._checkpoints),
            "buffer.flush.time": props.get(FLUSH_TIME_KEY, DEFAULTS[FLUSH_TIME_KEY]),
            "buffer.count.records": props.get(COUNT_KEY, DEFAULTS[COUNT_KEY]),
            "buffer.size.bytes": props.get(SIZE_KEY, DEFAULTS[SIZE_KEY]),
        })
        try:
            config = config_from_dict(settings)
        except ConfigError as exc:
            raise BadRequest(f"cannot open channels on table {'.'.join(key)}: {exc}") from None
        out = LinePrefixer(name, self.out, self._out_lock) if self.out is not None else None
        slots = self.batch_slots() if callable(self.batch_slots) else self.batch_slots
        return TableChannels(config, self.spark, table, out=out, batch_slots=slots)

    # ---- the endpoints -------------------------------------------------------------------

    def open(self, db: str, schema: str, pipe: str, channel: str) -> dict:
        key = self.resolve(db, schema, pipe)
        channel = _channel_name(channel)
        table = self._table_channels(key, create=True)
        state = table.open(channel)
        return {"next_continuation_token": state.continuation,
                "channel_status": channel_status(key, pipe, state)}

    def append(self, db: str, schema: str, pipe: str, channel: str, continuation: str | None,
               offset_token: str | None, body: bytes) -> dict:
        from floeline.ingest.channel_batches import ndjson_batch

        key = self.resolve(db, schema, pipe)
        table = self._table_channels(key, create=False)
        try:
            token = parse_offset_token(offset_token)
        except BadOffsetToken as exc:
            raise _ChannelRefusal(400, "ERR_INVALID_OFFSET_TOKEN", str(exc)) from None
        table.state(channel)  # an unknown channel is told before its body is parsed
        rows, count = ndjson_batch(body)
        state, duplicate = table.append(channel, continuation, token, rows, count, len(body))
        reply = {"next_continuation_token": state.continuation}
        if duplicate:
            reply["duplicate"] = True  # floeline's: the batch was already taken, its rows were dropped
        return reply

    def status(self, db: str, schema: str, pipe: str, channel: str) -> dict:
        key = self.resolve(db, schema, pipe)
        return channel_status(key, pipe, self._table_channels(key, create=False).state(channel))

    def bulk_status(self, db: str, schema: str, pipe: str, names: list[str]) -> dict:
        key = self.resolve(db, schema, pipe)
        with self._lock:
            table = self._tables.get(key)
        statuses = {}
        for name in names:
            state = table.channels.get(name) if table is not None else None
            statuses[name] = channel_status(key, pipe, state) if state is not None else {
                "channel_status_code": "ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED",
                "channel_name": name, "last_committed_offset_token": None}
        return {"channel_statuses": statuses}

    def drop(self, db: str, schema: str, pipe: str, channel: str) -> None:
        key = self.resolve(db, schema, pipe)
        table = self._table_channels(key, create=False)
        table.drop(channel)
        with self._lock:
            if table.idle() and self._tables.get(key) is table:
                del self._tables[key]
            else:
                return
        table.close(flush=False)

    def close(self) -> None:
        """Commit what every table's channels hold, then stop (worker shutdown)."""
        with self._lock:
            self._closed = True
            tables, self._tables = list(self._tables.values()), {}
        for table in tables:
            table.close(flush=True)
        shutil.rmtree(self._checkpoints, ignore_errors=True)


def _quoted(identifier: str) -> str:
    """A stored name as a config identifier (double-quoted, so kept as it is)."""
    return '"' + identifier.replace('"', '""') + '"'


def _channel_name(name: str) -> str:
    if not name or not name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name) > 255:
        raise BadRequest(f"channel name {name[:80]!r} cannot be used: give 1 to 255 characters without "
                         f"control characters")
    return name


def channel_status(key: tuple[str, str, str], pipe: str, state) -> dict:
    """Snowflake's ChannelStatus fields for a channel's state (channel_batches.ChannelState)."""
    database, schema, _table = key
    return {
        "database_name": database,
        "schema_name": schema,
        "pipe_name": pipe,
        "channel_name": state.name,
        "channel_status_code": "SUCCESS" if state.invalid is None else "ERR_CHANNEL_MUST_BE_REOPENED",
        "last_committed_offset_token": token_of(state.committed),
        "created_on_ms": int(state.opened_at * 1000),
        "rows_inserted_count": state.rows_inserted,
        "rows_parsed_count": state.rows_parsed,
        "rows_error_count": state.rows_error,
        "last_error_offset_upper_bound": state.last_error_token,
        "last_error_message": state.last_error_message,
        "last_error_timestamp": None if state.last_error_at is None else int(state.last_error_at * 1000),
        "snowflake_avg_processing_latency_ms": state.last_commit_latency_ms,
    }


class _ChannelRefusal(RestError):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


# HTTP statuses of the channel errors (channel_batches.py), by class name.
_STATUS = {"ChannelNotOpen": 404, "StaleContinuation": 409, "TokenBackwards": 409, "MustReopen": 409,
           "BadRows": 400, "BufferFull": 429}


def handle(service: ChannelService | None, method: str, path: str, query: dict, body: bytes) -> tuple[
        int, dict | None, dict | None]:
    """(HTTP status, JSON body, extra headers) of a request under PREFIX."""
    if service is None:
        return _error(404, "ERR_NOT_FOUND", "this worker serves no Snowpipe Streaming channels")
    for pattern, methods in ROUTES:
        match = pattern.match(path.rstrip("/"))
        if match is None:
            continue
        verb = methods.get("GET" if method == "HEAD" else method)
        if verb is None:
            return _error(405, "ERR_METHOD_NOT_ALLOWED", f"HTTP 405 Method Not Allowed: {method} {path}")
        params = {k: unquote(v) for k, v in match.groupdict().items()}
        try:
            return _call(service, verb, params, query, body)
        except _ChannelRefusal as exc:
            return _error(exc.status, exc.code, str(exc))
        except RestError as exc:
            code = {400: "ERR_BAD_REQUEST", 404: "ERR_NOT_FOUND"}.get(exc.status, "ERR_INTERNAL")
            return _error(exc.status, code, str(exc))
        except FloelineError as exc:
            status = _STATUS.get(type(exc).__name__)
            if status is None:
                raise
            headers = {"Retry-After": "1"} if status == 429 else None
            return _error(status, getattr(exc, "code", "ERR_INTERNAL"), str(exc), headers)
        except Exception as exc:  # noqa: BLE001 - the client gets a 500 body, the log the trace
            log.error("REST %s %s failed:\n%s", method, path, scrub(traceback.format_exc()))
            return _error(500, "ERR_INTERNAL", f"{type(exc).__name__}: {exc}")
    return _error(404, "ERR_NOT_FOUND", f"HTTP 404 Not Found: {path}")


def _call(service: ChannelService, verb: str, params: dict, query: dict, body: bytes):
    where = (params["db"], params["schema"], params["pipe"])
    if verb == "open":
        return 200, service.open(*where, params["channel"]), None
    if verb == "append":
        def one(name):
            values = query.get(name) or [None]
            return values[-1]
        return 200, service.append(*where, params["channel"], one("continuationToken"), one("offsetToken"),
                                   body), None
    if verb == "status":
        return 200, service.status(*where, params["channel"]), None
    if verb == "drop":
        service.drop(*where, params["channel"])
        return 204, None, None
    names = _channel_names(body)
    return 200, service.bulk_status(*where, names), None


def _channel_names(body: bytes) -> list[str]:
    try:
        parsed = json.loads(body.decode("utf-8") or "null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not JSON ({exc}); send {{\"channel_names\": [\"NAME\", ...]}}") from None
    names = parsed.get("channel_names") if isinstance(parsed, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest('send {"channel_names": ["NAME", ...]}: a list of channel names')
    return names


def _error(status: int, code: str, message: str, headers: dict | None = None):
    return status, {"error_code": status, "code": code, "message": scrub(message)}, headers
