"""Positions outlive Delta's log clean-up (issue 53): a connector stopped for longer
than delta.logRetentionDuration while another engine compacts, checkpoints and cleans
up its table, and whose Spark checkpoint and consumer group are gone too, resumes
exactly where its table says, from the txn actions the checkpoint kept."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.ops.status import connector_status
from floeline.sources.kafka import KafkaCluster, group_id
from floeline.warehouse import delta_log
from floeline.worker.offsets import connector_offsets
from floeline.warehouse.positions import _MARK, committed_in_log

pytestmark = pytest.mark.integration

DAY_S = 24 * 3600


def produce_numbered(kafka, topic, start, count):
    from floeline.sources.kafka import produce

    produce(kafka, topic, [{"value": {"n": start + i}, "partition": (start + i) % 2} for i in range(count)])


def age_log(table_path: str, days: int) -> None:
    """Set the times of every file of the table's log `days` back, as if written then."""
    log = os.path.join(table_path, "_delta_log")
    past = time.time() - days * DAY_S
    for name in os.listdir(log):
        os.utime(os.path.join(log, name), (past, past))


def test_a_connector_resumes_after_another_engine_cleaned_up_the_log(kafka, topic_name, make_config, spark,
                                                                     run_connector, read_table, warehouse):
    from deltalake import DeltaTable

    topic = topic_name("cleanup")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic, **{"buffer.count.records": "500"})
    produce_numbered(kafka, topic, 0, 3000)
    run_connector(config)
    table_path = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    assert read_table(topic.upper()).count() == 3000

    # A month and more later, another engine compacts the table, checkpoints it and
    # deletes the log files past their retention (30 days by default).
    age_log(table_path, 40)
    table = DeltaTable(table_path)
    table.optimize.compact()
    table.create_checkpoint()
    table.cleanup_metadata()
    left = [c.user_metadata for c in delta_log.commits_newest_first(table_path)]
    assert not any(m and _MARK in m for m in left), "a commit with positions is still in the log"
    held, _commit = committed_in_log(table_path, config.name)
    assert held.positions == {f"{topic}/0": "1499", f"{topic}/1": "1499"}  # from the checkpoint's txns
    status = connector_status(config)  # `floeline status` reads the same
    assert {c.channel: c.committed for c in status.tables[0].channels} == held.positions
    offsets = connector_offsets(config, spark)  # and GET /connectors/{name}/offsets
    assert sorted(o["offset"]["kafka_offset"] for o in offsets) == [1500, 1500]  # the next to read

    # The Spark checkpoint is lost and the consumer group expired.
    shutil.rmtree(config.checkpoint_dir)
    KafkaCluster(kafka).delete_group(group_id(config.name))
    produce_numbered(kafka, topic, 3000, 1000)
    connector = run_connector(config)

    assert sum(r.records_read for r in connector.reports) == 1000
    rows = read_table(topic.upper()).selectExpr("RECORD_METADATA:partition::int AS p",
                                                "RECORD_METADATA:offset::bigint AS o").collect()
    coordinates = [(r["p"], r["o"]) for r in rows]
    assert len(coordinates) == len(set(coordinates)) == 4000
    assert set(coordinates) == {(p, o) for p in (0, 1) for o in range(2000)}
