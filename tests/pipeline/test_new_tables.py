"""A new table is created by the commit of its first rows (tables.NewTable): one Delta
commit, the positions in it, and nothing on disk when the batch fails before it.
Over the memory source: real Spark and Delta, no broker."""

from __future__ import annotations

import json
import os

import pytest
from delta.tables import DeltaTable

from floeline.errors import RecordError
from floeline.warehouse.positions import committed_in_log

pytestmark = pytest.mark.integration


def _path(warehouse: str, table: str) -> str:
    return os.path.join(warehouse, "FLOELINE", "PUBLIC", table)


def _history(spark, path: str) -> list:
    return DeltaTable.forPath(spark, path).history().orderBy("version").collect()


def _ref(warehouse: str, table: str):
    from floeline.warehouse.catalog import Warehouse

    return Warehouse(warehouse).table("FLOELINE", "PUBLIC", table)


@pytest.mark.parametrize("topics", ["orders", "orders,refunds"], ids=["one pass", "general path"])
def test_a_new_table_is_created_by_the_commit_of_its_first_rows(topics, memory_log, make_config, run_memory,
                                                                read_table, spark, warehouse):
    # One table takes the one-pass path; two tables in one batch take the general path.
    for topic in topics.split(","):
        memory_log.append(f"{topic}/0", topic, [json.dumps({"n": i, "name": f"r{i}"}).encode() for i in range(3)])
    config = make_config(topics=topics)
    run_memory(config)
    for topic in topics.split(","):
        path = _path(warehouse, topic.upper())
        (first, *rest) = _history(spark, path)
        assert first["version"] == 0 and first["operation"] == "WRITE" and not rest
        assert first["operationMetrics"]["numOutputRows"] == "3"
        # The positions are in the creating commit, with the rows.
        assert committed_in_log(_ref(warehouse, topic.upper()).path, config.name)[0].positions == {f"{topic}/0": "2"}
        properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
        assert properties["floeline.enableSchemaEvolution"] == "true"
        fields = {f.name: (f.dataType.simpleString(), f.nullable) for f in read_table(topic.upper()).schema}
        assert fields == {"RECORD_METADATA": ("variant", True), "N": ("decimal(38,0)", True), "NAME": ("string", True)}

    # The table evolves as one made by CREATE TABLE does.
    memory_log.append("orders/0", "orders", [json.dumps({"n": 3, "name": "r3", "extra": True}).encode()])
    run_memory(config)
    rows = sorted((r["N"], r["EXTRA"]) for r in read_table("ORDERS").collect())
    assert rows == [(0, None), (1, None), (2, None), (3, True)]
    assert "ADD COLUMNS" in [r["operation"] for r in _history(spark, _path(warehouse, "ORDERS"))]


def test_a_batch_stopped_by_a_bad_row_creates_no_table(memory_log, make_config, run_memory, spark, warehouse):
    """errors.tolerance=none checks every table's rows before any commit: a new table
    of the batch is not left behind, empty, by a bad row of another table."""
    spark.sql(f"CREATE TABLE delta.`{_path(warehouse, 'REFUNDS')}` (RECORD_METADATA VARIANT, N BIGINT) USING delta")
    memory_log.append("orders/0", "orders", [json.dumps({"n": i}).encode() for i in range(3)])
    memory_log.append("refunds/0", "refunds", [b'{"n": 1}', b'{"n": "not a number"}'])
    with pytest.raises(RecordError, match="refunds/0"):
        run_memory(make_config(topics="orders,refunds"))
    assert not os.path.exists(_path(warehouse, "ORDERS"))


def test_the_commit_that_creates_a_table_runs_no_spark_job(spark, warehouse):
    """Delta's list of a table's files in each .crc cost the creating commit a Spark
    job of its own (0.15 s of 0.19 s); floeline's session leaves the list out."""
    from floeline.warehouse.catalog import Warehouse
    from floeline.warehouse.commits import FilesCommits
    from floeline.warehouse.tables import Column, NewTable
    from floeline.sources.base import Committed

    ref = Warehouse(warehouse).table("FLOELINE", "PUBLIC", "CREATED")
    commits = FilesCommits.start(spark, [ref], [("N", '"long"')], [NewTable((Column("N", "BIGINT"),))], 1)
    assert commits is not None and commits.usable == [True]
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    commits.commit(0, [], "probe", Committed({"t/0": "1"}))
    assert set(tracker.getJobIdsForGroup(None)) == before
    assert spark.read.format("delta").load(ref.path).columns == ["N"]
