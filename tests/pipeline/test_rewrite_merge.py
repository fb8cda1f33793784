"""warehouse/rewrite_merge.py: the MERGE of a materialized batch by Delta's transaction
API leaves what Delta's MERGE statement leaves, rewrites only the files that hold a key
of the batch, keeps the positions in its commit, sees rows another writer committed,
loses to a concurrent commit like any commit, and leaves a table it does not know to
Delta's MERGE. Real Spark and Delta."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

pytestmark = pytest.mark.integration

KEYS, COLUMNS = [("ID", "_id")], [("ID", "_id"), ("NAME", "_name")]


def make_table(spark, path: str, batches: list[list[tuple[int, str]]], properties: str = "") -> None:
    """A table keyed by ID NOT NULL, one data file per batch of rows."""
    spark.sql(f"CREATE TABLE delta.`{path}` (ID BIGINT NOT NULL, NAME STRING, NOTE STRING) USING delta"
              + (f" TBLPROPERTIES ({properties})" if properties else ""))
    for rows in batches:
        spark.createDataFrame([(i, n, f"note {i}") for i, n in rows], "ID BIGINT, NAME STRING, NOTE STRING") \
            .coalesce(1).write.format("delta").mode("append").save(path)


def changes(spark, rows: list[tuple[int, str | None, bool]]):
    """A batch of changes (key, name, is a delete), computed once as the one pass's is."""
    return spark.createDataFrame(rows, "_id BIGINT, _name STRING, _delete BOOLEAN").localCheckpoint()


def table_rows(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def last_commit(spark, path: str, operation: str | None = None):
    """The table's newest commit (of `operation`: Delta's MERGE statement is followed by
    a commit of the positions' txn actions, commits.merge)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history(4).collect()
    return next(c for c in history if operation is None or c["operation"] == operation)


BATCH = [(1, "one v2", False), (4, None, True), (9, "nine", False), (12, None, True), (3, "three v2", False)]


def test_a_rewrite_merge_leaves_what_deltas_merge_leaves(spark, tmp_path):
    from floeline.sources.base import Committed
    from floeline.warehouse import rewrite_merge
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import merge
    from floeline.warehouse.positions import committed_in_log

    files = [[(1, "one"), (2, "two")], [(3, "three"), (4, "four")], [(5, "five"), (6, "six")]]
    paths = {case: str(tmp_path / case) for case in ("rewrite", "statement")}
    for case, path in paths.items():
        make_table(spark, path, files)
        ref = TableRef("DB", "S", case.upper(), path)
        # materialized=False: Delta's MERGE statement, the reference
        merge(changes(spark, BATCH), ref, "c", Committed({"ch/0": "7"}), None, keys=KEYS,
              columns=COLUMNS, delete="_delete", materialized=case == "rewrite")
    assert table_rows(spark, paths["rewrite"]) == table_rows(spark, paths["statement"]) == [
        (1, "one v2", "note 1"), (2, "two", "note 2"), (3, "three v2", "note 3"),
        (5, "five", "note 5"), (6, "six", "note 6"), (9, "nine", None)]
    commit = last_commit(spark, paths["rewrite"])
    metrics = commit["operationMetrics"]
    assert commit["operation"] == "MERGE"
    assert {k: metrics[k] for k in ("numSourceRows", "numTargetRowsUpdated", "numTargetRowsDeleted",
                                    "numTargetRowsInserted", "numTargetRowsCopied", "numTargetFilesRemoved")} == {
        "numSourceRows": "5", "numTargetRowsUpdated": "2", "numTargetRowsDeleted": "1",
        "numTargetRowsInserted": "1", "numTargetRowsCopied": "1", "numTargetFilesRemoved": "2"}, metrics
    assert committed_in_log(paths["rewrite"], "c")[0].positions == {"ch/0": "7"}
    # the third file (keys 5 and 6) was not rewritten
    assert last_commit(spark, paths["statement"], "MERGE")["operationMetrics"]["numTargetFilesRemoved"] == "2"
    assert committed_in_log(paths["statement"], "c")[0].positions == {"ch/0": "7"}
    assert rewrite_merge.known_files.get(spark, paths["rewrite"], commit["version"]) is not None


def test_a_rewrite_merge_sees_rows_another_writer_committed_since_its_last(spark, tmp_path):
    from floeline.sources.base import Committed
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import commit, merge

    path = str(tmp_path / "T")
    make_table(spark, path, [[(1, "one")]])
    ref = TableRef("DB", "S", "T", path)
    merge(changes(spark, [(1, "one v2", False)]), ref, "c", Committed({"ch/0": "1"}), None,
          keys=KEYS, columns=COLUMNS, delete="_delete", materialized=True)
    # another writer: the file list this process kept is for the version before
    commit(spark.createDataFrame([(7, "seven", "x")], "ID BIGINT, NAME STRING, NOTE STRING"), ref, None, None)
    merge(changes(spark, [(7, "seven v2", False), (1, None, True)]), ref, "c", Committed({"ch/0": "2"}), None,
          keys=KEYS, columns=COLUMNS, delete="_delete", materialized=True)
    assert table_rows(spark, path) == [(7, "seven v2", "x")]
    assert last_commit(spark, path)["operation"] == "MERGE"


def test_a_rewrite_merge_that_loses_to_a_concurrent_commit_is_transient(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from floeline.errors import ServiceUnavailable
    from floeline.sources.base import Committed
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import commit, merge
    from floeline.warehouse.positions import committed_in_log

    path = str(tmp_path / "T")
    make_table(spark, path, [[(1, "one"), (2, "two")]])
    ref = TableRef("DB", "S", "T", path)
    started, go = tmp_path / "rewrite-started", tmp_path / "go"

    @F.udf(LongType())
    def held_until_go(value):  # runs inside the MERGE's jobs, after its transaction started
        started.touch()
        deadline = time.time() + 120
        while not go.exists() and time.time() < deadline:
            time.sleep(0.05)
        return value

    def concurrent_append():
        deadline = time.time() + 120
        while not started.exists() and time.time() < deadline:
            time.sleep(0.05)
        commit(spark.createDataFrame([(3, "three", "x")], "ID BIGINT, NAME STRING, NOTE STRING"), ref, None, None)
        go.touch()

    # Not checkpointed, so the UDF runs in the MERGE's own jobs; rewrite_merge reads it twice.
    source = spark.createDataFrame([(1, "one v2", False)], "_id BIGINT, _name STRING, _delete BOOLEAN") \
        .withColumn("_id", held_until_go("_id"))
    other = threading.Thread(target=concurrent_append)
    other.start()
    with pytest.raises(ServiceUnavailable, match="another commit to the table came first"):
        merge(source, ref, "c", Committed({"ch/0": "5"}), None, keys=KEYS, columns=COLUMNS,
              delete="_delete", materialized=True)
    other.join()
    assert table_rows(spark, path) == [(1, "one", "note 1"), (2, "two", "note 2"), (3, "three", "x")]
    assert committed_in_log(ref.path, "c")[0].positions == {}
    merge(changes(spark, [(1, "one v2", False)]), ref, "c", Committed({"ch/0": "5"}), None,
          keys=KEYS, columns=COLUMNS, delete="_delete", materialized=True)
    assert table_rows(spark, path)[0] == (1, "one v2", "note 1")
    assert committed_in_log(ref.path, "c")[0].positions == {"ch/0": "5"}


def test_a_table_with_change_data_feed_takes_deltas_merge(spark, tmp_path):
    from floeline.sources.base import Committed
    from floeline.warehouse import rewrite_merge
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import merge

    path = str(tmp_path / "T")
    make_table(spark, path, [[(1, "one"), (4, "four")]], "'delta.enableChangeDataFeed' = 'true'")
    ref = TableRef("DB", "S", "T", path)
    assert not rewrite_merge.rewrite_merge(changes(spark, BATCH), ref, KEYS, COLUMNS, "_delete", json.dumps({}))
    merge(changes(spark, BATCH), ref, "c", Committed({"ch/0": "1"}), None, keys=KEYS, columns=COLUMNS,
          delete="_delete", materialized=True)
    assert [r[:2] for r in table_rows(spark, path)] == [(1, "one v2"), (3, "three v2"), (9, "nine")]
    # Delta's MERGE wrote the change data a reader of the feed asks for
    assert os.listdir(os.path.join(path, "_change_data"))
