"""The warehouse: a directory of Delta tables laid out as <root>/<DATABASE>/<SCHEMA>/<TABLE>,
on a local disk or under an S3 prefix (s3a://bucket/prefix; storage.py).

There is no metastore: the directory tree is the catalog, so any process (a second
`floeline sql` while a connector writes) sees the same tables without a lock."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from floeline.config import locations
from floeline.config.locations import S3Settings
from floeline.errors import TableError
from floeline.warehouse import storage

# A folder name has at most this many bytes on common filesystems (ext4, xfs, tmpfs).
_MAX_FOLDER_BYTES = 255


def folder_name(name: str) -> str:
    """The folder of a database, schema or table name. Snowflake's quoted names may hold
    any character, so the few a path would read as structure are %-encoded ("/", "\\",
    "%", and a name that is "." or ".." or starts with "." or "_"): no name can reach
    outside its schema's folder or the warehouse or be one of floeline's own folders
    (_stages, _pipes, _checkpoints: a table named _STAGES is the folder %5FSTAGES), and
    every other name is its own folder."""
    if not name or "\0" in name:
        raise TableError(f"a database, schema or table name cannot be empty or hold a NUL "
                         f"character ({name!r})")
    folder = name.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C")
    if folder.startswith("."):
        folder = "%2E" + folder[1:]
    elif folder.startswith("_"):  # floeline's own folders (_stages, _checkpoints) start so
        folder = "%5F" + folder[1:]
    if len(folder.encode()) > _MAX_FOLDER_BYTES:
        raise TableError(f"name {name[:40]!r}... is {len(name)} characters: a database, schema or table "
                         f"name makes a folder of at most {_MAX_FOLDER_BYTES} bytes; choose a shorter one "
                         f"(snowflake.topic2table.map for a topic's table)")
    return folder


def name_of_folder(folder: str) -> str:
    """folder_name's inverse."""
    from urllib.parse import unquote

    return unquote(folder) if "%" in folder else folder


# A table's bad records go, when there is no dead-letter queue, to its error table
# `<TABLE>_ERRORS` beside it (ingest/bad_records.py).
ERROR_TABLE_SUFFIX = "_ERRORS"
CHANGES_TABLE_SUFFIX = "_CHANGES"  # insert.mode=upsert with floeline.cdc.changes.table: the change log


@dataclass(frozen=True)
class TableRef:
    """A table's full name and where its Delta files live."""

    database: str
    schema: str
    name: str
    path: str

    @property
    def full_name(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"


class Warehouse:
    """The tables, definitions and checkpoints under one root location. `s3`: how to
    reach an s3a:// root (default: the AWS environment variables)."""

    def __init__(self, root: str | os.PathLike, s3: S3Settings | None = None):
        self.location = locations.normalize(root)
        self.s3 = s3
        self.storage = storage.storage_for(self.location, s3)

    @property
    def is_local(self) -> bool:
        return not locations.is_s3(self.location)

    @property
    def root(self) -> Path:
        """The local directory of the warehouse, for what works on a local warehouse
        only (internal stages, the SNOWPIPE method); an S3 warehouse says so."""
        if not self.is_local:
            raise TableError(f"warehouse {self.location} is on S3: this needs a local warehouse "
                             f"(internal stages and snowflake.ingestion.method=SNOWPIPE keep their "
                             f"files in a local warehouse only)")
        return Path(self.location)

    def path(self, *parts: str) -> str:
        """A location under the warehouse's root."""
        return locations.join(self.location, *parts)

    def storage_for(self, location: str) -> storage.Storage:
        """The storage of another location (a checkpoint), with the warehouse's S3 settings."""
        if locations.is_s3(location) == (not self.is_local):
            return self.storage  # one S3 client for the warehouse and its checkpoints
        return storage.storage_for(location, self.s3)

    def prepare_spark(self, spark, *locations: str) -> None:
        """Let `spark` read and write the warehouse (and `locations`, e.g. a checkpoint
        elsewhere): for S3, the bucket's endpoint and credentials as s3a settings."""
        for location in (self.location, *locations):
            self.storage_for(location).prepare_spark(spark, location)

    def schema_path(self, database: str, schema: str, *parts: str) -> str:
        """A location under a schema's folder (the names encoded by folder_name)."""
        return self.path(folder_name(database), folder_name(schema), *parts)

    def local_schema_dir(self, database: str, schema: str, *parts: str) -> Path:
        """A local directory under a schema's folder (internal stages): see `root`."""
        return self.root.joinpath(folder_name(database), folder_name(schema), *parts)

    def table(self, database: str, schema: str, name: str) -> TableRef:
        """The table DATABASE.SCHEMA.NAME (names as stored: already normalized)."""
        return TableRef(database, schema, name, self.schema_path(database, schema, folder_name(name)))

    def is_table(self, ref: TableRef) -> bool:
        """True when the table's Delta log exists."""
        return self.storage.is_dir(locations.join(ref.path, "_delta_log"))

    def error_table(self, ref: TableRef) -> TableRef:
        """The error table beside `ref`."""
        return self.table(ref.database, ref.schema, ref.name + ERROR_TABLE_SUFFIX)

    def changes_table(self, ref: TableRef) -> TableRef:
        """The change log beside `ref` (floeline.cdc.changes.table)."""
        return self.table(ref.database, ref.schema, ref.name + CHANGES_TABLE_SUFFIX)

    def list_tables(self) -> list[TableRef]:
        """Every Delta table in the warehouse, sorted by full name."""
        found = []
        for db in self._subdirs(self.location):
            for schema in self._subdirs(self.path(db)):
                for table in self._subdirs(self.path(db, schema)):
                    ref = self.table(name_of_folder(db), name_of_folder(schema), name_of_folder(table))
                    if self.is_table(ref):  # one small request on S3, however many files
                        found.append(ref)
        return sorted(found, key=lambda t: t.full_name)

    def schemas(self) -> list[tuple[str, str]]:
        """(database, schema) of every schema folder, sorted."""
        return [(name_of_folder(db), name_of_folder(schema)) for db in self._subdirs(self.location)
                for schema in self._subdirs(self.path(db))]

    def _subdirs(self, location: str) -> list[str]:
        return [n for n in self.storage.children(location)[0] if not n.startswith(("_", "."))]

    def resolve(self, parts: list[str], quoted: list[bool] | None = None) -> TableRef:
        """The table named by TABLE, SCHEMA.TABLE or DB.SCHEMA.TABLE. An exact match
        wins; an unquoted part also matches case-insensitively (Snowflake uppercases
        unquoted names, so `orders` finds ORDERS). Ambiguity is an error."""
        quoted = quoted or [False] * len(parts)
        candidates = self.list_tables()
        for level, (part, is_quoted) in enumerate(zip(reversed(parts), reversed(quoted))):
            def field(t: TableRef) -> str:
                return (t.name, t.schema, t.database)[level]

            exact = [t for t in candidates if field(t) == part]
            candidates = exact if (exact or is_quoted) else [
                t for t in candidates if field(t).upper() == part.upper()]
        wanted = ".".join(parts)
        if not candidates:
            known = ", ".join(t.full_name for t in self.list_tables()) or "none"
            raise TableError(f"table {wanted} not found in warehouse {self.location} (tables: {known})")
        if len(candidates) > 1:
            names = ", ".join(t.full_name for t in candidates)
            raise TableError(f"table name {wanted} is ambiguous ({names}): qualify it as DB.SCHEMA.TABLE")
        return candidates[0]

