"""One Iceberg table kept in files alone, without a catalog service: the Iceberg side of
a Delta table's mirror (iceberg_mirror.py).

pyiceberg commits through a catalog. The catalogs it offers need a service (REST, Hive,
Glue) or SQLAlchemy (SqlCatalog); a table's own folder needs neither: each commit writes
a new `<n>-<uuid>.metadata.json` and then swaps `metadata/version-hint.text` to name it,
the "Hadoop" layout Iceberg readers open from the folder alone (pyiceberg's
`StaticTable.from_metadata(folder)`, Spark's and DuckDB's Iceberg readers by path).
One writer per table is assumed: the connector that owns it (warehouse/owners.py).
The rename of the hint file is atomic on a local file system; local warehouses only.

The commit reuses pyiceberg's MetastoreCatalog._update_and_stage_table (requirements
checked, updates applied, the new metadata's location chosen), pinned with pyiceberg's
version in requirements.lock."""

from __future__ import annotations

import os

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import CommitTableResponse, StaticTable, Table

HINT = "version-hint.text"
_IDENTIFIER = ("floeline", "mirror")


def metadata_dir(location: str) -> str:
    return os.path.join(location, "metadata")


def exists(location: str) -> bool:
    """Whether an Iceberg table's metadata is at `location`."""
    return os.path.exists(os.path.join(metadata_dir(location), HINT))


def read_table(location: str) -> StaticTable:
    """The table's current metadata, as any reader opens it (read only)."""
    return StaticTable.from_metadata(location)


class FolderCatalog(MetastoreCatalog):
    """The one Iceberg table at `location`, committed by writing its metadata files."""

    def __init__(self, location: str):
        super().__init__("floeline-folder")
        self.location = location.rstrip("/")

    def load_table(self, identifier=None) -> Table:
        if not exists(self.location):
            raise NoSuchTableError(self.location)
        static = read_table(self.location)
        return Table(_IDENTIFIER, static.metadata, static.metadata_location, static.io, catalog=self)

    def create_table(self, identifier, schema, location=None, partition_spec=None, sort_order=None,
                     properties=None) -> Table:
        self.create_table_transaction(_IDENTIFIER, schema, location=self.location,
                                      properties=properties or {}).commit_transaction()
        return self.load_table()

    def commit_table(self, table, requirements, updates) -> CommitTableResponse:
        current = self.load_table() if exists(self.location) else None
        staged = self._update_and_stage_table(current, _IDENTIFIER, requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        if staged.io.new_output(staged.metadata_location).exists():
            raise CommitFailedException(f"Iceberg metadata file {staged.metadata_location} exists: "
                                        "another writer committed to this table")
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        hint = os.path.join(metadata_dir(self.location), HINT)
        with open(hint + ".tmp", "w") as out:
            out.write(os.path.basename(staged.metadata_location))
        os.replace(hint + ".tmp", hint)
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    # A single table's folder has no namespaces, views or other tables.
    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("a folder catalog holds one table")

    drop_namespace = view_exists = drop_view = register_table = update_namespace_properties = _unsupported
    list_namespaces = create_namespace = drop_table = load_namespace_properties = _unsupported
    list_views = load_view = rename_table = register_view = list_tables = _unsupported
