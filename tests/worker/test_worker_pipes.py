"""floeline.pipes=true: the warehouse's auto-ingest pipes run in the worker beside its
connectors, in the same Spark session."""

from __future__ import annotations

import io
import json

import pytest

from floeline.dev import kafka as devkafka
from floeline.sql.script import run_script
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.storage import LocalStorage
from floeline.worker.herder import Herder
from floeline.worker.process import _start_pipes
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import (assert_exactly_once, kafka, produce_numbered, spark,  # noqa: F401
                             table_path, topic_name, wait_for, wait_rows)

pytestmark = pytest.mark.integration


def test_pipes_load_landed_files_beside_a_running_connector(spark, kafka, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    stage = tmp_path / "landing"
    stage.mkdir()
    wh = Warehouse(warehouse)
    run_script(spark, f"""CREATE TABLE events (payload VARIANT, src VARCHAR);
        CREATE STAGE landing URL='file://{stage}/' FILE_FORMAT=(TYPE=JSON);
        CREATE PIPE events_pipe AUTO_INGEST=TRUE AS
          COPY INTO events FROM (SELECT $1, METADATA$FILENAME FROM @landing)""", wh)
    topic = topic_name("withpipes")
    devkafka.create_topic(kafka, topic)
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka,
                                          "floeline.pipes": "true"})
    out = io.StringIO()
    herder = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=out)
    service, thread = _start_pipes(spark, wh, out)
    try:
        herder.create("streams", {"topics": topic, "buffer.flush.time": "1"})
        produce_numbered(kafka, topic, 1, 0, 100)
        (stage / "1.json").write_text('{"a":1}\n{"a":2}\n')
        wait_rows(spark, warehouse, topic.upper(), 100)

        def loaded():
            df = spark.read.format("delta").load(table_path(warehouse, "EVENTS"))
            return sorted((json.loads(r["PAYLOAD"].toJson())["a"], r["SRC"]) for r in df.collect())
        wait_for("the pipe's load", lambda: loaded() == [(1, "1.json"), (2, "1.json")], 180)
        (stage / "2.json").write_text('{"a":3}\n')
        produce_numbered(kafka, topic, 1, 100, 20)
        wait_for("the second file", lambda: len(loaded()) == 3, 180)
        wait_rows(spark, warehouse, topic.upper(), 120)
        assert_exactly_once(spark, warehouse, topic.upper(), 120, 1)
        assert "[pipes] " in out.getvalue() and "[streams] batch " in out.getvalue()
    finally:
        service.request_stop()
        thread.join(120)
        herder.close()
    assert not thread.is_alive()
