"""The rules of Snowpipe Streaming channels that need no Spark: offset tokens and
positions, NDJSON bodies, the REST paths, and the Python client (importable without
PySpark; retrying transient answers against a real local HTTP server)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from floeline.ingest.channel_batches import BadRows, ndjson_batch
from floeline.sources.base import position_after
from floeline.sources.channels import BadOffsetToken, parse_offset_token, row_position, token_of
from floeline.worker import channels


def test_positions_keep_the_order_of_tokens_and_rows_and_say_their_token():
    assert token_of(row_position(0, 0)) == "0"
    assert token_of(row_position(7, 41)) == "7"
    big = 10 ** 40 + 3
    assert token_of(row_position(big, 99)) == str(big)
    assert position_after(row_position(8, 0), row_position(7, 99_999))
    assert position_after(row_position(7, 2), row_position(7, 1))
    assert token_of(None) is None


@pytest.mark.parametrize("token", ["", None, "-1", "1.5", "abc", "٣", "1" * 61])
def test_an_offset_token_that_is_not_a_non_negative_integer_is_refused_with_the_fix(token):
    with pytest.raises(BadOffsetToken, match="offset token"):
        parse_offset_token(token)


def test_offset_tokens_are_numbers():
    assert parse_offset_token(" 0042 ") == 42


def test_ndjson_rows_skip_blank_lines_and_name_the_first_bad_line():
    assert ndjson_batch(b'{"a": 1}\n\n \r\n{"a": 2}\r\n') == (b'{"a": 1}\n{"a": 2}', 2)
    with pytest.raises(BadRows, match=r"line 2 of the body is not JSON .*same offset token"):
        ndjson_batch(b'{"a": 1}\n{"a": \n')
    with pytest.raises(BadRows, match="line 1 of the body is an array, not a JSON object"):
        ndjson_batch(b"[1, 2]\n")
    with pytest.raises(BadRows, match="no rows"):
        ndjson_batch(b"\n \n")


def test_the_paths_are_snowflakes():
    def verb(path):
        for pattern, methods in channels.ROUTES:
            match = pattern.match(path)
            if match:
                return methods, match.groupdict()
        return None, None

    methods, params = verb("/v2/streaming/databases/DB/schemas/S/pipes/T-STREAMING/channels/c1")
    assert set(methods) == {"PUT", "GET", "DELETE"} and params["channel"] == "c1"
    methods, params = verb("/v2/streaming/data/databases/DB/schemas/S/pipes/T-STREAMING/channels/c1/rows")
    assert methods == {"POST": "append"} and params["pipe"] == "T-STREAMING"
    methods, params = verb("/v2/streaming/databases/DB/schemas/S/pipes/T-STREAMING:bulk-channel-status")
    assert methods == {"POST": "bulk_status"} and params["pipe"] == "T-STREAMING"
    status, body, _ = channels.handle(None, "GET", "/v2/streaming/nothing", {}, b"")
    assert status == 404 and body["code"] == "ERR_NOT_FOUND"


def test_the_client_imports_without_pyspark():
    code = ("import sys; import floeline.streaming; "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')], 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 `fail` times, then the channel's open answer."""

    protocol_version = "HTTP/1.1"
    fail = 2
    calls = 0

    def do_PUT(self):  # noqa: N802
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if type(self).calls <= type(self).fail:
            self._send(503, {"error_code": 503, "message": "busy"})
        else:
            self._send(200, {"next_continuation_token": "c", "channel_status": {
                "channel_name": "ch", "channel_status_code": "SUCCESS", "last_committed_offset_token": "41"}})

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    _Flaky.calls, _Flaky.fail = 0, 2
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_client_retries_transient_answers_within_its_bound(flaky_server):
    from floeline.streaming import StreamingIngestClient, StreamingIngestError

    url = f"http://127.0.0.1:{flaky_server.server_address[1]}"
    client = StreamingIngestClient("t", "DB", "S", "T-STREAMING", {"url": url, "max_retry_s": 10})
    channel, status = client.open_channel("ch")
    assert status.last_committed_offset_token == "41" and _Flaky.calls == 3
    _Flaky.calls, _Flaky.fail = 0, 10 ** 6
    client = StreamingIngestClient("t", "DB", "S", "T-STREAMING", {"url": url, "max_retry_s": 0.5})
    with pytest.raises(StreamingIngestError, match="kept failing .*max_retry_s=0.5"):
        client.open_channel("ch")


def test_the_client_gives_up_on_a_refused_connection_after_its_bound():
    from floeline.streaming import StreamingIngestClient, StreamingIngestError

    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    client = StreamingIngestClient("t", "DB", "S", "T-STREAMING",
                                   {"url": f"http://127.0.0.1:{port}", "max_retry_s": 0.5})
    with pytest.raises(StreamingIngestError, match="ConnectionRefusedError"):
        client.open_channel("ch")


def test_the_channels_are_behind_the_listeners_basic_auth(tmp_path):
    """The channel paths go through the listener's credential check (401 before any
    routing); the client's user and password get past it."""
    from floeline.streaming import StreamingIngestClient, StreamingIngestError
    from floeline.worker.auth import user_line
    from floeline.worker.rest import RestServer

    users = tmp_path / "users"
    users.write_text(user_line("app", "s3cret pass") + "\n")
    server = RestServer({"listeners": "http://127.0.0.1:0", "rest.auth.users.file": str(users)}, None).start()
    try:
        for properties in ({}, {"user": "app", "password": "wrong"}):
            client = StreamingIngestClient("t", "DB", "S", "T-STREAMING", {"url": server.url, **properties})
            with pytest.raises(StreamingIngestError) as refused:
                client.open_channel("ch")
            assert refused.value.http_status == 401
        client = StreamingIngestClient("t", "DB", "S", "T-STREAMING",
                                       {"url": server.url, "user": "app", "password": "s3cret pass"})
        with pytest.raises(StreamingIngestError) as past_auth:  # this listener has no channel service
            client.open_channel("ch")
        assert past_auth.value.http_status == 404 and past_auth.value.code == "ERR_NOT_FOUND"
    finally:
        server.close()


def test_the_channels_buffer_keys_are_checked_when_the_worker_starts():
    from floeline.errors import ConfigError
    from floeline.worker.settings import worker_settings_from_dict

    worker_settings_from_dict({"floeline.streaming.buffer.flush.time": "0",
                               "floeline.streaming.buffer.count.records": "5"})
    with pytest.raises(ConfigError) as bad:
        worker_settings_from_dict({"floeline.streaming.buffer.flush.time": "soon",
                                   "floeline.streaming.buffer.size.bytes": "0"})
    assert "floeline.streaming.buffer.flush.time='soon': accepted values: a whole number >= 0" in str(bad.value)
    assert "floeline.streaming.buffer.size.bytes='0'" in str(bad.value)


def test_the_client_reaches_the_channels_over_the_listeners_tls(tmp_path):
    """https with the listener's certificate trusted (ca_file) gets through to the
    channel paths; an untrusted certificate fails at once naming ca_file."""
    from floeline.streaming import StreamingIngestClient, StreamingIngestError
    from floeline.worker.rest import RestServer

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    server = RestServer({"listeners": "https://127.0.0.1:0", "listeners.https.ssl.certificate.location": str(cert),
                         "listeners.https.ssl.key.location": str(key)}, None).start()
    try:
        trusted = StreamingIngestClient("t", "DB", "S", "T-STREAMING", {"url": server.url, "ca_file": str(cert)})
        with pytest.raises(StreamingIngestError) as past_tls:  # this listener has no channel service
            trusted.open_channel("ch")
        assert past_tls.value.http_status == 404 and past_tls.value.code == "ERR_NOT_FOUND"
        untrusted = StreamingIngestClient("t", "DB", "S", "T-STREAMING", {"url": server.url, "max_retry_s": 60})
        with pytest.raises(StreamingIngestError, match="not trusted .*ca_file"):
            untrusted.open_channel("ch")
    finally:
        server.close()
