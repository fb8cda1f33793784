"""A topic deleted and created again under a worker's connector (issue 53): the connector
goes FAILED with the error that names the partitions, their offsets and the fix; the
offsets API (stop, PATCH, resume) moves it on to the new topic, every record once."""

from __future__ import annotations

import io

import pytest

from floeline.dev import kafka as devkafka
from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import BadRequest
from floeline.worker.herder import Herder
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import (kafka, produce_numbered, spark, table_path,  # noqa: F401
                             topic_name, wait_for, wait_rows)

pytestmark = pytest.mark.integration


def numbers(spark, warehouse, table) -> list[int]:
    return sorted(int(r["N"]) for r in spark.read.format("delta").load(table_path(warehouse, table)).collect())


def test_a_recreated_topic_fails_the_connector_until_its_offsets_are_moved_on(spark, kafka, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    topic = topic_name("wagain")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce_numbered(kafka, topic, 2, 0, 20)
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka})
    herder = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=io.StringIO())

    def state():
        return herder.status("again")["connector"]["state"]
    try:
        herder.create("again", {"topics": topic, "buffer.flush.time": "1"})
        wait_rows(spark, warehouse, topic.upper(), 20)
        devkafka.delete_topic(kafka, topic)
        devkafka.create_topic(kafka, topic, partitions=2)
        produce_numbered(kafka, topic, 2, 100, 40)  # offsets 0-19: past the old ones
        wait_for("FAILED", lambda: state() == "FAILED")
        trace = herder.status("again")["connector"]["trace"]
        assert f"topic {topic} partition 0: " in trace and "committed offset 9" in trace
        assert "PATCH /connectors/again/offsets" in trace
        assert numbers(spark, warehouse, topic.upper()) == list(range(20))

        herder.stop("again")
        wait_for("STOPPED", lambda: state() == "STOPPED")
        first = [{"partition": {"kafka_topic": topic, "kafka_partition": p}, "offset": None} for p in (0, 1)]
        with pytest.raises(BadRequest, match="give every partition of it the tables hold an offset"):
            herder.alter_offsets("again", first[:1])
        assert "altered successfully" in herder.alter_offsets("again", first)
        herder.resume("again")
        wait_rows(spark, warehouse, topic.upper(), 60)
        assert state() == "RUNNING"
        assert numbers(spark, warehouse, topic.upper()) == list(range(20)) + list(range(100, 140))
    finally:
        herder.close()
