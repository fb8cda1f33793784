"""The one way floeline commits rows to a Delta table: the rows and the connector's
channel positions (warehouse/positions.py) in the same commit's userMetadata, after
the check that the table is still this connector's; a full disk is a StorageFull,
any other failure a TableError. Every path that commits uses it: the one-pass path,
the table sink, the SNOWPIPE sink, the error table and the load of staged files
(COPY, pipes), which puts its files' load history beside the positions; `merge` is
its sibling for insert.mode=upsert (a MERGE by primary key, same positions, same
failures), and `FilesCommit` for data files one job wrote for several tables
(shared_write.py: same positions, same failures).

Idempotence: the positions are the key. Each table holds, committed atomically with
its rows, the last position of every channel that wrote to it; a replayed batch is
filtered against them (its rows the table holds are dropped), whether Spark replays
the batch or its checkpoint was lost. Delta's own idempotent writes (txnAppId and
txnVersion) are deliberately not used: keyed by Spark's batch id, they would make
Delta silently skip every write of a query whose checkpoint was deleted (its batch
ids start again at 0), losing those rows."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

from floeline.errors import ServiceUnavailable, TableError, first_lines, storage_full
from floeline.records.content import quote_column
from floeline.spark import java_cause_is, java_class
from floeline.sources.base import Committed
from floeline.warehouse import checkpoints, load_history, rewrite_merge, tables
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.delta_jvm import register_metrics, scala_seq
from floeline.warehouse.load_history import FileLoad
from floeline.warehouse.positions import commit_entry
from floeline.warehouse.session_settings import USER_METADATA_SETTING, session_settings

# Delta's base class of the conflicts its optimistic commit reports (ConcurrentAppend,
# MetadataChanged, ProtocolChanged, ...): the commit did not happen and may be tried again.
# (ConcurrentAppendException and its kin descend from the io.delta.exceptions one.)
DELTA_CONFLICTS = ("org.apache.spark.sql.delta.DeltaConcurrentModificationException",
                   "io.delta.exceptions.DeltaConcurrentModificationException")
# The same conflicts by their error classes, as the message names them: a second way to
# know them when the Java exception cannot be reached.
DELTA_CONFLICT_CONDITIONS = re.compile(
    r"\[(DELTA_CONCURRENT_[A-Z_]+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED)(\.[A-Z_]+)?\]")


def commit(frame, ref: TableRef, connector: str | None, after: Committed | None,
           check_owned: Callable[[], None] | None = None, mode: str = "append", *,
           loads: list[FileLoad] | None = None, what: str | None = None,
           extra: dict | None = None, create: tables.NewTable | None = None) -> None:
    """Write `frame` to the table `ref` in one Delta commit (save mode `mode`) whose
    userMetadata holds `connector`'s positions `after` (the table's, once the commit
    is in; none when `connector` is None) and, for a load of staged files, `loads`
    (their load history); `extra`: more keys beside them (an offsets change's record,
    warehouse/offsets_changes.py). `check_owned` runs first (the table is still this
    connector's, and whatever the source needs). `what`: the failure's wording.
    `create`: the table does not exist yet and this append's commit creates it (when
    the frame's columns are exactly its columns; else CREATE TABLE first)."""
    if check_owned is not None:
        check_owned()
    what = what or f"writing to table {ref.full_name}"
    metadata = user_metadata(connector, after, loads)
    if extra:
        metadata = json.dumps({**json.loads(metadata), **extra})
    if create is not None and mode == "append":
        existed = tables.folder_exists(ref)
        try:
            if _append_creating(frame, ref, metadata, create):
                checkpoints.after_commit(frame.sparkSession, ref.path)
                return
        except Exception as exc:
            tables.discard_failed_creation(ref, existed)
            raise commit_failure(exc, what, ref) from exc
    if create is not None:
        tables.create_new_table(frame.sparkSession, ref, create)
    try:
        (frame.write.format("delta").mode(mode)
         .option("userMetadata", metadata).save(ref.path))
    except Exception as exc:
        raise commit_failure(exc, what, ref) from exc
    checkpoints.after_commit(frame.sparkSession, ref.path)


def _append_creating(frame, ref: TableRef, metadata: str, table: tables.NewTable) -> bool:
    """Create the table in the commit of its first rows, through Delta's transaction
    API (what CREATE TABLE AS SELECT does, minus its failure mode: a failed write
    leaves files but no log, so the table is still new to the next try). False, with
    nothing done, when the frame's columns are not exactly the table's (a plain
    append would refuse them) or the table exists by now."""
    from pyspark.sql.types import StructType

    spark = frame.sparkSession
    schema_json = table.schema_json(spark)
    wanted = StructType.fromJson(json.loads(schema_json))
    if sorted((f.name, f.dataType.simpleString()) for f in frame.schema) != sorted(
            (f.name, f.dataType.simpleString()) for f in wanted):
        return False
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, ref.path).startTransaction()
    if txn.readVersion() >= 0:
        return False
    txn.updateMetadataForNewTable(delta.actions.Action.fromJson(table.metadata_json(schema_json)))
    files = txn.writeFiles(frame._jdf)
    none = jvm.scala.Option.empty()
    # WRITE (mode Append) with the userMetadata, as the DataFrame append records it.
    operation = delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none, none,
                                            jvm.scala.Option.apply(metadata), none, none, none, none, none)
    txn.commit(files, operation)
    return True


class FilesCommit:
    """One table's commit of data files another write made (shared_write.py), with the
    positions in its userMetadata as `commit` puts them. Started before the files are
    written: `usable` says whether the table takes them as they are (else the caller
    writes the table's rows with `commit`). Usable: a new table created by this commit
    (`create`) or an existing one, whose columns include `fields` ((name, type) pairs:
    the files' columns; a column they lack reads as NULL, as after schema evolution),
    all nullable, with nothing a plain Parquet file would skip (no column
    metadata: defaults, identities, generated columns, constraints, comments; no column
    mapping, partitions or CHECK constraints; no custom statistics columns)."""

    def __init__(self, spark, ref: TableRef, fields: list[tuple[str, str]],
                 create: tables.NewTable | None = None):
        self.spark, self.ref, self.create = spark, ref, create
        delta_log = java_class(spark, "org.apache.spark.sql.delta.DeltaLog")
        self._txn = delta_log.forTable(spark._jsparkSession, ref.path).startTransaction()
        if self._txn.readVersion() < 0:
            self._schema_json = create.schema_json(spark) if create is not None else None
            self.usable = (self._schema_json is not None
                           and reads_files_of(plain_fields(json.loads(self._schema_json)), fields))
        else:
            self.create = None
            metadata = json.loads(self._txn.metadata().json())["metaData"]
            configuration = metadata.get("configuration") or {}
            self.usable = (not metadata.get("partitionColumns")
                           and not any(k.startswith(_SETTINGS_A_FILE_WRITE_SKIPS) for k in configuration)
                           and configuration.get("delta.columnMapping.mode", "none") == "none"
                           and reads_files_of(plain_fields(json.loads(metadata["schemaString"])), fields))

    def commit(self, adds: list[dict], connector: str, after: Committed,
               check_owned: Callable[[], None] | None = None) -> None:
        """Commit the add actions `adds` (files already in the table's folder) with
        `connector`'s positions `after`: one Delta commit, failures as `commit`'s."""
        if check_owned is not None:
            check_owned()
        spark = self.spark
        action = java_class(spark, "org.apache.spark.sql.delta.actions.Action")
        option = java_class(spark, "scala.Option")
        try:
            if self.create is not None:
                self._txn.updateMetadataForNewTable(
                    action.fromJson(self.create.metadata_json(self._schema_json)))
            actions = [action.fromJson(json.dumps({"add": add})) for add in adds]
            self._register_metrics(adds)
            none = option.empty()
            operation = java_class(spark, "org.apache.spark.sql.delta.DeltaOperations$Write")(
                java_class(spark, "org.apache.spark.sql.SaveMode").Append, none, none,
                option.apply(user_metadata(connector, after)), none, none, none, none, none)
            self._txn.commit(scala_seq(spark, actions), operation)
        except Exception as exc:
            raise commit_failure(exc, f"writing to table {self.ref.full_name}", self.ref) from exc
        checkpoints.after_commit(self.spark, self.ref.path)


    def _register_metrics(self, adds: list[dict]) -> None:
        """The commit's operationMetrics as an append's (files, rows, bytes), which
        DESCRIBE HISTORY shows: the write that counted them was another transaction's."""
        register_metrics(self.spark, self._txn, {
            "numFiles": len(adds), "numOutputBytes": sum(int(a.get("size") or 0) for a in adds),
            "numOutputRows": sum(int(json.loads(a.get("stats") or "{}").get("numRecords", 0)) for a in adds)})


# Table settings whose tables a file written without them would break.
_SETTINGS_A_FILE_WRITE_SKIPS = ("delta.constraints.", "delta.dataSkipping")


def plain_fields(schema: dict) -> list[tuple[str, str]] | None:
    """(name, type) of a Delta schema's fields when each is nullable and has no
    metadata; else None."""
    fields = schema.get("fields", [])
    if any(not f.get("nullable", True) or f.get("metadata") for f in fields):
        return None
    return [(f["name"], json.dumps(f["type"])) for f in fields]


def reads_files_of(table_fields: list[tuple[str, str]] | None, fields: list[tuple[str, str]]) -> bool:
    """Whether a table with `table_fields` (None: not plain) reads files of `fields`."""
    return table_fields is not None and bool(fields) and set(fields) <= set(table_fields)


def plain_fields_of(frame) -> list[tuple[str, str]]:
    """The (name, type) pairs of a DataFrame's columns, as FilesCommit compares them."""
    return [(f["name"], json.dumps(f["type"])) for f in json.loads(frame.schema.json())["fields"]]


def merge(source, ref: TableRef, connector: str, after: Committed,
          check_owned: Callable[[], None] | None, keys: list[tuple[str, str]],
          columns: list[tuple[str, str]], delete: str, what: str | None = None,
          materialized: bool = False, truncate: bool = False) -> None:
    """MERGE `source` into the table `ref` by primary key in one Delta commit whose
    userMetadata holds `connector`'s positions `after`, as `commit` does for appends
    (same ownership check first, same failures). `keys` and `columns`: (table column,
    source column) pairs, the key's and every column a source row gives (keys
    included); `delete`: the source's boolean column marking a delete. A matched key
    is deleted or updated, an unmatched one inserted unless it is a delete; `truncate`:
    every row of the table no source row matches is deleted too (a truncate).

    `materialized`: `source` is already computed and held (a local checkpoint), so it
    may be read more than once: a plain table then takes rewrite_merge.py's MERGE
    (2 Spark jobs, the table's file list kept in memory), any other Delta's MERGE
    statement without its own copy of the source (merge.materializeSource). Delta's
    MERGE takes no userMetadata option: the session setting is set for the statement
    (session_settings.py)."""
    if check_owned is not None:
        check_owned()
    what = what or f"merging into table {ref.full_name}"
    metadata = user_metadata(connector, after)
    if materialized and not truncate:
        try:
            if rewrite_merge.rewrite_merge(source, ref, keys, columns, delete, metadata):
                return
        except Exception as exc:
            raise commit_failure(exc, what, ref) from exc
    session = source.sparkSession
    view = f"floeline_merge_{uuid.uuid4().hex}"
    source.createOrReplaceTempView(view)
    try:
        settings = {USER_METADATA_SETTING: metadata}
        if materialized:
            settings[_MATERIALIZE_SOURCE_SETTING] = "none"
        with session_settings(session, settings):
            session.sql(merge_sql(ref.path, view, keys, columns, delete, truncate))
    except Exception as exc:
        raise commit_failure(exc, what, ref) from exc
    finally:
        session.catalog.dropTempView(view)
    checkpoints.after_commit(session, ref.path)


def merge_sql(path: str, view: str, keys: list[tuple[str, str]], columns: list[tuple[str, str]],
              delete: str, truncate: bool = False) -> str:
    """The MERGE statement of `merge`: matched and a delete -> DELETE; matched -> UPDATE
    the non-key columns; not matched and not a delete -> INSERT; with `truncate`, a row
    of the table that no source row matches -> DELETE."""
    on = " AND ".join(f"t.{quote_column(c)} = s.{quote_column(s)}" for c, s in keys)
    key_names = {c for c, _s in keys}
    updates = ", ".join(f"t.{quote_column(c)} = s.{quote_column(s)}" for c, s in columns
                        if c not in key_names)
    inserted = ", ".join(quote_column(c) for c, _s in columns)
    values = ", ".join(f"s.{quote_column(s)}" for _c, s in columns)
    update = f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else ""
    return (f"MERGE INTO delta.{quote_column(path)} AS t USING {quote_column(view)} AS s ON {on} "
            f"WHEN MATCHED AND s.{quote_column(delete)} THEN DELETE {update}"
            f"WHEN NOT MATCHED AND NOT s.{quote_column(delete)} THEN INSERT ({inserted}) VALUES ({values})"
            + (" WHEN NOT MATCHED BY SOURCE THEN DELETE" if truncate else ""))


_MATERIALIZE_SOURCE_SETTING = "spark.databricks.delta.merge.materializeSource"


def commit_failure(exc: BaseException, what: str, ref: TableRef) -> Exception:
    """The error a failed commit raises: StorageFull, ServiceUnavailable (a conflict
    with a concurrent commit: transient) or TableError."""
    full = storage_full(exc, what, ref.path)
    if full is not None:
        return full
    if java_cause_is(exc, DELTA_CONFLICTS) or DELTA_CONFLICT_CONDITIONS.search(str(exc)):
        return ServiceUnavailable(f"{what}: another commit to the table came first "
                                  f"({first_lines(str(exc), 2)}); nothing of this batch was "
                                  f"committed, so it is tried again")
    return TableError(f"{what} failed: {first_lines(str(exc))}")


def user_metadata(connector: str | None, after: Committed | None,
                  loads: list[FileLoad] | None = None) -> str:
    """A commit's userMetadata: the positions, with the load history of a load."""
    positions = commit_entry(connector, after) if connector is not None else {}
    if loads is not None:
        return load_history.commit_metadata(loads, positions)
    return json.dumps(positions)

