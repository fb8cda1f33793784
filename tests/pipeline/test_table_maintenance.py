"""Small files: many small commits, then OPTIMIZE (floeline sql) or Delta's auto
compaction (floeline.table.auto.compact): fewer files, the same rows, and the
connector still resumes each channel exactly after its committed position."""

from __future__ import annotations

import json
import logging
import os

import pytest

from floeline.errors import SqlError
from floeline.sql.script import run_sql
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.positions import committed_in_log

pytestmark = pytest.mark.integration


def values(start: int, count: int) -> list[bytes]:
    return [json.dumps({"n": start + i}).encode() for i in range(count)]


def file_count(spark, path: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def rows(df) -> list[tuple[str, str, int]]:
    return sorted((r["c"], r["p"], int(r["N"])) for r in df.selectExpr(
        "RECORD_METADATA:channel::string AS c", "RECORD_METADATA:position::string AS p", "N").collect())


def with_most_tasks(spark, action):
    """`action()`'s result, and the most tasks one stage of its Spark jobs ran."""
    import uuid

    context, group = spark.sparkContext, f"tasks-{uuid.uuid4().hex}"
    context.setJobGroup(group, "counting tasks")
    try:
        result = action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
              for s in tracker.getJobInfo(j).stageIds]
    return result, max(stage.numTasks for stage in stages if stage is not None)


def test_optimize_compacts_small_files_and_the_connector_resumes_exactly(
        memory_log, make_config, run_memory, read_table, spark, warehouse):
    memory_log.append("orders/0", "orders", values(0, 12))
    memory_log.append("orders/1", "orders", values(100, 12))
    config = make_config(buffer__count__records=3)  # 4 small commits, a small file each
    run_memory(config)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    before, held = file_count(spark, path), rows(read_table("ORDERS"))
    assert before >= 4 and len(held) == 24

    (result,) = run_sql(spark, "OPTIMIZE orders", Warehouse(warehouse)).collect()
    assert result["files_removed"] == before and result["files_now"] == 1
    assert file_count(spark, path) == 1
    assert rows(read_table("ORDERS")) == held
    # VACUUM keeps Delta's retention (7 days) and its safety check on a shorter one, and
    # lists the table in a few tasks (Spark's default spread its listing over 10,000)
    (vacuumed,), most_tasks = with_most_tasks(
        spark, lambda: run_sql(spark, "VACUUM orders", Warehouse(warehouse)).collect())
    assert vacuumed["files_now"] == 1 and rows(read_table("ORDERS")) == held
    assert most_tasks <= 2 * spark.sparkContext.defaultParallelism
    with pytest.raises(SqlError, match=r"VACUUM FLOELINE.PUBLIC.ORDERS failed: .*retention"):
        run_sql(spark, "VACUUM orders RETAIN 0 HOURS", Warehouse(warehouse))
    ref = Warehouse(warehouse).table("FLOELINE", "PUBLIC", "ORDERS")
    assert committed_in_log(ref.path, config.name)[0].positions == {"orders/0": "11", "orders/1": "11"}

    # The connector resumes after its positions: a lost checkpoint too.
    memory_log.append("orders/0", "orders", values(12, 5))
    run_memory(config)
    import shutil
    shutil.rmtree(config.checkpoint_dir)
    memory_log.append("orders/1", "orders", values(112, 2))
    run_memory(config)
    after = rows(read_table("ORDERS"))
    assert len(after) == len(set(after)) == 24 + 5 + 2
    assert after == sorted(held + [("orders/0", str(12 + i), 12 + i) for i in range(5)]
                           + [("orders/1", str(12 + i), 112 + i) for i in range(2)])


def test_auto_compact_setting_compacts_after_commits(memory_log, make_config, run_memory,
                                                     read_table, spark, warehouse):
    from delta.tables import DeltaTable

    # 6 commits of 3 rows: Delta compacts after its 4th small file (minNumFiles below)
    memory_log.append("orders/0", "orders", values(0, 18))
    config = make_config(buffer__count__records=3, floeline__table__auto__compact="true")
    key = "spark.databricks.delta.autoCompact.minNumFiles"
    spark.conf.set(key, "4")  # Delta's default is 50 small files: scaled down for the test
    try:
        run_memory(config)
    finally:
        spark.conf.unset(key)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert properties["delta.autoOptimize.autoCompact"] == "true"
    operations = [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()]
    assert operations.count("WRITE") == 6 and "OPTIMIZE" in operations
    assert file_count(spark, path) < 6
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == list(range(18))
    ref = Warehouse(warehouse).table("FLOELINE", "PUBLIC", "ORDERS")
    assert committed_in_log(ref.path, config.name)[0].positions == {"orders/0": "17"}


def test_checkpoints_are_written_beside_the_commits_not_in_them(
        memory_log, make_config, run_memory, read_table, spark, warehouse, monkeypatch, caplog):
    """A table floeline creates carries a large delta.checkpointInterval, so no commit
    writes Delta's checkpoint inline; floeline writes one every CHECKPOINT_EVERY commits
    itself (5 here, 100 by default), in the background, and the connector leaves none
    pending when it ends."""
    from floeline.warehouse import checkpoints
    from floeline.warehouse.checkpoints import TABLE_CHECKPOINT_INTERVAL
    from floeline.warehouse.delta_log import commits_newest_first

    CHECKPOINT_EVERY = 5
    monkeypatch.setattr(checkpoints, "CHECKPOINT_EVERY", CHECKPOINT_EVERY)

    # versions 0-14: room for two checkpoints, and for a late first one, as 25 commits
    # gave an interval of 10
    memory_log.append("orders/0", "orders", values(0, 3 * CHECKPOINT_EVERY))
    config = make_config(buffer__count__records=1)  # a commit per record
    caplog.set_level(logging.DEBUG, logger="floeline.warehouse.checkpoints")
    run_memory(config)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert properties["delta.checkpointInterval"] == str(TABLE_CHECKPOINT_INTERVAL)
    last = max(c.version for c in commits_newest_first(path))
    assert last >= 2 * CHECKPOINT_EVERY
    checkpointed = sorted(int(name.split(".")[0]) for name in os.listdir(os.path.join(path, "_delta_log"))
                          if ".checkpoint." in name and not name.startswith("."))
    # Delta alone would have written none before version 1000.
    why = (checkpointed, [r.getMessage() for r in caplog.records if r.name == checkpoints.log.name])
    assert len(checkpointed) >= 2 and checkpointed[0] >= CHECKPOINT_EVERY, why
    assert all(b - a >= CHECKPOINT_EVERY for a, b in zip(checkpointed, checkpointed[1:])), why
    assert last - checkpointed[-1] < CHECKPOINT_EVERY, (last, checkpointed)
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == list(range(3 * CHECKPOINT_EVERY))
    ref = Warehouse(warehouse).table("FLOELINE", "PUBLIC", "ORDERS")
    assert committed_in_log(ref.path, config.name)[0].positions == {"orders/0": str(3 * CHECKPOINT_EVERY - 1)}
