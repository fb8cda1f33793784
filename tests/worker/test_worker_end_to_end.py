"""`floeline worker` the way users run it: a real worker process driven only over
Connect's REST API (urllib). A Kafka and a Kinesis connector are POSTed, records land
in their tables, offsets, topics, pause/resume and /metrics answer for both; then a
third connector fails on a bad record (FAILED with its trace) while the other two keep
landing new records, and a restart retries it."""

from __future__ import annotations

import importlib.util
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce
from test_worker_process import WorkerProcess
from worker_services import (assert_exactly_once, aws, coordinates, kafka, produce_numbered, spark,  # noqa: F401
                             table_committed, topic_name, wait_for, wait_rows)

pytestmark = pytest.mark.integration

_spec = importlib.util.spec_from_file_location(  # the Kinesis tests' producer helpers
    "floeline_kinesis_io", Path(__file__).resolve().parents[1] / "integration" / "kinesis_io.py")
kinesis_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kinesis_io)
create_stream, put, stream_name = kinesis_io.create_stream, kinesis_io.put, kinesis_io.stream_name


def call(url: str, method: str = "GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            payload = answer.read()
            kind = answer.headers.get("Content-Type", "")
            return answer.status, json.loads(payload) if payload and "json" in kind else payload.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def states(url: str) -> dict[str, str]:
    status, body = call(f"{url}/connectors?expand=status")
    assert status == 200, body
    return {name: entry["status"]["connector"]["state"] for name, entry in body.items()}


def wait_state(url: str, name: str, state: str, timeout: float = 180) -> None:
    wait_for(f"{name} {state}", lambda: states(url).get(name) == state, timeout)


def kinesis_rows(spark, warehouse: str, table: str) -> int:
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", table)
    if not table_committed(path):
        return 0
    return spark.read.format("delta").load(path).count()


def test_kafka_and_kinesis_connectors_over_rest_and_a_failing_one_isolated(
        kafka, aws, spark, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    topic, bad_topic = topic_name("e2e"), topic_name("e2ebad")
    devkafka.create_topic(kafka, topic, partitions=2)
    devkafka.create_topic(kafka, bad_topic)
    stream = stream_name("e2e")
    create_stream(aws, stream, shards=2)
    produce_numbered(kafka, topic, 2, 0, 200)
    put(aws, stream, [{"n": i} for i in range(40)])
    properties = tmp_path / "worker.properties"
    properties.write_text(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={warehouse}\n"
                          f"bootstrap.servers={kafka}\nfloeline.checkpoint.dir={tmp_path}/checkpoints\n")

    worker = WorkerProcess(properties)
    try:
        worker.wait_line("rest.url", lambda: any(l.startswith("rest.url=") for l in worker.lines))
        url = next(l for l in worker.lines if l.startswith("rest.url=")).strip().split("=", 1)[1]

        kafka_config = {"topics": topic, "buffer.flush.time": "1"}
        kinesis_config = {
            "floeline.source": "kinesis", "kinesis.stream.name": stream,
            "kinesis.application.name": "app-e2e", "aws.region": aws.region,
            "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
            "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
            "buffer.flush.time": "1"}
        for name, config in (("kafka-e2e", kafka_config), ("kinesis-e2e", kinesis_config)):
            status, body = call(f"{url}/connectors", "POST", {"name": name, "config": config})
            assert status == 201, body
        assert call(f"{url}/connectors/kinesis-e2e/config")[1]["aws.secret.access.key"] != aws.secret_access_key

        wait_state(url, "kafka-e2e", "RUNNING")
        wait_state(url, "kinesis-e2e", "RUNNING")
        wait_rows(spark, warehouse, topic.upper(), 200)
        kinesis_table = stream.upper()
        wait_for("40 Kinesis rows", lambda: kinesis_rows(spark, warehouse, kinesis_table) >= 40, 180, 1.0)
        assert_exactly_once(spark, warehouse, topic.upper(), 200, 2)
        assert kinesis_rows(spark, warehouse, kinesis_table) == 40

        # Offsets in both of Connect's sink shapes.
        status, body = call(f"{url}/connectors/kafka-e2e/offsets")
        assert status == 200
        assert sorted((o["partition"]["kafka_partition"], o["offset"]["kafka_offset"]) for o in body["offsets"]) \
            == [(0, 100), (1, 100)]
        assert {o["partition"]["kafka_topic"] for o in body["offsets"]} == {topic}
        status, body = call(f"{url}/connectors/kinesis-e2e/offsets")
        assert status == 200 and len(body["offsets"]) == 2
        assert all(o["partition"]["stream"] == stream and o["partition"]["shard"].startswith("shardId-")
                   and o["offset"]["sequence_number"].isdigit() for o in body["offsets"])

        assert call(f"{url}/connectors/kafka-e2e/topics") == (200, {"kafka-e2e": {"topics": [topic]}})

        # Pause: nothing lands; resume: it does.
        assert call(f"{url}/connectors/kafka-e2e/pause", "PUT")[0] == 202
        wait_state(url, "kafka-e2e", "PAUSED", 60)
        produce_numbered(kafka, topic, 2, 200, 50)
        time.sleep(4)
        assert len(coordinates(spark, warehouse, topic.upper())) == 200
        assert call(f"{url}/connectors/kafka-e2e/resume", "PUT")[0] == 202
        wait_state(url, "kafka-e2e", "RUNNING", 60)
        wait_rows(spark, warehouse, topic.upper(), 250)

        status, metrics = call(f"{url}/metrics")
        assert status == 200
        for name in ("kafka-e2e", "kinesis-e2e"):
            assert f'floeline_records_read_total{{connector="{name}"}}' in metrics

        # A connector that fails on a bad record: FAILED with its trace; the others land on.
        produce(kafka, bad_topic, [{"id": 1}, b'{"id": 2,', {"id": 3}])
        status, body = call(f"{url}/connectors", "POST",
                            {"name": "bad-e2e", "config": {"topics": bad_topic, "buffer.flush.time": "1"}})
        assert status == 201, body
        wait_state(url, "bad-e2e", "FAILED")
        status, body = call(f"{url}/connectors/bad-e2e/status")
        assert "RecordError" in body["connector"]["trace"] and "not valid JSON" in body["connector"]["trace"]
        assert body["tasks"][0]["state"] == "FAILED"
        produce_numbered(kafka, topic, 2, 250, 50)
        put(aws, stream, [{"n": i} for i in range(40, 60)])
        wait_rows(spark, warehouse, topic.upper(), 300)
        wait_for("60 Kinesis rows", lambda: kinesis_rows(spark, warehouse, kinesis_table) >= 60, 120, 1.0)
        assert states(url) == {"bad-e2e": "FAILED", "kafka-e2e": "RUNNING", "kinesis-e2e": "RUNNING"}

        # A restart retries it: the record is still bad, so it fails again with its trace.
        failures = worker.text.count("bad-e2e")
        status, body = call(f"{url}/connectors/bad-e2e/restart?includeTasks=true&onlyFailed=true", "POST")
        assert status == 202 and body["connector"]["state"] == "RESTARTING", body
        wait_for("bad-e2e retried", lambda: worker.text.count("bad-e2e") > failures, 60)
        wait_state(url, "bad-e2e", "FAILED")
        assert "not valid JSON" in call(f"{url}/connectors/bad-e2e/status")[1]["connector"]["trace"]

        # Deleted: gone from the list and from /metrics.
        assert call(f"{url}/connectors/bad-e2e", "DELETE")[0] == 204
        assert "bad-e2e" not in states(url)
        assert 'connector="bad-e2e"' not in call(f"{url}/metrics")[1]
        assert_exactly_once(spark, warehouse, topic.upper(), 300, 2)
    finally:
        worker.kill()
