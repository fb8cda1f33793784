"""A batch's tables written by one Spark job and committed one by one
(ingest/tables_together.py): the same rows, positions and history as per-table writes,
and the per-table path wherever a table needs it. Over the memory source: real Spark
and Delta, no broker."""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest
from delta.tables import DeltaTable

from floeline.warehouse.positions import committed_in_log

pytestmark = pytest.mark.integration


def _path(warehouse: str, table: str) -> str:
    return os.path.join(warehouse, "FLOELINE", "PUBLIC", table)


def _ref(warehouse: str, table: str):
    from floeline.warehouse.catalog import Warehouse

    return Warehouse(warehouse).table("FLOELINE", "PUBLIC", table)


def _history(spark, path: str) -> list:
    return DeltaTable.forPath(spark, path).history().orderBy("version").collect()


def _phases(connector) -> set[str]:
    return {name for report in connector.reports for name in report.phases}


@pytest.mark.parametrize("schematization", ["true", "false"])
def test_tables_of_one_kind_of_record_are_written_by_one_job(schematization, memory_log, make_config,
                                                             run_memory, read_table, spark, warehouse):
    topics = ["orders", "refunds", "returns"]
    for i, topic in enumerate(topics):
        # Integers of other sizes per topic: the same NUMBER column in every table.
        memory_log.append(f"{topic}/0", topic,
                          [json.dumps({"n": n * 10 ** i, "name": f"{topic} {n}"}).encode() for n in range(4)])
    config = make_config(topics=",".join(topics), snowflake__enable__schematization=schematization,
                         buffer__count__records=2)
    connector = run_memory(config)
    first, second = connector.reports
    # With schematization every batch takes one pass, every table's rows parsed straight
    # into their columns: the first after a sample of each partition's first records
    # decided the new tables' columns. Without, the general path, then one write job.
    for report in (first, second):
        assert "write together" in report.phases and "prepare commits" in report.phases
        assert ("read+stats" in report.phases) == (schematization == "false")
    assert ("one pass keys" in first.phases) == (schematization == "true")
    assert "convert+write" not in _phases(connector)

    def rows(table):
        """(n, name) of each row, and each row's RECORD_METADATA, from one read."""
        if schematization == "true":
            read = table.selectExpr("N", "NAME", "to_json(RECORD_METADATA) AS m").collect()
            return sorted((int(r["N"]), r["NAME"]) for r in read), read
        read = table.selectExpr("to_json(RECORD_CONTENT) AS c", "to_json(RECORD_METADATA) AS m").collect()
        return sorted((json.loads(r["c"])["n"], json.loads(r["c"])["name"]) for r in read), read

    for i, topic in enumerate(topics):
        got, meta = rows(read_table(topic.upper()))
        assert got == [(n * 10 ** i, f"{topic} {n}") for n in range(4)]
        commits = _history(spark, _path(warehouse, topic.upper()))
        assert [(c["operation"], c["operationMetrics"]["numOutputRows"]) for c in commits] == [("WRITE", "2")] * 2
        # The positions are in the commit of the rows, and RECORD_METADATA names each row's source.
        assert committed_in_log(_ref(warehouse, topic.upper()).path, config.name)[0].positions == {f"{topic}/0": "3"}
        assert sorted(json.loads(r["m"])["position"] for r in meta) == ["0", "1", "2", "3"]
        assert {json.loads(r["m"])["channel"] for r in meta} == {f"{topic}/0"}
        # Each file's statistics count its rows (floeline status and other engines read them).
        log_dir = os.path.join(_path(warehouse, topic.upper()), "_delta_log")
        adds = [json.loads(line)["add"] for name in sorted(os.listdir(log_dir)) if name.endswith(".json")
                for line in open(os.path.join(log_dir, name)) if '"add"' in line]
        assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == 4
    assert not os.path.exists(os.path.join(warehouse, "_staging", config.name))  # emptied

    # The next batch appends to the existing tables the same way, a column left out
    # where no record has its key.
    for topic in topics:
        memory_log.append(f"{topic}/0", topic, [json.dumps({"n": 100}).encode()])
    connector = run_memory(config)
    assert "write together" in _phases(connector)
    for topic in topics:
        assert read_table(topic.upper()).count() == 5
        assert committed_in_log(_ref(warehouse, topic.upper()).path, config.name)[0].positions == {f"{topic}/0": "4"}
    if schematization == "true":
        assert read_table("ORDERS").where("N = 100").collect()[0]["NAME"] is None


def test_tables_that_differ_or_need_their_own_rules_are_written_one_by_one(memory_log, make_config, run_memory,
                                                                          read_table, spark, warehouse):
    # REFUNDS has a CHECK constraint a file written elsewhere would not honour.
    spark.sql(f"CREATE TABLE delta.`{_path(warehouse, 'REFUNDS')}` (RECORD_METADATA VARIANT, N DECIMAL(38,0)) "
              f"USING delta TBLPROPERTIES ('floeline.enableSchemaEvolution' = 'true')")
    spark.sql(f"ALTER TABLE delta.`{_path(warehouse, 'REFUNDS')}` ADD CONSTRAINT small CHECK (N < 100)")
    for topic in ("orders", "refunds"):
        memory_log.append(f"{topic}/0", topic, [json.dumps({"n": n}).encode() for n in range(3)])
    config = make_config(topics="orders,refunds")
    connector = run_memory(config)
    assert "write together" not in _phases(connector) and "convert+write" in _phases(connector)
    assert sorted(int(r["N"]) for r in read_table("REFUNDS").collect()) == [0, 1, 2]

    # Other keys per table: each table its own columns, its own write.
    memory_log.append("orders/0", "orders", [json.dumps({"n": 5, "extra": True}).encode()])
    memory_log.append("refunds/0", "refunds", [json.dumps({"n": 6}).encode()])
    connector = run_memory(config)
    assert "write together" not in _phases(connector)
    assert read_table("ORDERS").where("EXTRA").count() == 1
    assert read_table("REFUNDS").count() == 4


def test_a_record_one_pass_cannot_write_sends_the_batch_to_the_general_path(memory_log, make_config, run_memory,
                                                                            read_table, spark, warehouse):
    memory_log.append("orders/0", "orders", [json.dumps({"n": n}).encode() for n in range(4)])
    memory_log.append("refunds/0", "refunds", [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}', b'{"n": '])
    config = make_config(topics="orders,refunds", buffer__count__records=2, errors__tolerance="all")
    connector = run_memory(config)
    # The second batch tried one pass, met the broken record and took the general path
    # (nothing had committed): the others landed, the broken one is in the error table.
    assert "read+stats" in connector.reports[1].phases
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == [0, 1, 2, 3]
    assert sorted(int(r["N"]) for r in read_table("REFUNDS").collect()) == [0, 1, 2]
    assert read_table("REFUNDS_ERRORS").count() == 1
    for table, channel in (("ORDERS", "orders/0"), ("REFUNDS", "refunds/0")):
        assert committed_in_log(_ref(warehouse, table).path, config.name)[0].positions == {channel: "3"}


def test_a_table_new_beside_known_ones_learns_its_keys_in_one_pass(memory_log, make_config, spark, read_table):
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    memory_log.append("orders/0", "orders", [json.dumps({"n": n}).encode() for n in range(3)])
    config = make_config(topics="orders,refunds")
    connector = Connector(config, spark, source=MemorySource(config, memory_log))
    runner = threading.Thread(target=connector.run, daemon=True)
    runner.start()
    try:
        _wait_for(lambda: connector.reports, "the first batch")
        # REFUNDS's first records come with more of ORDERS, whose keys are known (from a
        # second channel, so that one batch is sure to read both).
        memory_log.add_channels([("orders/1", "orders", [json.dumps({"n": n}).encode() for n in range(3, 6)]),
                                 ("refunds/0", "refunds", [json.dumps({"n": n}).encode() for n in range(3)])])
        _wait_for(lambda: any("REFUNDS" in r.rows_written for r in connector.reports), "REFUNDS's batch")
    finally:
        connector.stop()
        runner.join(120)
    (both,) = [r for r in connector.reports if "REFUNDS" in r.rows_written]
    assert both.rows_written == {"ORDERS": 3, "REFUNDS": 3}
    assert "one pass keys" in both.phases and "write together" in both.phases and "read+stats" not in both.phases
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == list(range(6))
    assert sorted(int(r["N"]) for r in read_table("REFUNDS").collect()) == list(range(3))


def _wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.2)


def test_a_first_batch_with_a_broken_record_takes_the_general_path(memory_log, make_config, run_memory,
                                                                    read_table, spark, warehouse, caplog):
    memory_log.append("orders/0", "orders", [json.dumps({"n": n}).encode() for n in range(3)])
    memory_log.append("refunds/0", "refunds", [b'{"n": 0}', b'{"n": ', b'{"n": 2}'])
    config = make_config(topics="orders,refunds", errors__tolerance="all")
    caplog.set_level(logging.INFO, logger="floeline")
    connector = run_memory(config)
    # The sample made the new tables' columns; the one-pass write met the broken record
    # before anything committed, and the general path took the batch: nothing lost.
    (report,) = connector.reports
    assert "read+stats" in report.phases
    assert any("batch 0 takes the general path" in r.getMessage() for r in caplog.records)
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == [0, 1, 2]
    assert sorted(int(r["N"]) for r in read_table("REFUNDS").collect()) == [0, 2]
    assert read_table("REFUNDS_ERRORS").count() == 1
    for table, channel in (("ORDERS", "orders/0"), ("REFUNDS", "refunds/0")):
        assert committed_in_log(_ref(warehouse, table).path, config.name)[0].positions == {channel: "2"}


def test_a_record_key_named_like_the_table_column_keeps_tables_apart(memory_log, make_config, run_memory,
                                                                     read_table):
    # The shared write names each row's table in a column of that name: such tables
    # are written one by one instead of failing the batch.
    for topic in ("orders", "refunds"):
        memory_log.append(f"{topic}/0", topic, [json.dumps({"n": 1, "_floeline_table": "x"}).encode()])
    connector = run_memory(make_config(topics="orders,refunds"))
    assert "write together" not in _phases(connector)
    assert [r["_FLOELINE_TABLE"] for r in read_table("REFUNDS").collect()] == ["x"]


def test_without_the_table_commits_class_the_tables_are_written_one_by_one(memory_log, make_config, run_memory,
                                                                           read_table, monkeypatch):
    """A session without floeline's table commits jar (set-up could not compile it):
    the batch's tables take the per-table path, with the same rows."""
    from floeline.warehouse import commits

    monkeypatch.setattr(commits, "TABLE_COMMITS_CLASS", "floeline.delta.NoSuchClass")
    for topic in ("orders", "refunds"):
        memory_log.append(f"{topic}/0", topic, [json.dumps({"n": n}).encode() for n in range(3)])
    connector = run_memory(make_config(topics="orders,refunds"))
    assert "write together" not in _phases(connector)
    for table in ("ORDERS", "REFUNDS"):
        assert sorted(int(r["N"]) for r in read_table(table).collect()) == [0, 1, 2]


def test_the_kafka_sample_is_each_partitions_first_records_after_where_the_batch_starts(spark):
    """KafkaSource.first_records_sql over normalized rows: `count` records of each
    partition after the batch's start, from offset 0 for a partition the start does not
    hold (a new one)."""
    from floeline.sources.base import BatchEnd
    from floeline.sources.kafka import first_offsets_sql

    first = {"a/0": 5, "a/1": 0, "b/0": 1}  # the batch's rows: after where it starts
    rows = [(ch, o) for ch, start in first.items() for o in range(start, 10)]
    frame = spark.createDataFrame(rows, "channel STRING, offset BIGINT").selectExpr(
        "channel", "named_struct('offset', offset) AS source")
    sample = frame.where(first_offsets_sql(BatchEnd({"a/0": "4", "b/0": "0"}), 3)).collect()
    assert sorted((r["channel"], r["source"]["offset"]) for r in sample) == [
        ("a/0", 5), ("a/0", 6), ("a/0", 7), ("a/1", 0), ("a/1", 1), ("a/1", 2),
        ("b/0", 1), ("b/0", 2), ("b/0", 3)]
    # Without a start, every partition counts from 0: a/1's 0 and 1, b/0's 1.
    assert len(frame.where(first_offsets_sql(BatchEnd({}), 2)).collect()) == 3
