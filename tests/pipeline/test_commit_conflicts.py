"""warehouse/commits.py against a real concurrent commit: a Delta commit that loses to
another commit of the same table (here an ALTER TABLE made while the write's job runs)
commits nothing and is a transient ServiceUnavailable, so the connector restarts its
query and the replay lands the rows once; the next commit goes through."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.integration


def test_a_commit_that_loses_to_a_concurrent_commit_is_transient(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from floeline.errors import ServiceUnavailable
    from floeline.sources.base import Committed
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import commit
    from floeline.warehouse.positions import committed_in_log

    path = str(tmp_path / "T")
    ref = TableRef("DB", "S", "T", path)
    commit(spark.range(1), ref, "c", Committed({"ch": "0"}))
    started, go = tmp_path / "write-started", tmp_path / "go"

    @F.udf(LongType())
    def held_until_go(value):  # runs inside the write's job, before Delta commits
        started.touch()
        deadline = time.time() + 120
        while not go.exists() and time.time() < deadline:
            time.sleep(0.05)
        return value

    def concurrent_alter():
        deadline = time.time() + 120
        while not started.exists() and time.time() < deadline:
            time.sleep(0.05)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (extra STRING)")
        go.touch()

    alter = threading.Thread(target=concurrent_alter)
    alter.start()
    try:
        rows = spark.range(1, 4, numPartitions=1).select(held_until_go("id").alias("id"))
        with pytest.raises(ServiceUnavailable, match="another commit to the table came first"):
            commit(rows, ref, "c", Committed({"ch": "3"}))
    finally:
        go.touch()
        alter.join(120)

    assert [r["id"] for r in spark.read.format("delta").load(path).collect()] == [0]
    assert committed_in_log(ref.path, "c")[0].positions == {"ch": "0"}  # nothing of the loser
    commit(spark.range(1, 4).selectExpr("id", "CAST(NULL AS STRING) AS extra"), ref, "c",
           Committed({"ch": "3"}))  # tried again, it goes through
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2, 3]
    assert committed_in_log(ref.path, "c")[0].positions == {"ch": "3"}
