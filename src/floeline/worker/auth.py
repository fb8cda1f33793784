"""Optional HTTP Basic authentication for the worker's REST API.

Users live in a file named by the worker key `rest.auth.users.file`, one per line:

    USER:scrypt$N$r$p$SALT$HASH

(SALT and HASH base64, HASH = scrypt(password, SALT, N, r, p)); blank lines and lines
starting with `#` are skipped. `floeline worker-passwd USER` prints such a line for a
password read from the terminal (or stdin). Passwords are never stored, only salted
hashes; a request's password is hashed the same way and compared in constant time, and
an unknown user costs the same hash as a known one, so timing tells nothing. A hash
holds 16 MB while it runs, so at most _HASHES_AT_ONCE run at once: many clients sending
wrong passwords together wait their turn instead of multiplying the worker's memory.
The file is read once when the REST server starts."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from pathlib import Path

from floeline.errors import ConfigError

USERS_FILE_KEY = "rest.auth.users.file"
REALM = "floeline"
# scrypt's cost: 2**14 x 8 x 1 (16 MB, ~50 ms a check), the interactive-login figures.
_N, _R, _P = 2 ** 14, 8, 1
_SCHEME = "scrypt"
_VERIFIED_KEPT = 256
_HASHES_AT_ONCE = 2


def hash_password(password: str, salt: bytes | None = None, n: int = _N, r: int = _R, p: int = _P) -> str:
    """The stored form of `password`: scrypt$N$r$p$SALT$HASH."""
    salt = os.urandom(16) if salt is None else salt
    digest = _scrypt(password, salt, n, r, p)
    return "$".join([_SCHEME, str(n), str(r), str(p), _b64(salt), _b64(digest)])


def user_line(user: str, password: str) -> str:
    """A line of the users file."""
    if not user or ":" in user or user != user.strip():
        raise ConfigError(f"user name {user!r} cannot be used: it must be non-empty, without ':' "
                          f"and without leading or trailing blanks")
    if not password:
        raise ConfigError("the password is empty; give one")
    return f"{user}:{hash_password(password)}"


class Users:
    """The users of a users file, checked against a request's credentials."""

    def __init__(self, entries: dict[str, tuple[int, int, int, bytes, bytes]], source: str = ""):
        self._entries, self.source = entries, source
        self._decoy = (_N, _R, _P, b"floeline-decoy-s", _scrypt("", b"floeline-decoy-s", _N, _R, _P))
        # Headers already verified, as a keyed hash (never the password): a client that
        # sends the same credentials on every call pays scrypt once, not per request.
        self._key = os.urandom(32)
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._hashing = threading.BoundedSemaphore(_HASHES_AT_ONCE)

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, user: str, password: str) -> bool:
        """True when `user` is listed and `password` is theirs. Constant time in the
        password; an unknown user is hashed against a decoy so it costs the same."""
        n, r, p, salt, expected = self._entries.get(user, self._decoy)
        with self._hashing:
            digest = _scrypt(password, salt, n, r, p)
        return hmac.compare_digest(digest, expected) and user in self._entries

    def check_header(self, header: str | None) -> bool:
        """True when an `Authorization: Basic ...` header names a user and their password."""
        if not header or not header[:6].lower() == "basic ":
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        seen = hmac.new(self._key, header.encode("utf-8"), "sha256").digest()
        with self._lock:
            if seen in self._verified:
                self._verified.move_to_end(seen)
                return True
        if not (sep and self.check(user, password)):
            return False
        with self._lock:
            self._verified[seen] = None
            while len(self._verified) > _VERIFIED_KEPT:
                self._verified.popitem(last=False)
        return True


def load_users(path: str | os.PathLike) -> Users:
    """The users of the file at `path`; a ConfigError names the file, line and fix."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{USERS_FILE_KEY}={path}: cannot read the users file "
                          f"({exc.strerror or exc})") from None
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, _, stored = line.partition(":")
        parsed = _parse(stored)
        if not user or parsed is None:
            raise ConfigError(f"{USERS_FILE_KEY}={path} line {number} is not `USER:scrypt$N$r$p$SALT$HASH`; "
                              f"make the line with `floeline worker-passwd USER`")
        entries[user] = parsed
    if not entries:
        raise ConfigError(f"{USERS_FILE_KEY}={path} lists no user, so nobody could call the REST API; "
                          f"add one with `floeline worker-passwd USER >> {path}`")
    return Users(entries, str(path))


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes] | None:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != _SCHEME:
        return None
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except ValueError:
        return None
    if n < 2 or n & (n - 1) or r < 1 or p < 1 or not salt or len(digest) != 32:
        return None
    return n, r, p, salt, digest


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          maxmem=256 * n * r * p + 2 ** 20, dklen=32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
