"""One Spark job writes the data files of several tables; each table then commits its
own files (commits.FilesCommits).

Why: a batch of a connector writing 100 tables ran 100 write jobs one after another,
each scanning the batch for its table's rows, at ~0.5-1 s a table (bench/RESULTS.md,
issue 26). Here the rows of every table are one DataFrame with a column naming the
table; Delta's own writer (`OptimisticTransaction.writeFiles` of a staging location
partitioned by that column, never committed) writes them in one job and computes each
file's statistics (`numRecords` included) as it does for any write. Each file is then
moved into its table's folder, and its add action, without the partition value, is
what the table's commit adds.

The staging location is a folder of the warehouse that starts with "_" (floeline's
own, never a table: catalog.folder_name) and is emptied before and after each use. A
crash between the write and the commits leaves files there or, once moved, files in a
table's folder that no commit names: Delta never reads those, and VACUUM removes them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote


# The column naming each row's table in the staged write (a short key: the folder of
# the table's files inside the staging location).
TABLE_COLUMN = "_floeline_table"


@dataclass(frozen=True)
class StagedFile:
    """A data file the shared write left in the staging location."""
    add: dict  # Delta's add action for it, without partitionValues (its path is set on the move)
    source: str  # where the file is now


def write_files_by_table(frame, staging: str, tasks: int) -> dict[str, list[StagedFile]]:
    """Write `frame`'s rows as Parquet files under `staging`, one folder per value of
    TABLE_COLUMN, in one Spark job; the files of each value. The other columns are
    the tables' columns, in their order and types (the tables' commits check that).

    The rows are first brought together by table into `tasks` tasks (a shuffle), so a
    table gets one file instead of one per read task holding its rows."""
    frame = frame.repartition(tasks, TABLE_COLUMN)
    spark = frame.sparkSession
    delta = spark._jvm.org.apache.spark.sql.delta
    metadata = {"metaData": {
        "id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
        "schemaString": frame.schema.json(), "partitionColumns": [TABLE_COLUMN],
        "configuration": {}, "createdTime": int(time.time() * 1000)}}
    empty(spark, staging)
    txn = delta.DeltaLog.forTable(spark._jsparkSession, staging).startTransaction()
    txn.updateMetadataForNewTable(delta.actions.Action.fromJson(json.dumps(metadata)))
    written = txn.writeFiles(frame._jdf).iterator()
    by_table: dict[str, list[StagedFile]] = {}
    while written.hasNext():
        add = json.loads(written.next().json())["add"]
        table = add.pop("partitionValues")[TABLE_COLUMN]
        source = f"{staging.rstrip('/')}/{unquote(add['path'])}"
        by_table.setdefault(table, []).append(StagedFile(add, source))
    return by_table


def empty(spark, staging: str) -> None:
    """Remove the staging location and what is in it (left by an earlier run)."""
    path = spark._jvm.org.apache.hadoop.fs.Path(staging)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if fs.exists(path):
        fs.delete(path, True)
