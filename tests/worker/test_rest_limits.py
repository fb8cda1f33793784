"""What a client may make the REST listener read (limits.py, rest.py), without Spark:
framing and chunk parsing as pure functions, then a real RestServer on a free port
driven over raw sockets, since the cases are what an HTTP client library would not
send: credentials checked before any body byte (a 401 arrives while the client still
holds its 15 MB), 413 before or while a body is read, heads that never finish, more
connections than the bound."""

from __future__ import annotations

import base64
import io
import json
import socket
import sys
import time
from email.message import Message
from pathlib import Path

import pytest

from floeline.errors import ConfigError
from floeline.worker import limits
from floeline.worker.auth import user_line
from floeline.worker.rest import RestServer, RestSettings
from floeline.worker.settings import worker_settings_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from worker_contract_herder import InMemoryContractHerder  # noqa: E402

MB = 1024 * 1024


def headers(*pairs: tuple[str, str]) -> Message:
    message = Message()
    for key, value in pairs:
        message[key] = value
    return message


# ---------------------------------------------------------------- framing and chunks

def test_framing_is_checked_before_any_body_byte():
    assert limits.framing(headers()) == 0
    assert limits.framing(headers(("Content-Length", "120"))) == 120
    assert limits.framing(headers(("Transfer-Encoding", "chunked"))) is None
    with pytest.raises(limits.BodyTooLarge, match=f"larger than {limits.MAX_BODY} bytes"):
        limits.framing(headers(("Content-Length", str(limits.MAX_BODY + 1))))
    with pytest.raises(limits.BodyTooLarge):
        limits.framing(headers(("Content-Length", "9" * 5000)))  # not parsed as a 5000-digit number
    for bad, says in [((("Content-Length", "12a"),), "not a number"),
                      ((("Content-Length", "-1"),), "not a number"),
                      ((("Content-Length", "1"), ("Content-Length", "2")), "several different"),
                      ((("Transfer-Encoding", "gzip, chunked"),), "not supported"),
                      ((("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "gzip")), "not supported"),
                      ((("Transfer-Encoding", "chunked"), ("Content-Length", "5")), "both")]:
        with pytest.raises(limits.Unreadable, match=says):
            limits.framing(headers(*bad))
    assert limits.framing(headers(("Content-Length", "7"), ("Content-Length", "7"))) == 7
    assert limits.declares_body(headers(("Content-Length", "3")))
    assert limits.declares_body(headers(("Transfer-Encoding", "chunked")))
    assert not limits.declares_body(headers(("Content-Length", "0")))
    assert not limits.declares_body(headers())
    assert limits.declares_body(headers(("Content-Length", "0"), ("Content-Length", "5")))


def test_chunked_bodies_with_extensions_and_trailers():
    body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\nNEXT"
    stream = io.BytesIO(body)
    assert limits.read_chunked(stream) == b"Wikipedia in\r\n\r\nchunks."
    assert stream.read() == b"NEXT"  # the next request's bytes stay unread


def test_a_chunk_over_the_limit_is_refused_before_its_data_is_read():
    stream = io.BytesIO(b"8\r\n12345678\r\n40000000\r\n" + b"x" * 100)  # then a chunk declaring 1 GiB
    with pytest.raises(limits.BodyTooLarge):
        limits.read_chunked(stream, limit=1024)
    assert stream.read() == b"x" * 100
    many = io.BytesIO(b"400\r\n" + b"y" * 1024 + b"\r\n" + b"1\r\nz\r\n0\r\n\r\n")
    with pytest.raises(limits.BodyTooLarge):  # the limit counts every chunk together
        limits.read_chunked(many, limit=1024)


@pytest.mark.parametrize("body, says", [
    (b"zz\r\nab\r\n0\r\n\r\n", "chunk size line"),
    (b"-1\r\n", "chunk size line"),
    (b"1" * 2000, "chunk size line"),  # a size line that never ends
    (b"3\r\nabcX\r\n0\r\n\r\n", "followed by CRLF"),
    (b"5\r\nab", "ended after 2 of 5 bytes"),
    (b"0\r\nTrailer: x", "trailer"),
    (b"0\r\n" + b"T: x\r\n" * 100, "more than 64 trailers"),
])
def test_malformed_chunked_bodies_are_unreadable(body, says):
    with pytest.raises(limits.Unreadable, match=says):
        limits.read_chunked(io.BytesIO(body))


def test_a_body_is_read_in_pieces_as_it_arrives():
    class Trickle(io.RawIOBase):
        """A stream that hands out 3 bytes a read, as a slow client's socket does."""

        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def readinto(self, buffer):
            piece, self.data = self.data[:3], self.data[3:]
            buffer[:len(piece)] = piece
            return len(piece)

    assert limits.read_exactly(io.BufferedReader(Trickle(b"0123456789")), 10) == b"0123456789"
    with pytest.raises(limits.Unreadable, match="ended after 10 of 11"):
        limits.read_exactly(io.BufferedReader(Trickle(b"0123456789")), 11)


def test_the_clock_drops_a_head_that_trickles_and_one_that_is_too_large(monkeypatch):
    monkeypatch.setattr(limits, "HEAD_S", 0.5)
    monkeypatch.setattr(limits, "HEAD_BYTES", 100)
    client, server = socket.socketpair()
    with client, server:
        clock = limits.ClockedSocket(server)
        reader = io.BufferedReader(clock)
        client.sendall(b"GET / HTTP/1.1\r\n")
        assert reader.readline() == b"GET / HTTP/1.1\r\n"
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            while True:  # a byte every 0.1 s: each read is quick, the head never ends
                client.sendall(b"x")
                reader.read1(1)
                time.sleep(0.1)
        assert time.monotonic() - started < 2
        clock.await_request()
        client.sendall(b"y" * 300)
        with pytest.raises(limits.HeadTooLarge):
            reader.readline(1000)
        clock.read_body()  # a body is not counted against the head's bytes
        assert len(reader.read(150)) == 150


def test_the_connection_bound_setting():
    assert RestSettings.from_properties({}).max_connections == 64
    assert RestSettings.from_properties({"floeline.worker.rest.max.connections": "8"}).max_connections == 8
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match=r"floeline.worker.rest.max.connections=.*>= 1"):
            RestSettings.from_properties({"floeline.worker.rest.max.connections": bad})
        with pytest.raises(ConfigError, match="floeline.worker.rest.max.connections"):
            worker_settings_from_dict({"floeline.worker.rest.max.connections": bad})
    worker_settings_from_dict({"floeline.worker.rest.max.connections": "200"})


# ---------------------------------------------------------------- over a socket

ALICE = ("alice", "wonder land")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def guarded(tmp_path):
    users = tmp_path / "users"
    users.write_text(user_line(*ALICE) + "\n")
    rest = RestServer({"listeners": "http://127.0.0.1:0", "rest.auth.users.file": str(users)},
                      InMemoryContractHerder()).start()
    yield rest
    rest.close()


def raw(port: int, head: str, body: bytes = b"", timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(found.get("content-length", 0)):
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), found, rest


def closed(sock: socket.socket) -> bool:
    """True when the server closed the connection (reads end, or it was reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_credentials_are_checked_before_any_body_byte_and_the_body_is_never_read(guarded):
    # Headers declaring 15 MB and not one body byte sent: the 401 comes at once.
    with raw(guarded.port, f"POST /connectors HTTP/1.1\nHost: x\nContent-Length: {15 * MB}\n") as sock:
        status, found, body = answer(sock)
        assert status == 401 and found["www-authenticate"].startswith('Basic realm="floeline"')
        assert json.loads(body)["error_code"] == 401 and found["connection"] == "close"
        assert closed(sock)
    # A chunked body declaring 1 GiB, and 100-continue: 401, never "100 Continue".
    with raw(guarded.port, "PUT /connectors/x/config HTTP/1.1\nTransfer-Encoding: chunked\n"
                           "Expect: 100-continue\nAuthorization: " + basic("alice", "wrong") + "\n",
             b"40000000\r\n" + b"x" * 1000) as sock:
        assert answer(sock)[0] == 401
        assert closed(sock)
    # Without a body the connection stays open for the next request.
    with raw(guarded.port, "GET /connectors HTTP/1.1\n") as sock:
        assert answer(sock)[0] == 401
        sock.sendall(f"GET /connectors HTTP/1.1\r\nAuthorization: {basic(*ALICE)}\r\n\r\n".encode())
        assert answer(sock)[:3:2] == (200, b"[]")


def test_bodies_over_the_limit_are_413_before_or_while_they_are_read(guarded):
    auth = f"Authorization: {basic(*ALICE)}\n"
    with raw(guarded.port, f"POST /connectors HTTP/1.1\n{auth}Content-Length: {limits.MAX_BODY + 1}\n") as sock:
        status, _, body = answer(sock)  # nothing sent after the headers: refused from them
        assert status == 413 and "larger than" in json.loads(body)["message"]
        assert closed(sock)
    # A chunked body: 413 the moment the chunks pass the limit, while the client still sends.
    with raw(guarded.port, f"POST /connectors HTTP/1.1\n{auth}Transfer-Encoding: chunked\n") as sock:
        piece = b"100000\r\n" + b"x" * MB + b"\r\n"
        sent = 0
        try:
            for _ in range(64):
                sock.sendall(piece)
                sent += MB
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert answer(sock)[0] == 413
        assert limits.MAX_BODY <= sent + MB and sent < 64 * MB  # the client was cut off
    # 100-continue for a client that may send: then its body is read and answered.
    with raw(guarded.port, f"POST /connectors HTTP/1.1\n{auth}Content-Length: 2\nExpect: 100-continue\n") as sock:
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"{}")
        status, _, body = answer(sock)
        assert status == 400 and "no connector \"name\"" in json.loads(body)["message"]


@pytest.mark.parametrize("request_head, status", [
    ("BREW /connectors HTTP/1.1\n", 405),  # any method is routed: Connect's 405, not 501
    ("BREW /nowhere HTTP/1.1\n", 404),
    ("GET /connectors/x/tasks/" + "9" * 5000 + "/status HTTP/1.1\n", 404),
    ("GET http://[bad/connectors HTTP/1.1\n", 400),
    ("GET / HTTP/9.9\n", 505),
    ("GARBAGE\n", 400),
    ("GET / HTTP/1.1\n" + "X-Many: y\n" * 120, 431),
    ("GET / HTTP/1.1\nX-Big: " + "y" * 70000 + "\n", 431),
    ("POST /connectors HTTP/1.1\nContent-Length: 1\nContent-Length: 2\n", 400),
])
def test_malformed_requests_get_connects_error_body(guarded, request_head, status):
    auth = f"Authorization: {basic(*ALICE)}\n"
    first, _, rest = request_head.partition("\n")
    with raw(guarded.port, f"{first}\n{auth}{rest}") as sock:
        got, found, body = answer(sock)
        assert got == status
        assert json.loads(body)["error_code"] == status


def test_a_head_sent_a_byte_at_a_time_is_dropped(guarded, monkeypatch):
    monkeypatch.setattr(limits, "HEAD_S", 1.0)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", guarded.port), timeout=10) as sock:
        try:
            for byte in b"GET /connectors HTTP/1.1\r\nX-Slow: " + b"z" * 1000:
                sock.send(bytes([byte]))
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert closed(sock)
    assert time.monotonic() - started < 5


def test_connections_over_the_bound_get_503_at_once_and_a_freed_slot_serves_again():
    rest = RestServer({"listeners": "http://127.0.0.1:0", "floeline.worker.rest.max.connections": "2"},
                      InMemoryContractHerder()).start()
    try:
        held = [socket.create_connection(("127.0.0.1", rest.port)) for _ in range(2)]
        for sock in held:  # each served once, so each holds its slot (kept alive)
            sock.sendall(b"GET /health HTTP/1.1\r\n\r\n")
            assert answer(sock)[0] == 200
        started = time.monotonic()
        with raw(rest.port, "GET /health HTTP/1.1\n") as extra:
            status, found, body = answer(extra)
            assert status == 503 and found["retry-after"] == "1"
            assert "floeline.worker.rest.max.connections" in json.loads(body)["message"]
        assert time.monotonic() - started < 2
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the slot frees once its thread sees the close
            with raw(rest.port, "GET /health HTTP/1.1\n") as sock:
                status = answer(sock)[0]
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status == 200
        held[0].close()
    finally:
        rest.close()
