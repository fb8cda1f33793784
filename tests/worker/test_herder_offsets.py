"""The herder's offsets calls (KIP-875) over a running worker's connectors: refused
unless STOPPED, as Connect does; a change applied while stopped decides where the
connector resumes; initial_offsets on create apply before its first run."""

from __future__ import annotations

import io
from collections import Counter

import pytest

from floeline.dev import kafka as devkafka
from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import BadRequest
from floeline.worker.herder import Herder
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import (coordinates, kafka, produce_numbered, spark,  # noqa: F401
                             topic_name, wait_for, wait_rows)

pytestmark = pytest.mark.integration


def kafka_offsets(topic, nexts):
    return [{"partition": {"kafka_topic": topic, "kafka_partition": p}, "offset": {"kafka_offset": n}}
            for p, n in sorted(nexts.items())]


def test_offsets_through_the_herder(spark, kafka, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    topic = topic_name("hoff")
    devkafka.create_topic(kafka, topic)
    produce_numbered(kafka, topic, 1, 0, 20)
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka})
    herder = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=io.StringIO())
    try:
        herder.create("moves", {"topics": topic, "buffer.flush.time": "1"})
        wait_rows(spark, warehouse, topic.upper(), 20)
        assert herder.offsets("moves") == {"offsets": kafka_offsets(topic, {0: 20})}
        with pytest.raises(BadRequest, match="must be in the STOPPED state"):
            herder.alter_offsets("moves", kafka_offsets(topic, {0: 15}))
        herder.stop("moves")
        wait_for("STOPPED", lambda: herder.status("moves")["connector"]["state"] == "STOPPED")
        assert "altered successfully" in herder.alter_offsets("moves", kafka_offsets(topic, {0: 15}))
        herder.resume("moves")  # records 15..19 again: the replay asked for
        wait_rows(spark, warehouse, topic.upper(), 25)
        counts = Counter(coordinates(spark, warehouse, topic.upper()))
        assert counts == Counter({**{(0, o): 1 for o in range(15)}, **{(0, o): 2 for o in range(15, 20)}})

        # initial_offsets: created stopped, the offsets applied, then its initial state.
        herder.create("late", {"topics": topic, "buffer.flush.time": "1",
                               "snowflake.topic2table.map": f"{topic}:LATE"},
                      initial_offsets=kafka_offsets(topic, {0: 12}))
        wait_rows(spark, warehouse, "LATE", 8)
        assert sorted(coordinates(spark, warehouse, "LATE")) == [(0, o) for o in range(12, 20)]
        assert herder.store.load("late").target_state == "RUNNING"
    finally:
        herder.close()
