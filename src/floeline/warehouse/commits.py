"""The one way floeline commits rows to a Delta table: the rows and the connector's
channel positions in the same commit, as txn actions (position_txns.py: Delta's
checkpoints keep them) and in its userMetadata (positions.py: DESCRIBE HISTORY shows
them), after the check that the table is still this connector's; a full disk is a StorageFull,
any other failure a TableError. Every path that commits uses it: the one-pass path,
the table sink, the SNOWPIPE sink, the error table and the load of staged files
(COPY, pipes), which puts its files' load history beside the positions; `merge` is
its sibling for insert.mode=upsert (a MERGE by primary key, same positions, same
failures), and `FilesCommits` for data files one job wrote for several tables
(shared_write.py: same positions, same failures).

Idempotence: the positions are the key. Each table holds, committed atomically with
its rows, the last position of every channel that wrote to it; a replayed batch is
filtered against them (its rows the table holds are dropped), whether Spark replays
the batch or its checkpoint was lost. Delta's own idempotent writes (the txnAppId and
txnVersion write options) are deliberately not used: keyed by Spark's batch id, they
would make Delta silently skip every write of a query whose checkpoint was deleted
(its batch ids start again at 0), losing those rows. The txn actions here are only
written, never compared by Delta: every commit goes through a transaction of our own
(`append` runs the DataFrame writer's own WriteIntoDelta in it) so that they are in
the same commit as the rows."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable

from floeline.errors import ServiceUnavailable, TableError, first_lines, storage_full
from floeline.jvm import TABLE_COMMITS_CLASS
from floeline.records.content import quote_column
from floeline.spark import java_cause_is, java_class
from floeline.sources.base import Committed
from floeline.warehouse import checkpoints, clustering, load_history, rewrite_merge, tables
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.load_history import FileLoad
from floeline.warehouse.delta_jvm import scala_map, scala_seq, txn_actions
from floeline.warehouse.position_txns import txn_entries
from floeline.warehouse.positions import commit_entry
from floeline.warehouse.session_settings import USER_METADATA_SETTING, session_settings

log = logging.getLogger("floeline")

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
           check_owned: Callable[[], None] | None = None, *,
           loads: list[FileLoad] | None = None, what: str | None = None,
           extra: dict | None = None, create: tables.NewTable | None = None) -> None:
    """Append `frame` to the table `ref` in one Delta commit that holds `connector`'s
    positions `after` (the table's, once the commit is in; none when `connector` is
    None) and whose userMetadata holds them and, for a load of staged files, `loads`
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
    positions = (connector, after) if connector is not None else None
    if create is not None:
        existed = tables.folder_exists(ref)
        try:
            if _append_creating(frame, ref, metadata, create, positions):
                checkpoints.after_commit(frame.sparkSession, ref.path)
                return
        except Exception as exc:
            tables.discard_failed_creation(ref, existed)
            raise commit_failure(exc, what, ref) from exc
        tables.create_new_table(frame.sparkSession, ref, create)
    try:
        _append(frame, ref, metadata, positions)
    except Exception as exc:
        raise commit_failure(exc, what, ref) from exc
    checkpoints.after_commit(frame.sparkSession, ref.path)


def _append(frame, ref: TableRef, metadata: str, positions: tuple[str, Committed] | None) -> None:
    """What `frame.write.format("delta").mode("append").option("userMetadata", ...)
    .save(path)` does (Delta's WriteIntoDelta: the table's schema rules, constraints,
    generated and identity columns), in a transaction whose commit also holds the
    positions' txn actions."""
    spark = frame.sparkSession
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    none = jvm.scala.Option.empty()
    append = jvm.org.apache.spark.sql.SaveMode.Append
    log = delta.DeltaLog.forTable(spark._jsparkSession, ref.path)
    txn = log.startTransaction()
    options = delta.DeltaOptions(scala_map(spark, {"userMetadata": metadata}),
                                 spark._jsparkSession.sessionState().conf())
    with clustering.in_transaction_order(frame, txn) as rows:  # CLUSTER BY: rows in key order
        write = delta.commands.WriteIntoDelta(log, append, options, scala_seq(spark, []), scala_map(spark, {}),
                                              rows._jdf, none, none, False)
        data = write.writeAndReturnCommitData(txn, spark._jsparkSession, none, False)
    actions = data.actions()
    if positions is not None:
        actions = actions.appendedAll(txn_actions(spark, txn_entries(*positions, txn.readVersion() + 1)))
    operation = delta.DeltaOperations.Write(append, none, none, jvm.scala.Option.apply(metadata),
                                            none, none, none, none, none)
    txn.commitIfNeeded(actions, operation, data.stringTags())


def _append_creating(frame, ref: TableRef, metadata: str, table: tables.NewTable,
                     positions: tuple[str, Committed] | None) -> bool:
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
    if positions is not None:
        files = files.appendedAll(txn_actions(spark, txn_entries(*positions, 0)))
    none = jvm.scala.Option.empty()
    # WRITE (mode Append) with the userMetadata, as the DataFrame append records it.
    operation = delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none, none,
                                            jvm.scala.Option.apply(metadata), none, none, none, none, none)
    txn.commit(files, operation)
    return True


class FilesCommits:
    """The commits of data files one write made for several tables (shared_write.py),
    each table's with the positions in its userMetadata as `commit` puts them, one
    py4j call each (resources/TableCommits.java: in Python a commit took about 40), and
    the positions' txn actions in the same commit.
    Started before the files are written, as a Delta write's transaction is, so a
    commit conflicts with what another writer committed meanwhile. `usable[i]`:
    whether table i takes the files as they are (else the caller writes the tables'
    rows with `commit`): a new table created by its commit (`creations[i]`) or an
    existing one whose columns include `fields` ((name, type) pairs: the files'
    columns; a column they lack reads as NULL, as after schema evolution), all
    nullable, with nothing a plain Parquet file would skip (no column metadata:
    defaults, identities, generated columns, constraints, comments; no column mapping,
    partitions or CHECK constraints; no custom statistics columns)."""

    def __init__(self, spark, refs: list[TableRef], java_commits, creations: list[tables.NewTable | None],
                 fields: list[tuple[str, str]]):
        self.spark, self.refs, self._java = spark, refs, java_commits
        self.creations, self.usable, self._schemas, self._read_versions = [], [], [], []
        for table, create in zip(json.loads(java_commits.tables()), creations):
            self._read_versions.append(table["readVersion"])
            if table["readVersion"] < 0:
                schema_json = create.schema_json(spark) if create is not None else None
                self.creations.append(create)
                self._schemas.append(schema_json)
                self.usable.append(schema_json is not None
                                   and reads_files_of(plain_fields(json.loads(schema_json)), fields))
            else:
                self.creations.append(None)
                self._schemas.append(None)
                self.usable.append(_takes_plain_files(table["metaData"], fields))

    @classmethod
    def start(cls, spark, refs: list[TableRef], fields: list[tuple[str, str]],
              creations: list[tables.NewTable | None], threads: int) -> FilesCommits | None:
        """Start the tables' transactions (`threads` at a time); None when the session
        has no floeline table commits jar (spark.py: set-up builds it)."""
        from py4j.protocol import Py4JError, Py4JJavaError

        paths = json.dumps([ref.path for ref in refs])  # (one string: a Java array is a call per element)
        try:
            java_commits = java_class(spark, TABLE_COMMITS_CLASS).start(spark._jsparkSession, paths, threads)
        except Py4JJavaError as exc:
            raise TableError(f"starting the commits of {len(refs)} tables failed: {first_lines(str(exc))}; "
                             f"nothing of the batch was committed") from exc
        except Py4JError as exc:  # no such class: the jar is not in the session
            log.info("no floeline table commits in this session (%s): tables are written one by one",
                     first_lines(str(exc), 1))
            return None
        return cls(spark, refs, java_commits, creations, fields)

    def commit(self, index: int, files, connector: str, after: Committed,
               check_owned: Callable[[], None] | None = None) -> None:
        """Move `files` (shared_write.StagedFile: where each is, its add action) into
        table `index`'s folder and commit them with `connector`'s positions `after`:
        one Delta commit, failures as `commit`'s."""
        if check_owned is not None:
            check_owned()
        ref, create = self.refs[index], self.creations[index]
        adds = [f.add for f in files]
        request = {
            "folder": ref.path,
            "files": [{"source": f.source, "add": f.add} for f in files],
            "metaData": json.loads(create.metadata_json(self._schemas[index])) if create is not None else None,
            "userMetadata": user_metadata(connector, after),
            "txns": txn_entries(connector, after, self._read_versions[index] + 1),
            # The commit's operationMetrics as an append's, which DESCRIBE HISTORY shows:
            # the write that counted them was another transaction's.
            "metrics": {"numFiles": len(adds), "numOutputBytes": sum(int(a.get("size") or 0) for a in adds),
                        "numOutputRows": sum(int(json.loads(a.get("stats") or "{}").get("numRecords", 0))
                                             for a in adds)},
        }
        try:
            done = json.loads(self._java.commit(index, json.dumps(request)))
        except Exception as exc:
            raise commit_failure(exc, f"writing to table {ref.full_name}", ref) from exc
        checkpoints.after_commit_of(self.spark, ref.path, done["id"], done["version"],
                                    done["checkpointVersion"], done["interval"])


def _takes_plain_files(metadata: dict, fields: list[tuple[str, str]]) -> bool:
    """Whether an existing table (its metaData action) reads files of `fields` written
    without its settings (see FilesCommits)."""
    configuration = metadata.get("configuration") or {}
    return (not metadata.get("partitionColumns")
            and not any(k.startswith(_SETTINGS_A_FILE_WRITE_SKIPS) for k in configuration)
            and tables.CLUSTER_BY_PROPERTY not in configuration  # its rows go in key order
            and configuration.get("delta.columnMapping.mode", "none") == "none"
            and reads_files_of(plain_fields(json.loads(metadata["schemaString"])), fields))


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
    """The (name, type) pairs of a DataFrame's columns, as FilesCommits compares them."""
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
    (session_settings.py). Nor can its commit take more than one txn action: the
    positions' txn actions follow in a commit of their own (`_commit_txns`). Until they
    do, the MERGE's userMetadata is newer than them and is what a start reads
    (positions.committed_in_log); were they never written and the log cleaned up
    since, a start would replay the last MERGE, which by primary key (last change
    wins) leaves the table as it is."""
    if check_owned is not None:
        check_owned()
    what = what or f"merging into table {ref.full_name}"
    metadata = user_metadata(connector, after)
    if materialized and not truncate:
        try:
            if rewrite_merge.rewrite_merge(source, ref, keys, columns, delete, metadata, (connector, after)):
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
    try:
        _commit_txns(session, ref, metadata, connector, after)
    except Exception as exc:
        raise commit_failure(exc, f"{what} (recording its positions as txn actions)", ref) from exc
    checkpoints.after_commit(session, ref.path)


def _commit_txns(spark, ref: TableRef, metadata: str, connector: str, after: Committed) -> None:
    """A commit of no rows holding `connector`'s positions `after` as txn actions (and
    `metadata` as its userMetadata)."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    none = jvm.scala.Option.empty()
    txn = delta.DeltaLog.forTable(spark._jsparkSession, ref.path).startTransaction()
    operation = delta.DeltaOperations.Write(jvm.org.apache.spark.sql.SaveMode.Append, none, none,
                                            jvm.scala.Option.apply(metadata), none, none, none, none, none)
    txn.commit(txn_actions(spark, txn_entries(connector, after, txn.readVersion() + 1)), operation)


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

