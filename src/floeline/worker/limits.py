"""What a client may make the REST listener read, and for how long.

The listener is safe to expose only if a client without credentials cannot make the
worker hold memory or threads: its credentials are checked from the headers before a
body byte is read (rest.py), and what is read is bounded here:

- a request's head (request line and headers) arrives within HEAD_S of its first byte
  and is at most HEAD_BYTES: a client sending headers a byte at a time (slowloris) is
  dropped, not waited for;
- its body arrives within BODY_S of its head and is at most MAX_BODY bytes: a
  Content-Length over the limit is refused before a byte is read, a chunked body the
  moment its chunks pass the limit (a chunk's size is checked before its data is read);
- a connection silent for IDLE_S (between requests too) is dropped.

Bodies are read in pieces as they arrive, so a client that declares 16 MB and sends a
byte costs a byte, not a 16 MB buffer."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Mapping

MAX_BODY = 16 * 1024 * 1024
HEAD_BYTES = 64 * 1024
HEAD_S = 10.0
BODY_S = 60.0
IDLE_S = 30.0
_PIECE = 64 * 1024
_CHUNK_LINE = 1024
_TRAILERS = 64
_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}")


class Unreadable(Exception):
    """The request cannot be read (bad framing): 400, and the connection is closed."""


class BodyTooLarge(Exception):
    """The body is over the limit: 413, and the connection is closed."""


class HeadTooLarge(Exception):
    """The request line and headers are over HEAD_BYTES: 431, and the connection is closed."""


def framing(headers: Mapping[str, str], limit: int = MAX_BODY) -> int | None:
    """How the body is framed, checked before any of it is read: its length, or None
    when chunked. Framing a server could read two ways (Transfer-Encoding and
    Content-Length both, two different lengths) is refused, as request smuggling
    relies on it."""
    encoding = ", ".join(v.lower() for v in _values(headers, "Transfer-Encoding"))
    lengths = set(_values(headers, "Content-Length"))
    if encoding:
        if encoding != "chunked":
            raise Unreadable(f"Transfer-Encoding {encoding!r} is not supported; send the body with "
                             f"Content-Length or Transfer-Encoding: chunked")
        if lengths:
            raise Unreadable("the request has both Transfer-Encoding and Content-Length; send one")
        return None
    if len(lengths) > 1:
        raise Unreadable("the request has several different Content-Length headers; send one")
    text = lengths.pop() if lengths else "0"
    if not (text.isascii() and text.isdigit()):
        raise Unreadable(f"Content-Length {text[:40]!r} is not a number of bytes")
    if len(text) > 15 or int(text) > limit:
        raise BodyTooLarge(too_large(limit))
    return int(text)


def declares_body(headers: Mapping[str, str]) -> bool:
    """True when the request may be followed by a body (unless every Content-Length it
    gives is 0 and it has no Transfer-Encoding): left unread, the connection must close."""
    return "Transfer-Encoding" in headers or not set(_values(headers, "Content-Length")) <= {"0"}


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header `name` (a header may be repeated)."""
    given = headers.get_all(name) if hasattr(headers, "get_all") else [headers.get(name)]
    return [v.strip() for v in given or [] if v is not None]


def too_large(limit: int) -> str:
    return f"The request body is larger than {limit} bytes, the most the worker reads"


def read_body(rfile, length: int | None, limit: int = MAX_BODY) -> bytes:
    """The body of `length` bytes, or of chunks when `length` is None."""
    return read_chunked(rfile, limit) if length is None else read_exactly(rfile, length)


def read_exactly(rfile, length: int) -> bytes:
    """`length` bytes, read in pieces as they arrive; a body cut off is Unreadable."""
    pieces, count = [], 0
    while count < length:
        piece = rfile.read(min(_PIECE, length - count))
        if not piece:
            raise Unreadable(f"the request body ended after {count} of {length} bytes")
        pieces.append(piece)
        count += len(piece)
    return b"".join(pieces)


def read_chunked(rfile, limit: int = MAX_BODY) -> bytes:
    """A chunked body (RFC 9112 7.1): each chunk's size is checked against what is left
    of `limit` before its data is read; extensions and trailers are skipped."""
    pieces, count = [], 0
    while True:
        line = rfile.readline(_CHUNK_LINE + 1)
        size_text = line.split(b";", 1)[0].strip()
        if not line.endswith(b"\n") or not _CHUNK_SIZE.fullmatch(size_text):
            raise Unreadable(f"malformed chunked request body: chunk size line {bytes(line[:40])!r}")
        size = int(size_text, 16)
        if size == 0:
            _skip_trailers(rfile)
            return b"".join(pieces)
        if count + size > limit:
            raise BodyTooLarge(too_large(limit))
        pieces.append(read_exactly(rfile, size))
        count += size
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise Unreadable("malformed chunked request body: a chunk's data is not followed by CRLF")


def _skip_trailers(rfile) -> None:
    for _ in range(_TRAILERS):
        line = rfile.readline(_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            raise Unreadable("malformed chunked request body: a trailer is cut off or too long")
        if not line.strip():
            return
    raise Unreadable(f"the chunked request body has more than {_TRAILERS} trailers")


class ClockedSocket(io.RawIOBase):
    """A connection's socket as the handler reads it, with the clocks and the head's
    byte budget of the module doc. `await_request()` before each request,
    `read_body()` once its head is parsed."""

    def __init__(self, sock):
        self.sock = sock
        self.idle_s, self.head_s, self.body_s, self.head_bytes = IDLE_S, HEAD_S, BODY_S, HEAD_BYTES
        self.await_request()

    def readable(self) -> bool:
        return True

    def await_request(self) -> None:
        self._phase, self._deadline, self._head_read = "idle", None, 0

    def read_body(self) -> None:
        self._phase, self._deadline = "body", time.monotonic() + self.body_s

    def readinto(self, buffer) -> int:
        timeout = self.idle_s
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the request's {self._phase} did not arrive in time")
            timeout = min(timeout, left)
        view = memoryview(buffer)
        if self._phase != "body":
            if self._head_read >= self.head_bytes:
                raise HeadTooLarge(f"the request line and headers are larger than {self.head_bytes} bytes")
            view = view[:self.head_bytes - self._head_read]
        self.sock.settimeout(timeout)
        count = self.sock.recv_into(view)
        if self._phase == "idle" and count:
            self._phase, self._deadline = "head", time.monotonic() + self.head_s
        if self._phase == "head":
            self._head_read += count
        return count
