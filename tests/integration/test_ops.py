"""Operating a connector: its /metrics, /healthz and /ready while it runs against the
real broker, and `floeline status` (its own process, no Spark) on the table it wrote,
while it runs and after it stopped."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from floeline.dev import kafka as devkafka
from floeline.ingest import Connector
from floeline.ops.http import OpsServer
from floeline.sources.kafka import produce

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(base: str, connector: str) -> dict[tuple, float]:
    """{(sample name, label values other than connector...): value} of one connector."""
    status, text = get(base + "/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.pop("connector", None) == connector:
                samples[(s.name, *(v for _k, v in sorted(s.labels.items())))] = s.value
    return samples


def status(config_file, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "floeline.cli", "status", str(config_file), *args],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_metrics_probes_and_status(kafka, topic_name, make_config, spark, tmp_path, warehouse):
    topic = topic_name("ops")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": {"id": i}, "partition": i % 2} for i in range(10)]
            + [{"value": b"not json", "partition": 1}])
    settings = {"topics": topic, "errors.tolerance": "all", "floeline.metrics.port": "0",
                "floeline.metrics.host": "127.0.0.1", "floeline.metrics.ready.max.lag": "0"}
    config = make_config(**{k.replace(".", "__"): v for k, v in settings.items()})
    config_file = tmp_path / "ops.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in config.raw.items()))
    table = f"FLOELINE.PUBLIC.{topic.upper()}"
    p0, p1 = f"{topic}/0", f"{topic}/1"

    connector = Connector(config, spark, out=io.StringIO(), endpoints=OpsServer)
    thread = threading.Thread(target=connector.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 180
        while connector.ops_server is None and time.time() < deadline:
            time.sleep(0.1)
        base = f"http://127.0.0.1:{connector.ops_server.port}"
        while time.time() < deadline:
            m = scrape(base, config.name)
            # Every series asserted below, as the scrape may meet a batch under way
            # (one suite run, 2026-11-29, broke out with p0's committed position unset).
            if m.get(("floeline_channel_lag_records", p1)) == 0 and m.get(
                    ("floeline_table_rows_written_total", table)) == 10 and all(
                    m.get((f"floeline_channel_{name}_position", p0)) == 4
                    for name in ("processed", "committed", "latest")):
                break
            assert thread.is_alive(), connector.failure
            time.sleep(0.3)
        else:
            pytest.fail(f"no caught-up metrics in time: {m}")
        for name in ("processed", "committed", "latest"):
            assert (m[(f"floeline_channel_{name}_position", p0)],
                    m[(f"floeline_channel_{name}_position", p1)]) == (4, 5), name
        assert m[("floeline_channel_lag_records", p0)] == 0
        assert m[("floeline_records_read_total",)] == 11
        assert m[("floeline_table_row_errors_total", table)] == 1
        assert m[("floeline_table_dead_letter_records_total", "error_table", table)] == 1
        assert m[("floeline_batch_duration_seconds_count",)] >= 1
        assert m[("floeline_end_to_end_latency_seconds_count",)] >= 1
        assert m[("floeline_query_active",)] == 1
        assert get(base + "/healthz") == (200, "active\n")
        assert get(base + "/ready") == (200, "caught up: lag 0\n")

        # `floeline status` from another process while the connector runs.
        running = status(config_file, "--format", "json")
        assert running.returncode == 0, running.stderr
        (orders,) = json.loads(running.stdout)["tables"]
        assert orders["table"] == table and orders["rows"] == 10 and orders["lag"] == 0
        assert orders["error_table"] == table + "_ERRORS" and orders["error_rows"] == 1
        assert [(c["channel"], c["committed"], c["latest"], c["lag"]) for c in orders["channels"]] == [
            (p0, "4", "4", 0), (p1, "5", "5", 0)]
        log = os.path.join(config.warehouse, "FLOELINE", "PUBLIC", topic.upper(), "_delta_log")
        newest = max(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
        assert orders["last_commit"].endswith("Z") and orders["version"] == newest
    finally:
        connector.stop()
        thread.join(120)
    assert connector.failure is None
    assert connector.health() == (False, "ended: the connector stopped")
    assert not connector.readiness()[0]

    # Stopped, with more records in the topic: the lag shows them.
    produce(kafka, topic, [{"value": {"id": i}, "partition": 0} for i in range(3)])
    stopped = status(config_file)
    assert stopped.returncode == 0, stopped.stderr
    lines = stopped.stdout.splitlines()
    assert lines[0] == f"connector {config.name} (kafka)"
    assert lines[1].startswith(f"{table}: rows=10 last_commit=")
    assert lines[1].endswith(f"error_rows=1 ({table}_ERRORS) lag=3")
    assert lines[2].split() == ["CHANNEL", "COMMITTED", "LATEST", "LAG"]
    assert [line.split() for line in lines[3:5]] == [[p0, "4", "7", "3"], [p1, "5", "5", "0"]]


def test_kinesis_status_lag_is_the_oldest_waiting_record(aws, warehouse):
    """Kinesis has no newest sequence number to show: the lag is how long the oldest
    record after the committed position has waited."""
    from kinesis_io import create_stream, put, stream_name

    from floeline.config import config_from_dict
    from floeline.ops.status import connector_status
    from floeline.sources.kinesis.source import KinesisSource

    stream = stream_name("ops")
    create_stream(aws, stream, shards=1)
    placed = put(aws, stream, [{"id": i} for i in range(3)])
    config = config_from_dict({
        "name": "kops", "floeline.source": "kinesis", "kinesis.stream.name": stream,
        "kinesis.application.name": "app-kops", "aws.region": aws.region,
        "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
        "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
        "floeline.warehouse": warehouse})
    time.sleep(0.3)
    channel = f"{stream}/{placed[0][0]}"
    source = KinesisSource(config)
    assert source.heads() == {}  # (while running: not asked)
    caught_up = source.heads({channel: placed[-1][1]})[channel]
    behind = source.heads({channel: placed[0][1]})[channel]
    assert caught_up.latest is None and (caught_up.lag.value, caught_up.lag.unit) == (0, "ms")
    assert 300 <= behind.lag.value < 60_000 and behind.lag.unit == "ms"
    status = connector_status(config)  # nothing committed yet: from the shard's start
    (table,) = status.tables
    assert not table.exists and table.lag_unit == "ms" and table.lag >= 300
    assert [(c.channel, c.committed, c.latest) for c in table.channels] == [(channel, None, None)]


def test_row_count_from_spark_written_checkpoints(spark, tmp_path):
    """The Delta log read without Spark agrees with what Spark wrote: its checkpoint
    (at version 2) and a commit after it. (Deletion vectors: tests/unit/test_status.py;
    a DELETE here costs ~20 s of a cold Spark.)"""
    from floeline.warehouse import delta_log

    path = str(tmp_path / "T")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta "
              f"TBLPROPERTIES ('delta.checkpointInterval'='2')")
    for start in (0, 10, 20):
        spark.range(start, start + 10).write.format("delta").mode("append").save(path)
    names = os.listdir(os.path.join(path, "_delta_log"))
    assert f"{2:020d}.checkpoint.parquet" in names, names
    assert delta_log.row_count(path) == 30
