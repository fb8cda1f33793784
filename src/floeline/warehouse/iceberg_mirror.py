"""Iceberg metadata over a Delta table's own Parquet files, so Iceberg readers open the
tables a connector writes when its config asks for Iceberg tables
(snowflake.autocreate.table.type=iceberg, snowflake.streaming.iceberg.enabled=true).

Delta UniForm would write this metadata itself, with its converter jar (delta-iceberg),
which is built for Spark 4.0 only and not served for the Spark and Delta floeline runs
on (iceberg_tables.py). So floeline writes it: after each batch, `mirror(table)` makes the
Iceberg table's current snapshot hold exactly the Delta snapshot's data files, the same
Parquet files, none rewritten (one Iceberg snapshot per mirrored Delta version: files
Delta removed, by a MERGE or OPTIMIZE, are deleted, files it added appended), and its
schema follow the Delta schema (new columns by name; widened numbers). It reads the
Delta log without Spark (delta_log.py); the Iceberg table lives in `<table>/_iceberg`
(its `metadata/` folder), where Delta's VACUUM does not look (a folder starting with
`_`), and records the Delta version it mirrors in its properties, so a mirror cut short
by a crash is completed by the next call: the Delta table holds the truth.

What Iceberg cannot hold as Delta writes it is refused, naming the table and the fix,
instead of mirrored into a table that reads wrong: partition columns (Delta leaves them
out of the files), deletion vectors (rows deleted outside the files), column mapping
(the files' column names and ids are Delta's own), VARIANT, VOID and interval columns,
and INT96 timestamps (the session writes TIMESTAMP_MICROS, spark.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from floeline.errors import TableError
from floeline.warehouse import delta_log

# The folder, inside the Delta table's, that holds the Iceberg table's metadata.
ICEBERG_DIR = "_iceberg"
# The Iceberg table property holding the Delta version its current snapshot mirrors.
DELTA_VERSION_PROPERTY = "floeline.delta.version"
# ... and the digest of the Delta schema its schema follows: the schema is evolved only
# when Delta's changed (Iceberg's Arrow form differs from Delta's in string and list kinds).
DELTA_SCHEMA_PROPERTY = "floeline.delta.schema"
# Old metadata files and snapshots kept: a reader that opened the table just before a
# commit still finds its files (Delta's VACUUM keeps removed data files 7 days by default).
KEEP_METADATA_FILES = 20
KEEP_SNAPSHOTS = 20
TABLE_PROPERTIES = {
    "format-version": "2",
    # Manifests merged as they accumulate: a commit costs about the same after 1,000 of them.
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(KEEP_METADATA_FILES),
}
# The snapshot properties naming the Delta version each Iceberg snapshot mirrors.
SNAPSHOT_DELTA_VERSION = "delta.version"

_PRIMITIVES = {"string": "string", "long": "int64", "integer": "int32", "short": "int32", "byte": "int32",
               "float": "float32", "double": "float64", "boolean": "bool_", "binary": "binary",
               "date": "date32", "timestamp": "timestamp_tz", "timestamp_ntz": "timestamp"}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


class IcebergMirrorError(TableError):
    """A Delta table whose files Iceberg metadata cannot describe as they are."""


@dataclass(frozen=True)
class Mirrored:
    """What one mirror call did: the Delta version the Iceberg snapshot now mirrors, and
    the data files it appended and deleted (0 and 0: already in step)."""

    delta_version: int
    appended: int
    deleted: int


def iceberg_location(table_path: str) -> str:
    return os.path.join(_local(table_path), ICEBERG_DIR)


def _local(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def arrow_schema(delta_schema: dict, table: str):
    """The pyarrow schema of a Delta schema (its metaData.schemaString, parsed)."""
    import pyarrow as pa

    def convert(kind, where: str):
        if isinstance(kind, str):
            decimal = _DECIMAL.match(kind)
            if decimal:
                return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
            name = _PRIMITIVES.get(kind)
            if name is None:
                raise IcebergMirrorError(
                    f"table {table}: column {where} is {kind.upper()}, a type Iceberg tables cannot hold; "
                    "Iceberg tables keep semi-structured values as JSON text (remove "
                    "floeline.variant.storage=variant), or write this table without Iceberg")
            if name == "timestamp_tz":
                return pa.timestamp("us", tz="UTC")
            if name == "timestamp":
                return pa.timestamp("us")
            return getattr(pa, name)()
        if kind["type"] == "struct":
            return pa.struct([field(f, f"{where}.{f['name']}") for f in kind["fields"]])
        if kind["type"] == "array":
            return pa.list_(pa.field("element", convert(kind["elementType"], f"{where}[]"),
                                     kind.get("containsNull", True)))
        if kind["type"] == "map":
            return pa.map_(convert(kind["keyType"], f"{where} key"),
                           pa.field("value", convert(kind["valueType"], f"{where} value"),
                                    kind.get("valueContainsNull", True)))
        raise IcebergMirrorError(f"table {table}: column {where} has a type Iceberg cannot hold: {kind}")

    def field(f: dict, where: str):
        return pa.field(f["name"], convert(f["type"], where), f.get("nullable", True))

    return pa.schema([field(f, f["name"]) for f in delta_schema["fields"]])


def _refusals(table: str, metadata: dict, adds: list[dict]) -> None:
    """Raise for a Delta table whose files Iceberg metadata cannot describe as they are."""
    fix = "write this table without Iceberg (remove snowflake.autocreate.table.type=iceberg)"
    if metadata.get("partitionColumns"):
        raise IcebergMirrorError(
            f"table {table} is partitioned by {metadata['partitionColumns']}: Delta keeps partition values "
            f"out of its files, so Iceberg readers would read them as null; {fix}, or recreate it unpartitioned "
            "(CLUSTER BY keeps point queries fast)")
    mode = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise IcebergMirrorError(
            f"table {table} uses Delta column mapping ({mode}): its files name columns by Delta's own ids, "
            f"which Iceberg metadata cannot map; {fix}, or rename the columns Delta holds only with column "
            "mapping (spaces, commas, semicolons, braces, parentheses, '=')")
    if any(add.get("deletionVector") for add in adds):
        raise IcebergMirrorError(
            f"table {table} has deletion vectors (rows deleted outside its files), which Iceberg readers "
            f"would not apply; set delta.enableDeletionVectors=false and rewrite its files (REORG TABLE ... APPLY (PURGE)), or {fix}")


def _file_path(table_dir: str, path: str) -> str:
    """A Delta add's path as a local absolute path."""
    if "://" in path or path.startswith("file:"):
        return _local(unquote(path))
    return os.path.join(table_dir, unquote(path))


def _data_file(table, path: str, size: int):
    """The Iceberg DataFile of one of the Delta table's Parquet files, with statistics
    from its footer (Iceberg readers prune files by them, as Delta's readers do)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (compute_statistics_plan, data_file_statistics_from_parquet_metadata,
                                      parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata = table.metadata
    footer = pq.read_metadata(path)
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(metadata.schema(), metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(metadata.schema()))
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=stats.partition(metadata.spec(), metadata.schema()), file_size_in_bytes=size,
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **stats.to_serialized_dict())


def _current_files(table) -> dict:
    """The data files of the Iceberg table's current snapshot, by path."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    return {entry.data_file.file_path: entry.data_file
            for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}


def _name_mapping(schema) -> dict[str, str]:
    # Delta's files carry no Iceberg field ids: readers find the columns by name.
    return {"schema.name-mapping.default": schema.name_mapping.model_dump_json()}


def mirror_if_iceberg(table_path: str, table: str | None = None) -> Mirrored | None:
    """`mirror` for a table that has Iceberg metadata (a connector made it an Iceberg
    table), after a statement that rewrote its files (OPTIMIZE, VACUUM): Iceberg
    readers then see the files Delta keeps, not the ones it removed. None otherwise."""
    if not os.path.isdir(iceberg_location(table_path)):
        return None
    return mirror(table_path, table)


def mirror(table_path: str, table: str | None = None) -> Mirrored:
    """Bring the Iceberg metadata of the Delta table at `table_path` (a local path) in
    step with its current Delta snapshot. `table`: its name in messages."""
    from pyiceberg.exceptions import NoSuchTableError

    from floeline.warehouse.iceberg_files import FolderCatalog

    table = table or table_path
    table_dir = _local(table_path)
    actions, version = delta_log.snapshot_actions(table_dir, ("add", "remove", "metaData"))
    if version < 0:
        raise IcebergMirrorError(f"table {table}: no Delta table at {table_path}")
    metadata: dict = {}
    live: dict[tuple, dict] = {}  # by path and deletion vector, as Delta identifies a file
    for action in actions:
        if "metaData" in action:
            metadata = action["metaData"]
        elif "add" in action:
            live[delta_log.file_key(action["add"])] = action["add"]
        elif "remove" in action:
            live.pop(delta_log.file_key(action["remove"]), None)
    _refusals(table, metadata, list(live.values()))
    schema = arrow_schema(json.loads(metadata["schemaString"]), table)
    schema_digest = hashlib.sha256(metadata["schemaString"].encode()).hexdigest()

    # pyiceberg's transactions update `iceberg` in place: no reload between them.
    catalog = FolderCatalog(iceberg_location(table_dir))
    try:
        iceberg = catalog.load_table()
    except NoSuchTableError:
        iceberg = catalog.create_table(None, schema, properties=TABLE_PROPERTIES)
        with iceberg.transaction() as tx:
            tx.set_properties({**_name_mapping(iceberg.schema()), DELTA_SCHEMA_PROPERTY: schema_digest})
    if iceberg.properties.get(DELTA_VERSION_PROPERTY) == str(version):
        return Mirrored(version, 0, 0)

    files = {_file_path(table_dir, add["path"]): add for add in live.values()}
    current = _current_files(iceberg)
    deleted = [current[path] for path in current.keys() - files.keys()]
    if iceberg.properties.get(DELTA_SCHEMA_PROPERTY) != schema_digest:
        with iceberg.transaction() as tx:
            with tx.update_schema() as update:
                update.union_by_name(schema)
            tx.set_properties({**_name_mapping(tx.table_metadata.schema()), DELTA_SCHEMA_PROPERTY: schema_digest})
    appended = [_data_file(iceberg, path, int(files[path].get("size") or os.path.getsize(path)))
                for path in sorted(files.keys() - current.keys())]
    with iceberg.transaction() as tx:
        update = tx.update_snapshot(snapshot_properties={SNAPSHOT_DELTA_VERSION: str(version)})
        if deleted:
            with update.overwrite() as overwrite:
                for data_file in deleted:
                    overwrite.delete_data_file(data_file)
                for data_file in appended:
                    overwrite.append_data_file(data_file)
        elif appended:
            with update.merge_append() as append:
                for data_file in appended:
                    append.append_data_file(data_file)
        tx.set_properties({DELTA_VERSION_PROPERTY: str(version)})
    _expire_old_snapshots(iceberg)
    return Mirrored(version, len(appended), len(deleted))


def _expire_old_snapshots(table) -> None:
    """Keep the newest KEEP_SNAPSHOTS snapshots (metadata only: the data files are the
    Delta table's, which Delta's VACUUM deletes)."""
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    if len(snapshots) > KEEP_SNAPSHOTS * 2:  # in steps, not a commit per batch
        table.maintenance.expire_snapshots().by_ids(
            [s.snapshot_id for s in snapshots[:-KEEP_SNAPSHOTS]]).commit()
