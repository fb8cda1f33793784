"""CLUSTER BY: a table created with clustering keys (`floeline sql`, Delta liquid
clustering underneath) gets each commit's rows in key order, so a query filtering
one key value reads fewer files than on the same rows of a table without them."""

from __future__ import annotations

import json
import os
import random

import pytest

from floeline.errors import SqlError
from floeline.sql.script import run_sql
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.clustering import files_scanned

pytestmark = pytest.mark.integration

COLUMNS = "RECORD_METADATA VARIANT, ID NUMBER, CUSTOMER NUMBER, AMOUNT FLOAT"


def commit_files(spark, path: str) -> dict[int, list[dict]]:
    """Each commit's added files with their CUSTOMER min/max (Delta's file statistics)."""
    out: dict[int, list[dict]] = {}
    log = os.path.join(path, "_delta_log")
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name)) as f:
            for line in f:
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    stats = json.loads(add["stats"])
                    out.setdefault(int(name.split(".")[0]), []).append(
                        {"path": add["path"], "min": stats["minValues"]["CUSTOMER"],
                         "max": stats["maxValues"]["CUSTOMER"]})
    return out


@pytest.fixture
def two_files_a_commit(spark):
    """A commit of 60 rows written as two files of 30, for both tables: the memory
    source reads a batch in one task (one file), where a Kafka topic's partitions give
    one read task, and file, each; within its one task a clustered batch is sorted, so
    each file still holds its own range of keys."""
    spark.conf.set("spark.sql.files.maxRecordsPerFile", "30")
    yield
    spark.conf.unset("spark.sql.files.maxRecordsPerFile")


def test_cluster_by_writes_each_commit_in_key_order_and_point_queries_read_fewer_files(
        memory_log, make_config, run_memory, read_table, spark, warehouse, two_files_a_commit):
    rng = random.Random(7)
    for channel in range(2):
        memory_log.append(f"orders/{channel}", "orders", [
            json.dumps({"id": channel * 1000 + i, "customer": rng.randrange(40), "amount": i / 4}).encode()
            for i in range(120)])
    wh = Warehouse(warehouse)
    run_sql(spark, f"CREATE TABLE ORDERS ({COLUMNS}) CLUSTER BY (customer) ENABLE_SCHEMA_EVOLUTION = TRUE; "
                   f"CREATE TABLE PLAIN ({COLUMNS}) ENABLE_SCHEMA_EVOLUTION = TRUE", wh)
    clustered_run = run_memory(make_config(buffer__count__records=30))  # 4 commits of 2 x 30 records
    run_memory(make_config(buffer__count__records=30, snowflake__topic2table__map="orders:PLAIN"))
    # The batch's report counts its rows once (the clustered write holds them in a cache).
    assert [r.rows_written for r in clustered_run.reports] == [{"ORDERS": 60}] * 4

    clustered, plain = read_table("ORDERS"), read_table("PLAIN")
    key = ["ID", "CUSTOMER", "AMOUNT"]
    assert sorted(clustered.select(*key).collect()) == sorted(plain.select(*key).collect())
    assert clustered.count() == 240

    # Each commit's files hold disjoint ranges of CUSTOMER, each file sorted.
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    commits = commit_files(spark, path)
    assert len(commits) >= 4 and all(len(files) == 2 for files in commits.values()), commits
    for files in commits.values():
        low, high = sorted(files, key=lambda f: f["min"])
        assert low["max"] <= high["min"], files
        for file in files:
            customers = [r[0] for r in spark.read.parquet(os.path.join(path, file["path"]))
                         .select("CUSTOMER").collect()]
            assert customers == sorted(customers)

    # A point query reads one file of each commit (two where its key is where the
    # commit's ranges meet), where the plain table's reads both of every commit.
    read = {customer: (files_scanned(clustered.where(f"CUSTOMER = {customer}")),
                       files_scanned(plain.where(f"CUSTOMER = {customer}"))) for customer in (15, 20, 25)}
    assert all(p == 2 * len(commits) and c < p for c, p in read.values()), read
    assert sum(c for c, _p in read.values()) <= 3 * len(commits) + 3, read

    # Delta knows the clustering columns; SHOW TABLES says them as Snowflake does.
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["clusteringColumns"] == ["CUSTOMER"]
    shown = {r["name"]: r["cluster_by"] for r in run_sql(spark, "SHOW TABLES", wh).collect()}
    assert shown == {"ORDERS": "LINEAR(CUSTOMER)", "PLAIN": ""}

    # ALTER TABLE ... DROP CLUSTERING KEY: later commits are not reordered.
    run_sql(spark, "ALTER TABLE orders DROP CLUSTERING KEY", wh)
    shown = {r["name"]: r["cluster_by"] for r in run_sql(spark, "SHOW TABLES", wh).collect()}
    assert shown["ORDERS"] == ""
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["clusteringColumns"] == []
    run_sql(spark, "ALTER TABLE orders CLUSTER BY (id)", wh)
    assert {r["name"]: r["cluster_by"] for r in run_sql(spark, "SHOW TABLES", wh).collect()}[
        "ORDERS"] == "LINEAR(ID)"


def test_cluster_by_refuses_what_delta_cannot_cluster_and_leaves_nothing(spark, warehouse):
    wh = Warehouse(warehouse)
    for clause, message in (("CLUSTER BY (record_metadata)", "cannot be a clustering key"),
                            ("CLUSTER BY (nope)", "no such column"),
                            ("CLUSTER BY (to_date(id))", "columns only")):
        with pytest.raises(SqlError, match=message):
            run_sql(spark, f"CREATE TABLE ORDERS ({COLUMNS}) {clause}", wh)
    assert not os.path.exists(os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS"))


def test_a_batch_read_in_several_tasks_is_range_partitioned_one_key_range_a_file(spark, tmp_path):
    # What a Kafka topic's partitions give (a read task each): the commit's files as
    # many as the tasks, each a range of keys, so one file of them holds a key value.
    from floeline.warehouse.clustering import in_key_order

    rows = spark.range(0, 4000, 1, 4).selectExpr("id AS ID", "(id * 7919) % 101 AS CUSTOMER")
    clustered, plain = str(tmp_path / "clustered"), str(tmp_path / "plain")
    in_key_order(rows, ["CUSTOMER"]).write.format("delta").save(clustered)
    rows.write.format("delta").save(plain)
    files = [json.loads(json.loads(line)["add"]["stats"]) for name in sorted(os.listdir(f"{clustered}/_delta_log"))
             if name.endswith(".json") for line in open(f"{clustered}/_delta_log/{name}") if '"add"' in line]
    assert len(files) == 4
    bounds = sorted((f["minValues"]["CUSTOMER"], f["maxValues"]["CUSTOMER"]) for f in files)
    assert all(a[1] <= b[0] for a, b in zip(bounds, bounds[1:])), bounds  # disjoint ranges
    for name in os.listdir(clustered):
        if name.endswith(".parquet"):
            customers = [r[0] for r in spark.read.parquet(f"{clustered}/{name}").select("CUSTOMER").collect()]
            assert customers == sorted(customers)
    read = [(files_scanned(spark.read.format("delta").load(clustered).where(f"CUSTOMER = {k}")),
             files_scanned(spark.read.format("delta").load(plain).where(f"CUSTOMER = {k}"))) for k in (5, 50, 95)]
    assert all(c <= 2 and p == 4 for c, p in read), read
