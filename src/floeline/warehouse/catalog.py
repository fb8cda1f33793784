"""The warehouse: a directory of Delta tables laid out as <root>/<DATABASE>/<SCHEMA>/<TABLE>.

There is no metastore: the directory tree is the catalog, so any process (a second
`floeline sql` while a connector writes) sees the same tables without a lock."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from floeline.errors import TableError

# A table's bad records go, when there is no dead-letter queue, to its error table
# `<TABLE>_ERRORS` beside it (ingest/bad_records.py).
ERROR_TABLE_SUFFIX = "_ERRORS"


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
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().absolute()

    def table(self, database: str, schema: str, name: str) -> TableRef:
        """The table DATABASE.SCHEMA.NAME (names as stored: already normalized)."""
        return TableRef(database, schema, name, str(self.root / database / schema / name))

    def error_table(self, ref: TableRef) -> TableRef:
        """The error table beside `ref`."""
        return self.table(ref.database, ref.schema, ref.name + ERROR_TABLE_SUFFIX)

    def list_tables(self) -> list[TableRef]:
        """Every Delta table in the warehouse, sorted by full name."""
        found = []
        if not self.root.is_dir():
            return found
        for db in _subdirs(self.root):
            for schema in _subdirs(db):
                for table in _subdirs(schema):
                    if (table / "_delta_log").is_dir():
                        found.append(self.table(db.name, schema.name, table.name))
        return sorted(found, key=lambda t: t.full_name)

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
            raise TableError(f"table {wanted} not found in warehouse {self.root} (tables: {known})")
        if len(candidates) > 1:
            names = ", ".join(t.full_name for t in candidates)
            raise TableError(f"table name {wanted} is ambiguous ({names}): qualify it as DB.SCHEMA.TABLE")
        return candidates[0]


def _subdirs(path: Path) -> list[Path]:
    return [p for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(("_", "."))]
