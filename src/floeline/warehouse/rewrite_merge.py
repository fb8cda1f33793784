"""A MERGE by primary key as one Delta transaction of our own: find the table's files
that hold a key of the batch (one semi-join over the key columns), rewrite those files
with the batch's changes (one full outer join, written by the transaction), commit the
removed and added files with the positions. What Delta's MERGE does for the statement
commits.merge_sql builds, in 2 Spark jobs instead of its 11 (issue 27).

Why: measured on a steady batch of 180,000 change events over 100,000 keys
(bench/profile_merge.py), Delta's MERGE took 3.8-4.4 s: three jobs to rebuild the
table's file list for its snapshot, five to find the touched files, three to rewrite
them, and about 0.2 s of planning around each. This takes 1.3-1.8 s. The table's file
list is kept in memory from one commit to the next (the connector is the table's one
writer): a version that is not the one this process committed is read from the log.

Only for a plain table (`usable`): no partitions, no column mapping, no deletion
vectors, no change data feed or row tracking, no constraints, no column defaults,
identities or generated columns, no auto compaction. Any other table takes Delta's
MERGE, which knows them all."""

from __future__ import annotations

import json
import threading
import time
import uuid

from floeline.records.content import quote_column
from floeline.sources.base import Committed
from floeline.spark import java_class
from floeline.warehouse import checkpoints
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.delta_jvm import python_list, register_metrics, scala_seq, txn_actions
from floeline.warehouse.position_txns import txn_entries
from floeline.warehouse.session_settings import USER_METADATA_SETTING, session_settings

# Table settings a rewrite by this module keeps right (floeline's own, and ones that do
# not change what a commit writes). Any other (delta.enableChangeDataFeed,
# delta.enableDeletionVectors=true, delta.constraints.*, ...) takes Delta's MERGE.
_PLAIN_SETTINGS = ("floeline.", "delta.checkpointInterval", "delta.logRetentionDuration",
                   "delta.deletedFileRetentionDuration", "delta.checkpoint.")
_SETTINGS_OFF = {"delta.enableDeletionVectors": "false", "delta.enableChangeDataFeed": "false",
                 "delta.enableRowTracking": "false", "delta.autoOptimize.autoCompact": "false",
                 "delta.columnMapping.mode": "none"}


class TableFiles:
    """A table's live data files at one version: Delta's AddFile objects in a JVM list
    (what a DataFrame over them takes) and by file name. Kept up to date by the
    commit's removes and adds, so a batch costs py4j calls per file it touches, not
    per file the table has."""

    def __init__(self, spark, version: int, files):
        self.version = version
        self.jvm_list = java_class(spark, "java.util.ArrayList")(files)
        self.by_name = {_file_name(f.path()): f for f in python_list(self.jvm_list)}

    def has_deletion_vectors(self) -> bool:
        return any(f.deletionVector() is not None for f in self.by_name.values())

    def committed(self, version: int, removed: list, added: list) -> None:
        for f in removed:
            self.jvm_list.remove(self.by_name.pop(_file_name(f.path())))
        for f in added:
            self.jvm_list.add(f)
            self.by_name[_file_name(f.path())] = f
        self.version = version


def _file_name(path: str) -> str:
    """A data file's name: unpartitioned (usable), a file's path in the log is its
    name, URL-encoded as the file's URI is."""
    return path.rsplit("/", 1)[-1]


class _KnownFiles:
    """Each table's TableFiles at the version this process last committed, so the
    next MERGE needs no Spark job to list them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._files: dict[str, tuple[object, TableFiles]] = {}

    def get(self, spark, path: str, version: int) -> TableFiles | None:
        with self._lock:
            known = self._files.get(path)
        if known is None or known[0] is not spark.sparkContext._gateway or known[1].version != version:
            return None
        return known[1]

    def put(self, spark, path: str, files: TableFiles) -> None:
        with self._lock:
            self._files[path] = (spark.sparkContext._gateway, files)

    def forget(self, path: str) -> None:
        with self._lock:
            self._files.pop(path, None)


known_files = _KnownFiles()


def usable(metadata: dict) -> bool:
    """Whether a table with Delta metadata `metadata` (its metaData action) is plain
    enough for `rewrite_merge`."""
    configuration = metadata.get("configuration") or {}
    if metadata.get("partitionColumns"):
        return False
    for key, value in configuration.items():
        if key in _SETTINGS_OFF:
            if str(value).lower() != _SETTINGS_OFF[key]:
                return False
        elif not key.startswith(_PLAIN_SETTINGS):
            return False
    fields = json.loads(metadata["schemaString"]).get("fields", [])
    return bool(fields) and not any(f.get("metadata") for f in fields)


def rewrite_merge(source, ref: TableRef, keys: list[tuple[str, str]], columns: list[tuple[str, str]],
                  delete: str, user_metadata: str, positions: tuple[str, Committed] | None = None) -> bool:
    """MERGE `source` into `ref` as commits.merge describes (same `keys`, `columns`,
    `delete`; one source row per key), in one commit with `user_metadata` and the txn
    actions of `positions` (a connector and its positions after the commit). False,
    with nothing done, when the table is not plain (`usable`) or lacks a column the
    source gives; Delta's MERGE is then the way."""
    spark = source.sparkSession
    none = java_class(spark, "scala.Option").empty()
    delta_log = java_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, ref.path)
    txn = delta_log.startTransaction()
    version = txn.readVersion()
    metadata = json.loads(txn.metadata().json())["metaData"]
    if version < 0 or not usable(metadata):
        return False
    snapshot = txn.snapshot()
    started = time.time()
    files = known_files.get(spark, ref.path, version)
    if files is None:
        files = TableFiles(spark, version, snapshot.allFiles().collectAsList())
        if files.has_deletion_vectors():
            return False
    table_columns = {f["name"].lower() for f in json.loads(metadata["schemaString"])["fields"]}
    if any(c.lower() not in table_columns for c, _s in columns):
        return False
    txn.readWholeTable()  # a concurrent commit of rows this MERGE could have matched conflicts
    touched = _touched_files(spark, delta_log, snapshot, files, source, keys)
    scanned = time.time()
    rows, observed = _merged_rows(_frame(spark, delta_log.createDataFrame(
        snapshot, scala_seq(spark, touched), False, none)), source, keys, columns, delete)
    added = python_list(txn.writeFiles(rows._jdf))
    counts = observed.get
    now = java_class(spark, "java.lang.System").currentTimeMillis()
    removed = [f.removeWithTimestamp(now, True) for f in touched]
    operation = java_class(spark, "org.apache.spark.sql.delta.DeltaOperations$Merge")(
        none, none, none, none, scala_seq(spark, []), scala_seq(spark, []), scala_seq(spark, []))
    _merge_metrics(spark, txn, operation, counts, touched, added, {
        "executionTimeMs": time.time() - started, "scanTimeMs": scanned - started,
        "rewriteTimeMs": time.time() - scanned})
    known_files.forget(ref.path)
    with session_settings(spark, {USER_METADATA_SETTING: user_metadata}):
        actions = scala_seq(spark, removed + added)
        if positions is not None:
            actions = actions.appendedAll(txn_actions(spark, txn_entries(*positions, version + 1)))
        committed = txn.commit(actions, operation)
    files.committed(committed, touched, added)
    known_files.put(spark, ref.path, files)
    checkpoints.after_commit(spark, ref.path)
    return True


def _touched_files(spark, delta_log, snapshot, files: TableFiles, source, keys: list[tuple[str, str]]) -> list:
    """The files among `files` holding a key of `source`: one job over the key columns."""
    from pyspark.sql import functions as F

    if not files.by_name:
        return []
    none = java_class(spark, "scala.Option").empty()
    converters = java_class(spark, "scala.jdk.javaapi.CollectionConverters")
    table = _frame(spark, delta_log.createDataFrame(
        snapshot, converters.asScala(files.jvm_list).toList(), False, none))
    key_columns = [quote_column(c) for c, _s in keys]
    batch_keys = source.select(*[F.col(quote_column(s)).alias(f"_k{i}") for i, (_c, s) in enumerate(keys)])
    on = [F.col(c) == F.col(f"_k{i}") for i, c in enumerate(key_columns)]
    found = (table.select(*key_columns, F.col("_metadata.file_path").alias("_file"))
             .join(F.broadcast(batch_keys), on, "left_semi").select("_file").distinct().collect())
    return [files.by_name[name] for name in sorted({_file_name(row[0]) for row in found})
            if name in files.by_name]


def _merged_rows(table, source, keys: list[tuple[str, str]], columns: list[tuple[str, str]], delete: str):
    """(rows, observation): the touched files' rows with the batch's changes applied,
    in the table's columns, and the counts of the MERGE's metrics, observed as the
    rows are written. A matched key is updated (the columns the source gives) or
    deleted; an unmatched one inserted unless it is a delete; the rest copied."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    types = {f.name.lower(): f.dataType for f in table.schema.fields}
    given = {c.lower(): i for i, (c, _s) in enumerate(columns)}
    changes = source.select(
        *[F.col(quote_column(s)).cast(types[c.lower()]).alias(f"_s{i}") for i, (c, s) in enumerate(columns)],
        F.col(quote_column(delete)).alias("_s_delete"), F.lit(True).alias("_s_here"))
    old = table.select(*[F.col(quote_column(c)).alias(f"_t{i}") for i, c in enumerate(table.columns)],
                       F.lit(True).alias("_t_here"))
    index = {c.lower(): i for i, c in enumerate(table.columns)}
    on = None
    for column, _s in keys:
        equal = F.col(f"_t{index[column.lower()]}") == F.col(f"_s{given[column.lower()]}")
        on = equal if on is None else on & equal
    observed = Observation(f"floeline-merge-{uuid.uuid4().hex}")
    joined = old.join(changes, on, "full_outer").observe(
        observed, *[F.expr(f"count_if({condition})").alias(name) for name, condition in (
            ("source", "_s_here"),
            ("inserted", "_s_here AND _t_here IS NULL AND NOT _s_delete"),
            ("updated", "_s_here AND _t_here AND NOT _s_delete"),
            ("deleted", "_s_here AND _t_here AND _s_delete"),
            ("copied", "_s_here IS NULL"))])
    out = []
    for i, name in enumerate(table.columns):
        kept = F.col(f"_t{i}")
        if name.lower() in given:
            kept = F.when(F.col("_s_here"), F.col(f"_s{given[name.lower()]}")).otherwise(kept)
        out.append(kept.alias(name))
    return joined.where("NOT coalesce(_s_delete, false)").select(*out), observed


def _merge_metrics(spark, txn, operation, counts: dict, touched: list, added: list, times: dict) -> None:
    """The commit's operationMetrics, as Delta's MERGE records them (DESCRIBE HISTORY)."""
    values = {
        "numSourceRows": counts["source"], "operationNumSourceRows": counts["source"],
        "numTargetRowsInserted": counts["inserted"], "numTargetRowsUpdated": counts["updated"],
        "numTargetRowsMatchedUpdated": counts["updated"], "numTargetRowsDeleted": counts["deleted"],
        "numTargetRowsMatchedDeleted": counts["deleted"], "numTargetRowsCopied": counts["copied"],
        "numOutputRows": counts["inserted"] + counts["updated"] + counts["copied"],
        "numTargetFilesAdded": len(added), "numTargetFilesRemoved": len(touched),
        "numTargetBytesAdded": sum(f.size() for f in added),
        "numTargetBytesRemoved": sum(f.size() for f in touched),
        **{name: int(seconds * 1000) for name, seconds in times.items()}}
    names = set(python_list(operation.operationMetrics())) | {"operationNumSourceRows"}
    register_metrics(spark, txn, {name: values.get(name, 0) for name in sorted(names)})


def _frame(spark, jdf):
    from pyspark.sql import DataFrame

    return DataFrame(jdf, spark)
