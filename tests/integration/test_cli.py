"""The command line as a user runs it: `floeline kafka`, `floeline run`, `floeline sql`
in processes of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce

pytestmark = pytest.mark.integration


def floeline(*args, env=None, timeout=300, cwd=None, input_text=None):
    return subprocess.run([sys.executable, "-m", "floeline.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})), cwd=cwd,
                          input=input_text)


def test_kafka_start_is_idempotent_and_stop_stops(tmp_path):
    state = str(tmp_path / "broker")
    port = str(devkafka._pick_controller_port(29192))
    first = floeline("kafka", "start", "--state-dir", state, "--port", port)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"bootstrap.servers=127.0.0.1:{port}"
    again = floeline("kafka", "start", "--state-dir", state, "--port", port)
    assert again.stdout == first.stdout
    assert floeline("kafka", "status", "--state-dir", state).returncode == 0
    assert floeline("kafka", "stop", "--state-dir", state).stdout.strip() == "stopped"
    assert floeline("kafka", "status", "--state-dir", state).returncode == 1


def test_run_then_sql_from_another_process(kafka, topic_name, tmp_path, warehouse):
    topic = topic_name("cli")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"value": {"order_id": 1, "customer_name": "John"}, "key": "k1"},
                           {"value": {"order_id": 2, "customer_name": "Łukasz"}}])
    config = tmp_path / "c.properties"
    config.write_text(f"name=clitest\ntopics={topic}\nbootstrap.servers={kafka}\n"
                      f"floeline.warehouse={warehouse}\nsnowflake.topic2table.map={topic}:CLI_ORDERS\n"
                      f"snowflake.url.name=acct.example.com\n")
    run = floeline("run", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    assert "batch 0: read=2 written[CLI_ORDERS=2]" in run.stdout
    assert "snowflake.url.name" in run.stderr  # accepted, reported as ignored
    # One process, the warehouse from the environment, two statements: the first prints
    # its rows, the second names the missing table.
    query = floeline("sql", "--format", "json",
                     "SELECT order_id, customer_name, record_metadata:topic::string AS t "
                     "FROM public.cli_orders ORDER BY order_id; SELECT * FROM NOPE",
                     env={"FLOELINE_WAREHOUSE": warehouse})
    rows = [json.loads(line) for line in query.stdout.splitlines()]
    assert rows == [{"order_id": 1, "customer_name": "John", "t": topic},
                    {"order_id": 2, "customer_name": "Łukasz", "t": topic}]
    assert query.returncode == 1 and "table NOPE not found" in query.stderr


def test_run_reports_unreachable_broker(tmp_path, warehouse):
    config = tmp_path / "c.properties"
    # An unreachable broker is a transient error (one still starting looks the same):
    # retried for errors.retry.timeout (default 2 minutes), then a clear stop.
    config.write_text(f"name=x\ntopics=a\nbootstrap.servers=127.0.0.1:1\nfloeline.warehouse={warehouse}\n"
                      f"errors.retry.timeout=1000\n")
    run = floeline("run", str(config), "--until-caught-up", timeout=120)
    assert run.returncode == 1
    assert "Kafka Metadata at bootstrap.servers=127.0.0.1:1 still failing after" in run.stderr
    assert "Check that the broker is running and reachable" in run.stderr
    assert "(errors.retry.timeout=1000)" in run.stderr


def test_kafka_produce_sends_json_lines_with_their_key_and_headers(kafka, topic_name, tmp_path):
    from confluent_kafka import Consumer

    topic = topic_name("produce")
    lines = tmp_path / "orders.jsonl"
    lines.write_text('{"order_id": 1, "customer_name": "John"}\n\n{"order_id": 2}\n')
    sent = floeline("kafka", "produce", topic, str(lines), "--bootstrap-servers", kafka,
                    "--key-field", "order_id", "--header", "source=cli")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == f"produced 2 records to topic {topic!r} at bootstrap.servers={kafka}"
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value(), message.headers()))
    consumer.close()
    assert got == [(b"1", b'{"order_id": 1, "customer_name": "John"}', [("source", b"cli")]),
                   (b"2", b'{"order_id": 2}', [("source", b"cli")])]
    bad = floeline("kafka", "produce", topic, "-", "--bootstrap-servers", kafka, "--key-field", "id",
                   input_text='{"order_id": 3}\n')
    assert bad.returncode == 1 and "stdin line 1 has no field 'id' (--key-field)" in bad.stderr


def test_sql_errors_are_one_line_with_the_fix_and_the_trace_in_the_log(tmp_path):
    from floeline.spark import driver_log_path

    script = tmp_path / "q.sql"
    script.write_text("SELECT 1 AS a;      -- a comment after it\n-- a comment before the next\n"
                      "SELECT 2 AS b;\nSELECT parse_json('{\"id\": 1}') AS v\n  ORDER BY v:id\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = floeline("sql", "-f", str(script), "--warehouse", str(tmp_path / "warehouse"), cwd=tmp_path,
                   env={"TMPDIR": str(scratch)})
    assert run.returncode == 1
    # Spark's scratch space is the process's own folder, and no jar was copied into it
    # (spark.py: local_dir_conf, local_class_path: 108 MB per start left in /tmp before)
    (folder,) = (scratch / f"floeline-spark-{os.getuid()}").iterdir()
    assert folder.name.isdigit() and any(folder.iterdir())
    assert not list(scratch.rglob("*.jar")), list(scratch.rglob("*.jar"))
    assert [line for line in run.stdout.splitlines() if line.startswith("-- ")] == [
        "-- SELECT 1 AS a", "-- SELECT 2 AS b"]
    assert run.stderr.count("\n") == 1, run.stderr  # one line: no JSON, no JVM stack trace
    assert run.stderr.startswith("error: statement at line 4 (SELECT parse_json('{\"id\": 1}') AS v): "
                                 "query failed at line 5, col 12: ORDER BY v:id: a VARIANT value has "
                                 "no order; cast it to a type, e.g. ORDER BY v:id::NUMBER"), run.stderr
    assert f"its trace in {driver_log_path()}" in run.stderr
    assert "INVALID_ORDERING_TYPE" in driver_log_path().read_text(errors="replace")[-200000:]
    assert not (tmp_path / "spark-warehouse").exists()
