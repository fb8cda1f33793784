"""Pipes: how a record becomes a row of a table, stored in the warehouse.

Snowflake's rule, which the connector follows: a pipe named exactly like the target
table (identifier comparison: the stored names are equal) is the user-defined pipe
for that table; an interactive table carries its own transformation; otherwise the
connector uses the default pipe `{TABLE}-STREAMING` (first-level keys -> columns by
name, case-insensitively), which is not stored.

Definitions are JSON files next to the tables, written whole (a local temp file +
os.replace, or one S3 PUT: storage.py) so a connector in another process never reads
half a file:
  <warehouse>/<DB>/<SCHEMA>/_pipes/<PIPE>.json        CREATE PIPE
  <warehouse>/<DB>/<SCHEMA>/_interactive/<TABLE>.json  CREATE INTERACTIVE TABLE
File names are the stored names, percent-encoded. `pipe_for_table` is called by the
connector every micro-batch: it stats two files (on S3: two HEADs) and re-reads one
only when it was replaced (a new inode, mtime or size; a new ETag), so a new or
replaced pipe takes effect from the next micro-batch.

Column contract (for the connector): `columns` are positional, in the table's column
order at CREATE time. If the table later gains columns (ALTER TABLE ADD COLUMN or
schema evolution), the pipe has fewer columns than the table: the missing trailing
columns get NULL.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
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


def _file(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> str:
    folder = PIPES_DIR if kind == "pipe" else INTERACTIVE_DIR
    return warehouse.schema_path(database, schema, folder, quote(name, safe="") + ".json")


def save(warehouse: Warehouse, pipe: Pipe, database: str, schema: str) -> None:
    """Store the pipe under DATABASE.SCHEMA (the pipe's own schema), whole."""
    warehouse.storage.write_text(_file(warehouse, database, schema, pipe.kind, pipe.name), pipe.to_json())


def load(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> Pipe | None:
    """The stored pipe (kind "pipe") or interactive transformation named exactly `name`."""
    return _cached(warehouse, _file(warehouse, database, schema, kind, name))


def delete(warehouse: Warehouse, database: str, schema: str, kind: str, name: str) -> bool:
    return warehouse.storage.delete(_file(warehouse, database, schema, kind, name))


def definition_files(warehouse: Warehouse, folder: str) -> list[tuple[str, str, str]]:
    """(database, schema, location) of every `*.json` in DB/SCHEMA/<folder>/ (pipes,
    stages, file formats), sorted."""
    found = []
    for database, schema in warehouse.schemas():
        where = warehouse.schema_path(database, schema, folder)
        for name in warehouse.storage.children(where)[1]:
            if name.endswith(".json") and not name.startswith("."):
                found.append((database, schema, warehouse.schema_path(database, schema, folder, name)))
    return found


def list_stored(warehouse: Warehouse, kind: str = "pipe") -> list[tuple[str, str, Pipe]]:
    """(database, schema, pipe) of every stored pipe of `kind`, sorted by full name."""
    folder = PIPES_DIR if kind == "pipe" else INTERACTIVE_DIR
    found = []
    for database, schema, location in definition_files(warehouse, folder):
        pipe = _cached(warehouse, location)
        if pipe is not None:
            found.append((database, schema, pipe))
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


_cache: dict[str, tuple[object, Pipe]] = {}
_lock = threading.Lock()


def _cached(warehouse: Warehouse, location: str) -> Pipe | None:
    """The pipe at `location`, re-read only when the file was replaced since last time."""
    key = warehouse.storage.version(location)
    if key is None:
        return None
    with _lock:
        hit = _cache.get(location)
    if hit is not None and hit[0] == key:
        return hit[1]
    text = warehouse.storage.read_text(location)
    if text is None:
        return None  # dropped between stat and read
    try:
        pipe = Pipe.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise SqlError(f"pipe definition {location} is unreadable ({exc}); recreate it with "
                       f"CREATE OR REPLACE PIPE") from exc
    with _lock:
        _cache[location] = (key, pipe)
    return pipe
