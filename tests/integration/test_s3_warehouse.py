"""A warehouse on S3 (floeline.warehouse=s3a://bucket/prefix) against the local S3
(moto's server; s3a with path-style access, the endpoint and static keys): the tables,
the Spark checkpoint and its offset log read by the one-pass path, pipe and stage
definitions, `floeline sql`, `floeline status`, and one writer per table."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from floeline.dev import kafka as devkafka
from floeline.config import config_from_dict, load_config
from floeline.ingest import Connector
from floeline.ops.status import connector_status
from floeline.sources.kafka import produce
from floeline.sql.script import run_script
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.owners import TableOwned
from floeline.config.locations import S3Settings
from floeline.warehouse.tables import read_declared

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_warehouse(aws):
    """s3a://<a fresh bucket>/wh on the local S3."""
    bucket = f"wh-{uuid.uuid4().hex[:12]}"
    aws.client("s3").create_bucket(Bucket=bucket)
    return f"s3a://{bucket}/wh"


def s3_settings(aws) -> dict[str, str]:
    return {"floeline.warehouse.s3.endpoint": aws.moto_endpoint,
            "floeline.warehouse.s3.access.key.id": aws.access_key_id,
            "floeline.warehouse.s3.secret.access.key": aws.secret_access_key}


def s3_env(aws) -> dict[str, str]:
    """The same, as the AWS environment variables `floeline sql` reads."""
    return {"AWS_ENDPOINT_URL_S3": aws.moto_endpoint, "AWS_ACCESS_KEY_ID": aws.access_key_id,
            "AWS_SECRET_ACCESS_KEY": aws.secret_access_key, "AWS_REGION": aws.region}


def warehouse_of(aws, location: str) -> Warehouse:
    return Warehouse(location, S3Settings.from_settings(s3_settings(aws)))


def keys_under(aws, location: str) -> list[str]:
    bucket, _, prefix = location.removeprefix("s3a://").partition("/")
    pages = aws.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return [o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", [])]


def coordinates(spark, path: str) -> list[tuple[int, int, int]]:
    rows = read_declared(spark, path).selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o", "N").collect()
    return sorted((r["p"], r["o"], int(r["N"])) for r in rows)


def produce_numbered(kafka, topic, start, count, partitions=2):
    produce(kafka, topic, [{"value": {"n": start + i}, "partition": (start + i) % partitions}
                           for i in range(count)])


def expected(total, partitions=2):
    return sorted((n % partitions, n // partitions, n) for n in range(total))


def test_connector_into_an_s3_warehouse_resumes_exactly(kafka, topic_name, spark, aws, s3_warehouse):
    topic = topic_name("s3wh")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = config_from_dict({"name": f"c{uuid.uuid4().hex[:6]}", "topics": topic,
                               "bootstrap.servers": kafka, "floeline.warehouse": s3_warehouse,
                               "buffer.flush.time": "1", "buffer.count.records": "20",
                               **s3_settings(aws)})
    assert config.checkpoint_dir == f"{s3_warehouse}/_checkpoints/{config.name}"
    table = f"{s3_warehouse}/FLOELINE/PUBLIC/{topic.upper()}"

    produce_numbered(kafka, topic, 0, 60)
    first = Connector(config, spark)
    first.run(until_caught_up=True)
    assert coordinates(spark, table) == expected(60)
    # The batches after the first took the one pass, their positions read from Spark's
    # offset log on S3 (warehouse/storage.py), not the general path.
    assert any("one pass" in r.phases for r in first.reports[1:]), [r.line() for r in first.reports]
    stored = keys_under(aws, s3_warehouse)
    assert any(k.startswith(f"_checkpoints/{config.name}/offsets/") for k in stored)
    assert any(k.startswith(f"FLOELINE/PUBLIC/{topic.upper()}/_delta_log/") for k in stored)
    assert not any("_owners/" in k for k in stored)  # a clean stop releases the table

    # A restart on the checkpoint: only what is new.
    produce_numbered(kafka, topic, 60, 20)
    again = Connector(config, spark)
    again.run(until_caught_up=True)
    assert sum(r.records_read for r in again.reports) == 20
    assert coordinates(spark, table) == expected(80)

    # The checkpoint lost: resume from the positions the table holds on S3.
    warehouse_of(aws, s3_warehouse).storage.delete_tree(config.checkpoint_dir)
    produce_numbered(kafka, topic, 80, 10)
    fresh = Connector(config, spark)
    fresh.run(until_caught_up=True)
    assert sum(r.records_read for r in fresh.reports) == 10
    assert coordinates(spark, table) == expected(90)

    # floeline status reads the Delta log on S3 without Spark.
    status = connector_status(config)
    (shown,) = status.tables
    assert shown.rows == 90 and shown.version is not None and shown.owner is None
    assert {c.channel: c.committed for c in shown.channels} == {f"{topic}/0": "44", f"{topic}/1": "44"}
    assert all(c.lag == 0 for c in shown.channels)


def test_sql_pipes_and_stages_in_an_s3_warehouse(kafka, topic_name, spark, aws, s3_warehouse, tmp_path):
    """`floeline sql --warehouse s3a://...` (settings from the AWS environment) creates a
    table, a pipe and an S3 stage there; the connector applies the stored pipe; COPY
    loads the stage into a table of the S3 warehouse; queries read them."""
    topic = topic_name("s3pipe")
    devkafka.create_topic(kafka, topic, partitions=1)
    landing = f"landing-{uuid.uuid4().hex[:12]}"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=landing)
    s3.put_object(Bucket=landing, Key="in/a.json", Body=b'{"n":1}\n{"n":2}\n')
    script = tmp_path / "setup.sql"
    script.write_text(f"""
        CREATE TABLE ORDERS (order_id NUMBER, customer VARCHAR, topic VARCHAR);
        CREATE PIPE ORDERS AS COPY INTO ORDERS FROM (
          SELECT $1:order_id::NUMBER, UPPER($1:customer::STRING), $1:RECORD_METADATA.topic
          FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')));
        CREATE STAGE landing URL='s3://{landing}/in/' ENDPOINT='{aws.moto_endpoint}'
          CREDENTIALS=(AWS_KEY_ID='{aws.access_key_id}' AWS_SECRET_KEY='{aws.secret_access_key}')
          FILE_FORMAT=(TYPE=JSON);
        CREATE TABLE NUMS (v VARIANT);
        COPY INTO NUMS FROM @landing;
        SHOW PIPES;
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, "-m", "floeline.cli", "sql", "--warehouse", s3_warehouse,
                           "--format", "json", "-f", str(script)],
                          env={**env, **s3_env(aws)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"ORDERS"' in done.stdout and aws.secret_access_key not in done.stdout
    stored = keys_under(aws, s3_warehouse)
    assert "FLOELINE/PUBLIC/_pipes/ORDERS.json" in stored
    assert "FLOELINE/PUBLIC/_stages/LANDING.json" in stored
    assert any(k.startswith("FLOELINE/PUBLIC/NUMS/_delta_log/") for k in stored)

    produce(kafka, topic, [{"value": {"order_id": i, "customer": f"c{i}"}} for i in range(3)])
    config = config_from_dict({"name": f"c{uuid.uuid4().hex[:6]}", "topics": topic,
                               "snowflake.topic2table.map": f"{topic}:ORDERS",
                               "bootstrap.servers": kafka, "floeline.warehouse": s3_warehouse,
                               "buffer.flush.time": "1", **s3_settings(aws)})
    Connector(config, spark).run(until_caught_up=True)

    wh = warehouse_of(aws, s3_warehouse)
    results = run_script(spark, "SELECT order_id, customer, topic FROM orders ORDER BY order_id; "
                                "SELECT v:n::int AS n FROM nums ORDER BY n; SHOW STAGES", wh)
    assert [tuple(r) for r in results[0][1].collect()] == [(0, "C0", topic), (1, "C1", topic),
                                                           (2, "C2", topic)]
    assert [r["n"] for r in results[1][1].collect()] == [1, 2]
    assert [r["name"] for r in results[2][1].collect()] == ["LANDING"]


def test_a_second_writer_is_refused_and_a_killed_owner_is_taken_over(
        kafka, topic_name, spark, aws, s3_warehouse, tmp_path, caplog):
    """Delta on S3 takes one writer per table: a second connector writing the table is
    refused naming the owner; once the owner is SIGKILLed, its restart on the same host
    takes the table over at once and resumes exactly."""
    topic = topic_name("s3own")
    devkafka.create_topic(kafka, topic, partitions=2)
    settings = {"topics": topic, "bootstrap.servers": kafka, "floeline.warehouse": s3_warehouse,
                "buffer.flush.time": "1", "buffer.count.records": "50",
                # Long: a takeover that waited for the record to go stale would show.
                "floeline.warehouse.owner.timeout.ms": "600000",
                "snowflake.topic2table.map": f"{topic}:OWNED", **s3_settings(aws)}
    config_file = tmp_path / "owner.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in {"name": "owner_a", **settings}.items()))
    produce_numbered(kafka, topic, 0, 200)
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not any(l.startswith("batch ") for l in lines):
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.5)
        assert any(l.startswith("batch ") for l in lines), "".join(lines)

        second = config_from_dict({"name": "owner_b", **settings})
        with pytest.raises(TableOwned) as refused:
            Connector(second, spark).run(until_caught_up=True)
        message = str(refused.value)
        assert "table FLOELINE.PUBLIC.OWNED is being written by connector 'owner_a'" in message
        assert f"host {socket.gethostname()}, pid {proc.pid}" in message
        assert "after 600 s (floeline.warehouse.owner.timeout.ms)" in message
        owner = json.loads(warehouse_of(aws, s3_warehouse).storage.read_text(
            f"{s3_warehouse}/FLOELINE/PUBLIC/_owners/OWNED.json"))
        assert (owner["connector"], owner["pid"]) == ("owner_a", proc.pid)
        (shown,) = connector_status(second).tables
        assert shown.owner == f"owner_a@{socket.gethostname()}:{proc.pid}"

        produce_numbered(kafka, topic, 200, 100)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Its restart on this host: the recorded pid is gone, so the table is taken at once
    # (waiting for the record to go stale would take the 600 s timeout).
    with caplog.at_level(logging.WARNING, logger="floeline"):
        Connector(load_config(str(config_file)), spark).run(until_caught_up=True)
    assert any("taking over from connector 'owner_a'" in m and "its process is gone" in m
               for m in caplog.messages), caplog.messages
    assert not any("waiting" in m for m in caplog.messages if "owner record" in m)
    assert coordinates(spark, f"{s3_warehouse}/FLOELINE/PUBLIC/OWNED") == expected(300)
