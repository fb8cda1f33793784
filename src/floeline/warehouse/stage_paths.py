"""A path inside a stage: what `@stage/path`, FILES=(...) and a file's name may be, so
that a load, a LIST or a pipe reads the files under the stage's URL and nothing else.

A stage path is relative to the stage's URL (or an internal stage's folder). It may
not step out of it: no `.` or `..` segment (also not %-encoded, `%2e%2e`, which a URL
reader would decode), no leading `/` (an absolute path), no NUL. Such a path is an
error naming the stage and the path, never a silent empty result. Listing cannot leave
the stage either (names come from walking its folder or listing its prefix), and a
local stage's symbolic links are followed only while they stay inside it
(stage_store.py)."""

from __future__ import annotations

from urllib.parse import unquote

from floeline.errors import SqlError

_FIX = ("a stage path is relative to the stage's URL and cannot leave it: name files and "
        "folders under the stage, or create a stage for the other location")


def _decoded(text: str) -> str:
    """`text` %-decoded until it no longer changes (`%252e` is `%2e` is `.`)."""
    for _ in range(5):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def why_outside(path: str, as_written: bool = True) -> str | None:
    """Why `path` (relative to a stage) would leave the stage, or None when it stays
    inside. `/` and `\\` both separate segments (a Windows-style `..\\x` is refused too).
    `as_written`: a path a statement gives, %-decoded for the check; False for a name
    the store itself listed, whose `%` is a plain character (a file named `%2e%2e` is
    just that, and must not make the whole stage unreadable)."""
    if "\x00" in path:
        return "it holds a NUL character"
    decoded = _decoded(path) if as_written else path
    if decoded.startswith(("/", "\\")):
        return "it is an absolute path"
    segments = decoded.replace("\\", "/").split("/")
    if any(s in (".", "..") for s in segments):
        return "it has a '..' or '.' segment" if decoded == path else \
            "it has a %-encoded '..' or '.' segment"
    return None


def inside_stage(path: str, stage: str, what: str = "path", as_written: bool = True) -> str:
    """`path` when it stays inside the stage named `stage`; else a SqlError naming the
    stage, the path and the fix. `what`: how it was given (path, FILES entry, file)."""
    reason = why_outside(path, as_written)
    if reason is not None:
        raise SqlError(f"stage {stage}: {what} {path!r} is outside the stage ({reason}); {_FIX}")
    return path
