"""Pipes: how a record becomes a row of a table, stored in the warehouse.

Snowflake's rule, which the connector follows: a pipe named exactly like the target
table (identifier comparison: the stored names are equal) is the user-defined pipe
for that table; an interactive table carries its own transformation; otherwise the
connector uses the default pipe `{TABLE}-STREAMING` (first-level keys -> columns by
name, case-insensitively), which is not stored.

Definitions are JSON files next to the tables, written atomically (temp file +
os.replace) so a connector in another process never reads half a file:
  <warehouse>/<DB>/<SCHEMA>/_pipes/<PIPE>.json        CREATE PIPE
  <warehouse>/<DB>/<SCHEMA>/_interactive/<TABLE>.json  CREATE INTERACTIVE TABLE
File names are the stored names, percent-encoded. `pipe_for_table` is called by the
connector every micro-batch: it stats two files and re-reads one only when it was
replaced (a new inode, mtime or size), so a new or replaced pipe takes effect from the
next micro-batch.

Column contract (for the connector): `columns` are positional, in the table's column
order at CREATE time. If the table later gains columns (ALTER TABLE ADD COLUMN or
schema evolution), the pipe has fewer columns than the table: the missing trailing
columns get NULL.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from floeline.errors import SqlError
from floeline.warehouse.catalog import Warehouse

PIPES_DIR = "_pipes"
INTERACTIVE_DIR = "_interactive"
DEFAULT_PIPE_SUFFIX = "-STREAMING"
_FORMAT = 1


@dataclass(frozen=True)
class PipeColumn:
    """One target column's value, as Spark SQL over the batch's columns `v` (the record
    content as VARIANT, NULL for a tombstone) and `_meta` (RECORD_METADATA as VARIANT).

    value_sql: the value, of any type; the connector casts it to the column's type and
      reports a failed cast as a row error.
    error_sql: a non-NULL message for a row whose value failed (a strict cast of "abc"
      to NUMBER, TO_NUMBER('x'), ...), NULL when fine; None when nothing can fail. A
      failed strict conversion leaves value_sql NULL, so error_sql must be checked."""

    value_sql: str
    error_sql: str | None = None


@dataclass(frozen=True)
class Pipe:
    """A stored transformation. `table` is the target table's stored name, in the
    database/schema `database`.`schema`; `kind` is "pipe" (CREATE PIPE) or
    "interactive" (CREATE INTERACTIVE TABLE, whose name is the table's)."""

    name: str
    table: str
    kind: str
    sql: str
    columns: tuple[PipeColumn, ...]
    database: str = ""
    schema: str = ""
    # A pipe that loads staged files (CREATE PIPE ... AS COPY INTO t FROM @stage): the
    # load's settings (stage, path, pattern, file_format, on_error, match_by_column_name,
    # auto_ingest, refreshed_ms); None for a streaming pipe.
    copy: dict | None = None

    @property
    def loads_files(self) -> bool:
        return self.copy is not None

    def to_json(self) -> str:
        data = asdict(self)
        data["format"] = _FORMAT
        return json.dumps(data, ensure_ascii=False, indent=1)

    @staticmethod
    def from_json(text: str) -> "Pipe":
        data = json.loads(text)
        data.pop("format", None)
        data["columns"] = tuple(PipeColumn(**c) for c in data["columns"])
        return Pipe(**data)


def default_pipe_name(table: str) -> str:
    return table + DEFAULT_PIPE_SUFFIX


def _file(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> Path:
    folder = PIPES_DIR if kind == "pipe" else INTERACTIVE_DIR
    return warehouse.root / database / schema / folder / (quote(name, safe="") + ".json")


def save(warehouse: Warehouse, pipe: Pipe, database: str, schema: str) -> None:
    """Store the pipe under DATABASE.SCHEMA (the pipe's own schema), atomically."""
    write_atomically(_file(warehouse, database, schema, pipe.kind, pipe.name), pipe.to_json())


def write_atomically(path: Path, text: str) -> None:
    """Write a definition file so that a reader sees the old or the new one, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> Pipe | None:
    """The stored pipe (kind "pipe") or interactive transformation named exactly `name`."""
    return _cached(_file(warehouse, database, schema, kind, name))


def delete(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> bool:
    path = _file(warehouse, database, schema, kind, name)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def list_stored(warehouse: Warehouse, kind: str = "pipe") -> list[tuple[str, str, Pipe]]:
    """(database, schema, pipe) of every stored pipe of `kind`, sorted by full name."""
    folder = PIPES_DIR if kind == "pipe" else INTERACTIVE_DIR
    found = []
    if not warehouse.root.is_dir():
        return found
    for path in sorted(warehouse.root.glob(f"*/*/{folder}/*.json")):
        pipe = _cached(path)
        if pipe is not None:
            found.append((path.parent.parent.parent.name, path.parent.parent.name, pipe))
    return sorted(found, key=lambda f: (f[0], f[1], f[2].name))


def pipe_for_table(warehouse: Warehouse, database: str, schema: str, table: str) -> Pipe | None:
    """The transformation the connector applies to rows for DATABASE.SCHEMA.TABLE
    (stored names): the interactive table's own, else the user-defined pipe named
    exactly like the table (and copying into it); None means the default pipe
    `{TABLE}-STREAMING`. Needs no SparkSession; cheap enough for every micro-batch."""
    interactive = load(warehouse, database, schema, "interactive", table)
    if interactive is not None:
        return interactive
    pipe = load(warehouse, database, schema, "pipe", table)
    if pipe is not None and not pipe.loads_files and (
            pipe.table, pipe.database, pipe.schema) == (table, database, schema):
        return pipe
    return None


_cache: dict[str, tuple[tuple[int, int, int], Pipe]] = {}
_lock = threading.Lock()


def _cached(path: Path) -> Pipe | None:
    """The pipe in `path`, re-read only when the file was replaced since last time."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _lock:
        hit = _cache.get(str(path))
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        pipe = Pipe.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None  # dropped between stat and read
    except (ValueError, KeyError, TypeError) as exc:
        raise SqlError(f"pipe definition {path} is unreadable ({exc}); recreate it with "
                       f"CREATE OR REPLACE PIPE") from exc
    with _lock:
        _cache[str(path)] = (key, pipe)
    return pipe
