"""A Python client of the worker's Snowpipe Streaming channels (worker/channels.py),
with the names of Snowflake's Python SDK `snowpipe-streaming`; it needs nothing but
the standard library (no PySpark), so any application can import it:

    from floeline.streaming import StreamingIngestClient

    client = StreamingIngestClient("orders-app", "FLOELINE", "PUBLIC", "ORDERS-STREAMING",
                                   properties={"url": "http://127.0.0.1:8083"})
    channel, status = client.open_channel("orders-1")
    start = int(status.last_committed_offset_token or -1) + 1   # resend from the row after it
    for n in range(start, 1000, 100):
        channel.append_rows([{"id": i} for i in range(n, n + 100)], end_offset_token=str(n + 99))
    channel.wait_for_commit(lambda token: token == "999", timeout_seconds=60)
    client.close()

`properties`: url (the worker's listener), user and password (its Basic auth), ca_file
(a PEM bundle to trust for https; verify=false trusts any certificate), timeout_s (one
request's, default 60) and max_retry_s (default 120). Transient answers (503, 429,
502, 504) and connections refused, reset or timed out are retried with exponential
backoff and jitter until max_retry_s has passed; then StreamingIngestError says what
failed. A certificate the client does not trust fails at once (it would not change). An append retried after a lost answer is safe: the worker drops a batch with
the same offset token as the last one (a duplicate).

After the worker restarts, a channel's appends fail with a StreamingIngestError whose
`code` is ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED or
ERR_STALE_CONTINUATION_TOKEN_SEQUENCER: open the channel again, read its
`last_committed_offset_token` and send from the row after it (every row lands once).

Offset tokens are non-negative integers (as text or int); floeline compares them as
numbers. Where this differs from Snowflake's SDK: rows are sent when append_rows is
called (append_row gathers rows until append_rows, flush or close), not buffered and
sent by a background thread; there is no profile.json or key-pair auth."""

from __future__ import annotations

import base64
import http.client
import json
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

TRANSIENT_STATUSES = (429, 502, 503, 504)
REOPEN_CODES = ("ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED", "ERR_STALE_CONTINUATION_TOKEN_SEQUENCER",
                "ERR_CHANNEL_MUST_BE_REOPENED")


class StreamingIngestError(Exception):
    """A call the worker refused, or one that kept failing past max_retry_s.
    `http_status` (None: no answer), `code` (the worker's code name) and the message."""

    def __init__(self, message: str, http_status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.http_status, self.code, self.message = http_status, code, message

    @property
    def must_reopen(self) -> bool:
        """True when the channel must be opened again (the worker restarted, or another
        client opened the channel since)."""
        return self.code in REOPEN_CODES


@dataclass(frozen=True)
class ChannelStatus:
    """A channel's status (Snowflake's ChannelStatus fields)."""

    database_name: str | None
    schema_name: str | None
    pipe_name: str | None
    channel_name: str
    status_code: str
    last_committed_offset_token: str | None
    created_on_ms: int | None = None
    rows_inserted_count: int = 0
    rows_parsed_count: int = 0
    rows_error_count: int = 0
    last_error_offset_token_upper_bound: str | None = None
    last_error_message: str | None = None
    last_error_timestamp_ms: int | None = None
    server_avg_processing_latency_ms: int | None = None

    @staticmethod
    def from_json(body: Mapping) -> ChannelStatus:
        return ChannelStatus(
            body.get("database_name"), body.get("schema_name"), body.get("pipe_name"),
            body.get("channel_name", ""), body.get("channel_status_code", ""),
            body.get("last_committed_offset_token"), body.get("created_on_ms"),
            body.get("rows_inserted_count") or 0, body.get("rows_parsed_count") or 0,
            body.get("rows_error_count") or 0, body.get("last_error_offset_upper_bound"),
            body.get("last_error_message"), body.get("last_error_timestamp"),
            body.get("snowflake_avg_processing_latency_ms"))


class _Http:
    """Requests to the worker, retried on transient failures (see the module doc)."""

    def __init__(self, properties: Mapping[str, object]):
        url = str(properties.get("url") or "http://127.0.0.1:8083")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url={url!r}: give the worker's listener as http://HOST:PORT or https://HOST:PORT")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.timeout_s = float(properties.get("timeout_s") or 60)
        self.max_retry_s = float(properties.get("max_retry_s") if properties.get("max_retry_s") is not None else 120)
        self.headers = {"User-Agent": "floeline-streaming/0.1 (python)"}
        user, password = properties.get("user"), properties.get("password")
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
        self.context = None
        if self.scheme == "https":
            self.context = ssl.create_default_context(cafile=properties.get("ca_file") or None)
            if str(properties.get("verify", "true")).lower() == "false":
                self.context.check_hostname, self.context.verify_mode = False, ssl.CERT_NONE
        self._connection = None

    def _connect(self):
        if self._connection is None:
            if self.context is not None:
                self._connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                                               context=self.context)
            else:
                self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, dict | None]:
        """(status, JSON body) of a request that got a final answer; StreamingIngestError
        once transient failures have lasted max_retry_s."""
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = content_type
        first_failure, attempt = None, 0
        while True:
            try:
                connection = self._connect()
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                status, retry_after = response.status, response.getheader("Retry-After")
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
            except ssl.SSLCertVerificationError as exc:  # not transient: the same certificate comes back
                self.close()
                raise StreamingIngestError(
                    f"{method} {path}: the worker's certificate at {self.scheme}://{self.host}:{self.port} is not "
                    f"trusted ({exc.verify_message or exc}); give properties ca_file=<the PEM of its CA or "
                    f"certificate>") from None
            except (ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException, OSError) as exc:
                self.close()
                status, data, retry_after, failure = None, b"", None, f"{type(exc).__name__}: {exc}"
            else:
                failure = None
                if status not in TRANSIENT_STATUSES:
                    return status, _json(data)
                failure = f"HTTP {status}: {(_json(data) or {}).get('message', '')}"
            now = time.monotonic()
            first_failure = first_failure if first_failure is not None else now
            attempt += 1
            if now - first_failure >= self.max_retry_s:
                raise StreamingIngestError(
                    f"{method} {path} kept failing for {now - first_failure:.1f} s (max_retry_s="
                    f"{self.max_retry_s:g}): {failure}; check that the worker at "
                    f"{self.scheme}://{self.host}:{self.port} runs and is reachable", status,
                    (_json(data) or {}).get("code"))
            delay = min(5.0, 0.1 * 2 ** min(attempt - 1, 10)) * random.uniform(0.5, 1.0)
            if retry_after and retry_after.isdigit():
                delay = max(delay, min(float(retry_after), 5.0))
            time.sleep(min(delay, max(0.0, self.max_retry_s - (now - first_failure)) + 0.01))


def _json(data: bytes) -> dict | None:
    try:
        value = json.loads(data.decode("utf-8")) if data else None
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _raise_for(status: int, body: dict | None, what: str) -> None:
    if 200 <= status < 300:
        return
    body = body or {}
    raise StreamingIngestError(f"{what}: HTTP {status}: {body.get('message', 'no message')}", status,
                               body.get("code"))


def _token_text(token) -> str | None:
    return None if token is None else str(token)


class StreamingIngestClient:
    """One database.schema.pipe's channels on a floeline worker (Snowflake's name)."""

    def __init__(self, client_name: str, db_name: str, schema_name: str, pipe_name: str,
                 properties: Mapping[str, object] | None = None):
        self.client_name, self.db_name, self.schema_name, self.pipe_name = client_name, db_name, schema_name, pipe_name
        self._properties = dict(properties or {})
        self._http = _Http(self._properties)
        self._channels: dict[str, StreamingIngestChannel] = {}
        self.is_closed = False

    def _pipe_path(self, data: bool = False) -> str:
        q = lambda s: quote(s, safe="")  # noqa: E731
        root = "/v2/streaming/data" if data else "/v2/streaming"
        return f"{root}/databases/{q(self.db_name)}/schemas/{q(self.schema_name)}/pipes/{q(self.pipe_name)}"

    def open_channel(self, channel_name: str, offset_token=None) -> tuple[StreamingIngestChannel, ChannelStatus]:
        """Open (or reopen) a channel: (the channel, its status, with the latest
        committed offset token). Rows appended before and not committed are dropped."""
        if offset_token is not None:
            raise StreamingIngestError("open_channel(offset_token=...) is not supported by floeline: a channel's "
                                       "committed offset token is what its table holds")
        path = f"{self._pipe_path()}/channels/{quote(channel_name, safe='')}"
        status, body = self._http.request("PUT", path, b"{}")
        _raise_for(status, body, f"open channel {channel_name}")
        channel = StreamingIngestChannel(self, channel_name, body["next_continuation_token"])
        self._channels[channel_name] = channel
        return channel, ChannelStatus.from_json(body["channel_status"])

    def get_channel_statuses(self, channel_names: Iterable[str]) -> dict[str, ChannelStatus]:
        names = list(channel_names)
        status, body = self._http.request("POST", f"{self._pipe_path()}:bulk-channel-status",
                                          json.dumps({"channel_names": names}).encode())
        _raise_for(status, body, "channel statuses")
        return {n: ChannelStatus.from_json({"channel_name": n, **s}) for n, s in body["channel_statuses"].items()}

    def get_latest_committed_offset_tokens(self, channel_names: Iterable[str]) -> dict[str, str | None]:
        return {n: s.last_committed_offset_token for n, s in self.get_channel_statuses(channel_names).items()}

    def drop_channel(self, channel_name: str) -> None:
        status, body = self._http.request("DELETE", f"{self._pipe_path()}/channels/{quote(channel_name, safe='')}")
        _raise_for(status, body, f"drop channel {channel_name}")
        self._channels.pop(channel_name, None)

    def close(self, wait_for_flush: bool = True, timeout_seconds: float = 60) -> None:
        """Send what append_row gathered and (wait_for_flush) wait until each open
        channel's last appended token is committed."""
        for channel in list(self._channels.values()):
            if not channel.is_closed:
                channel.close(wait_for_flush, timeout_seconds)
        self._http.close()
        self.is_closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(wait_for_flush=exc[0] is None)


class StreamingIngestChannel:
    """One open channel (Snowflake's name). Not thread-safe: one thread a channel."""

    def __init__(self, client: StreamingIngestClient, channel_name: str, continuation: str):
        self.client, self.channel_name, self._continuation = client, channel_name, continuation
        self._gathered: list[bytes] = []
        self._gathered_token: str | None = None
        self.last_appended_offset_token: str | None = None
        self.is_closed = False

    @property
    def _path(self) -> str:
        return f"{self.client._pipe_path(data=True)}/channels/{quote(self.channel_name, safe='')}/rows"

    def append_row(self, row: Mapping, offset_token=None) -> None:
        """Gather one row (sent with the next append_rows, flush or close)."""
        self._gathered.append(json.dumps(row, separators=(",", ":"), default=str).encode("utf-8"))
        if offset_token is not None:
            self._gathered_token = _token_text(offset_token)

    def append_rows(self, rows: Iterable[Mapping], start_offset_token=None, end_offset_token=None) -> None:
        """Send rows (and any gathered by append_row) as one batch ending at
        `end_offset_token`; returns once the worker has buffered them."""
        lines = self._gathered + [json.dumps(r, separators=(",", ":"), default=str).encode("utf-8") for r in rows]
        token = _token_text(end_offset_token) or self._gathered_token
        self._gathered, self._gathered_token = [], None
        if lines:
            self._send(b"\n".join(lines) + b"\n", token)

    def append_ndjson(self, body: bytes, end_offset_token) -> None:
        """Send rows already written as NDJSON (floeline's; saves the encoding)."""
        self._send(body, _token_text(end_offset_token))

    def flush(self) -> None:
        if self._gathered:
            self.append_rows([])

    def _send(self, body: bytes, token: str | None) -> None:
        if token is None:
            raise StreamingIngestError("every batch needs an offset token: pass end_offset_token (or offset_token "
                                       "to append_row)")
        query = urlencode({"continuationToken": self._continuation, "offsetToken": token})
        status, reply = self.client._http.request("POST", f"{self._path}?{query}", body, "application/x-ndjson")
        _raise_for(status, reply, f"append to channel {self.channel_name} (offset token {token})")
        self._continuation = reply.get("next_continuation_token", self._continuation)
        self.last_appended_offset_token = token

    def get_channel_status(self) -> ChannelStatus:
        return self.client.get_channel_statuses([self.channel_name])[self.channel_name]

    def get_latest_committed_offset_token(self) -> str | None:
        return self.get_channel_status().last_committed_offset_token

    def wait_for_commit(self, token_checker: Callable[[str | None], bool] | None = None,
                        timeout_seconds: float = 60, poll_seconds: float = 0.2) -> ChannelStatus:
        """Wait until `token_checker(latest committed offset token)` is true (default:
        the last appended token is committed); the status then. StreamingIngestError
        on timeout or when the channel reports an error that needs a reopen."""
        self.flush()
        if token_checker is None:
            want = self.last_appended_offset_token
            token_checker = lambda token: want is None or (token is not None and int(token) >= int(want))  # noqa: E731
        deadline = time.monotonic() + timeout_seconds
        while True:
            status = self.get_channel_status()
            if status.status_code not in ("SUCCESS", ""):
                raise StreamingIngestError(f"channel {self.channel_name}: {status.status_code}: "
                                           f"{status.last_error_message}", None, status.status_code)
            if token_checker(status.last_committed_offset_token):
                return status
            if time.monotonic() >= deadline:
                raise StreamingIngestError(f"channel {self.channel_name}: offset token "
                                           f"{status.last_committed_offset_token} committed after "
                                           f"{timeout_seconds:g} s, not the one waited for")
            time.sleep(poll_seconds)

    def close(self, wait_for_flush: bool = True, timeout_seconds: float = 60) -> None:
        """Send what was gathered and (wait_for_flush) wait for it to commit; the
        channel stays open on the worker (drop_channel forgets it there)."""
        self.flush()
        if wait_for_flush and self.last_appended_offset_token is not None:
            self.wait_for_commit(timeout_seconds=timeout_seconds)
        self.is_closed = True
