"""The Kinesis connector end to end, as a user runs it: records put into a real local
Kinesis (kinesis-local), `floeline run` (the Connector), the Delta table queried, the
DynamoDB lease table (moto) read back. Exactly once per (shard, sequence number) across
restarts, lost checkpoints, wiped leases, SIGKILL, splits and merges."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from floeline.errors import RecordError
from floeline.sql.script import run_script, run_sql
from floeline.warehouse.catalog import Warehouse

from kinesis_io import (
    adjacent_pair, create_stream, dynamodb, merge, open_shards, put, put_aggregated, read_all,
    split, stream_name)

pytestmark = pytest.mark.integration


@pytest.fixture
def kinesis_config(aws, warehouse):
    """A Kinesis ConnectorConfig for the local services and the test warehouse."""
    from floeline.config import config_from_dict

    def make(streams: str, **settings):
        name = f"k{uuid.uuid4().hex[:6]}"
        base = {"name": name, "floeline.source": "kinesis", "kinesis.stream.name": streams,
                "kinesis.application.name": f"app-{name}", "aws.region": aws.region,
                "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
                "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
                "floeline.warehouse": warehouse, "buffer.flush.time": "1"}
        base.update({k.replace("__", "."): str(v) for k, v in settings.items()})
        return config_from_dict(base)
    return make


def coordinates(df) -> list[tuple]:
    """(shardId, sequenceNumber, subSequenceNumber) of every row, from RECORD_METADATA."""
    return [(r["s"], r["q"], r["u"]) for r in df.selectExpr(
        "RECORD_METADATA:shardId::string AS s", "RECORD_METADATA:sequenceNumber::string AS q",
        "RECORD_METADATA:subSequenceNumber::bigint AS u").collect()]


def assert_exactly_once(df, placed: list[tuple[str, str]]) -> None:
    coords = coordinates(df)
    assert len(coords) == len(set(coords)), "duplicate rows"
    assert {(s, q) for s, q, _u in coords} == set(placed)


def orders(start: int, count: int) -> list[dict]:
    return [{"order_id": start + i, "customer_name": f"c{(start + i) % 7}",
             "order_total": 10.5 + i, "isPaid": i % 2 == 0} for i in range(count)]


def lease_items(aws, application: str) -> dict[str, dict]:
    items = dynamodb(aws).scan(TableName=application)["Items"]
    return {i["leaseKey"]["S"]: i for i in items}


def test_stream_creates_its_table_and_the_lease_table_mirrors_progress(
        aws, kinesis_config, run_connector, read_table, spark, warehouse):
    stream = stream_name("orders")  # a '-' in the name: the table is "ORDERS-..." (quoted)
    create_stream(aws, stream, shards=2)
    placed = put(aws, stream, orders(1, 12))
    config = kinesis_config(stream)
    connector = run_connector(config)
    df = read_table(stream.upper())
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {"RECORD_METADATA": "variant", "ORDER_ID": "decimal(38,0)",
                     "CUSTOMER_NAME": "string", "ORDER_TOTAL": "double", "ISPAID": "boolean"}
    assert_exactly_once(df, placed)
    meta = json.loads(df.where("ORDER_ID = 1").first()["RECORD_METADATA"].toJson())
    assert set(meta) == {"stream", "shardId", "sequenceNumber", "partitionKey",
                         "approximateArrivalTimestamp", "SnowflakeConnectorPushTime"}
    assert (meta["stream"], meta["partitionKey"]) == (stream, "k0")
    assert (meta["shardId"], meta["sequenceNumber"]) == placed[0]
    assert len(meta["sequenceNumber"]) > 19  # past 64 bits: kept as text
    assert meta["SnowflakeConnectorPushTime"] >= meta["approximateArrivalTimestamp"]
    # The table is queried by its quoted name.
    rows = run_sql(spark, f'SELECT count(*) AS n FROM "{stream.upper()}"', Warehouse(warehouse)).first()
    assert rows["n"] == 12
    # KCL's lease table: one item per shard, checkpoint = the last sequence number.
    last = {}
    for shard, seq in placed:
        last[shard] = max(last.get(shard, seq), seq, key=lambda s: (len(s), s))
    items = lease_items(aws, config.kinesis.application_name)
    assert {k: i["checkpoint"]["S"] for k, i in items.items() if k in last} == last
    assert all("leaseOwner" not in i for i in items.values())  # released on a clean stop
    assert connector.reports[-1].records_read >= 0


def test_hand_made_table_is_used_as_it_is(aws, kinesis_config, run_connector, read_table,
                                          spark, warehouse):
    stream = stream_name("hand").replace("-", "_")
    create_stream(aws, stream, shards=1)
    run_script(spark, f"CREATE TABLE {stream.upper()} (ORDER_ID NUMBER, CUSTOMER_NAME VARCHAR, "
                      "ORDER_TOTAL FLOAT, ISPAID BOOLEAN, RECORD_METADATA VARIANT)", Warehouse(warehouse))
    put(aws, stream, orders(1, 3))
    run_connector(kinesis_config(stream))
    df = read_table(stream.upper())
    assert df.columns == ["ORDER_ID", "CUSTOMER_NAME", "ORDER_TOTAL", "ISPAID", "RECORD_METADATA"]
    assert sorted(int(r["ORDER_ID"]) for r in df.collect()) == [1, 2, 3]


def test_restart_lost_checkpoint_and_wiped_leases_never_duplicate(
        aws, kinesis_config, run_connector, read_table):
    stream = stream_name("restart")
    create_stream(aws, stream, shards=2)
    placed = put(aws, stream, orders(0, 20))
    config = kinesis_config(stream, buffer__count__records=4)
    first = run_connector(config)
    assert len(first.reports) >= 3
    placed += put(aws, stream, orders(20, 10))
    run_connector(config)  # resumes from the Spark checkpoint
    placed += put(aws, stream, orders(30, 10))
    shutil.rmtree(config.checkpoint_dir)  # Spark's checkpoint lost ...
    dynamodb(aws).delete_table(TableName=config.kinesis.application_name)  # ... and the leases
    again = run_connector(config)
    assert sum(r.records_read for r in again.reports) == 10  # resumed after the table's positions
    assert_exactly_once(read_table(stream.upper()), placed)


def test_sigkill_mid_stream_then_restart(aws, kinesis_config, tmp_path, read_table, run_connector):
    stream = stream_name("kill")
    create_stream(aws, stream, shards=2)
    config = kinesis_config(stream, buffer__count__records=10)
    config_file = tmp_path / "kill.properties"
    config_file.write_text("\n".join(f"{k}={v}" for k, v in config.raw.items()) + "\n")
    placed = put(aws, stream, orders(0, 60))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        deadline = time.time() + 240
        while time.time() < deadline and sum(l.startswith("batch ") for l in lines) < 2:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.3)
        assert sum(l.startswith("batch ") for l in lines) >= 2, "".join(lines)
        placed += put(aws, stream, orders(60, 30))
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    placed += put(aws, stream, orders(90, 10))
    # The killed process never released its leases: the restart (in this process, on
    # the killed one's checkpoint) takes them over once they expire, then resumes from
    # the table.
    run_connector(config)
    assert_exactly_once(read_table(stream.upper()), placed)


def test_split_and_merge_keep_order_per_partition_key(aws, kinesis_config, run_connector,
                                                       read_table):
    stream = stream_name("reshard")
    create_stream(aws, stream, shards=2)
    keys = [f"key{i}" for i in range(8)]
    counter = iter(range(10 ** 6))

    def put_round(count: int):
        records = [{"key": keys[i % len(keys)], "n": next(counter)} for i in range(count)]
        return put(aws, stream, records, key=lambda _i, r: r["key"])

    config = kinesis_config(stream, buffer__count__records=5)
    placed = put_round(24)
    run_connector(config)  # the parents are read (and left open) before the split
    placed += put_round(16)
    split(aws, stream, open_shards(aws, stream)[0])
    placed += put_round(24)
    merge(aws, stream, *adjacent_pair(open_shards(aws, stream)))
    placed += put_round(24)
    connector = run_connector(config)
    assert len(connector.reports) >= 4
    df = read_table(stream.upper())
    assert_exactly_once(df, placed)
    rows = df.selectExpr("KEY AS k", "CAST(N AS BIGINT) AS n",
                         "RECORD_METADATA:SnowflakeConnectorPushTime::bigint AS batch").collect()
    for key in keys:  # per key, later records never land in an earlier batch
        mine = sorted((r["n"], r["batch"]) for r in rows if r["k"] == key)
        assert [b for _n, b in mine] == sorted(b for _n, b in mine), key


def test_kpl_aggregated_records_become_one_row_each(aws, kinesis_config, run_connector, read_table):
    stream = stream_name("kpl")
    create_stream(aws, stream, shards=1)
    placed = []
    for a in range(3):
        users = [(f"user{a}-{i}", json.dumps({"agg": a, "i": i}).encode()) for i in range(30)]
        placed.append(put_aggregated(aws, stream, f"outer{a}", users))
    placed += put(aws, stream, [{"agg": -1, "i": 0}])  # a plain record between them
    run_connector(kinesis_config(stream, buffer__count__records=20))
    df = read_table(stream.upper())
    coords = coordinates(df)
    assert len(coords) == 91 and len(set(coords)) == 91
    assert {(s, q) for s, q, _u in coords} == set(placed)
    row = json.loads(df.where("AGG = 1 AND I = 7").first()["RECORD_METADATA"].toJson())
    assert (row["subSequenceNumber"], row["partitionKey"]) == (7, "user1-7")
    plain = json.loads(df.where("AGG = -1").first()["RECORD_METADATA"].toJson())
    assert "subSequenceNumber" not in plain
    # An aggregated record is never split across batches (commits).
    batches = df.selectExpr("AGG AS a", "RECORD_METADATA:SnowflakeConnectorPushTime::bigint AS b")
    per_aggregate = {r["a"]: set() for r in batches.collect()}
    for r in batches.collect():
        per_aggregate[r["a"]].add(r["b"])
    assert all(len(b) == 1 for b in per_aggregate.values())


def test_bad_records_go_to_the_error_table_or_the_dead_letter_stream(
        aws, kinesis_config, run_connector, read_table):
    stream = stream_name("bad")
    create_stream(aws, stream, shards=1)
    placed = put(aws, stream, [{"n": 1}, b"{broken", {"n": 3}, b"[1, 2]"])
    run_connector(kinesis_config(stream, errors__tolerance="all"))
    assert sorted(int(r["N"]) for r in read_table(stream.upper()).collect()) == [1, 3]
    errors = sorted(read_table(stream.upper() + "_ERRORS").collect(), key=lambda r: len(r["RECORD_VALUE"]))
    assert [e["RECORD_VALUE"] for e in errors] == [b"[1, 2]", b"{broken"]
    source = json.loads(errors[1]["RECORD_SOURCE"].toJson())
    assert (source["stream"], source["shardId"], source["sequenceNumber"]) == (stream, *placed[1])
    assert errors[1]["RECORD_CHANNEL"] == f"{stream}/{placed[1][0]}"

    dlq = stream_name("dlq")
    create_stream(aws, dlq, shards=1)
    run_connector(kinesis_config(stream, errors__tolerance="all",
                                 errors__deadletterqueue__stream__name=dlq))
    letters = [json.loads(r["Data"]) for r in read_all(aws, dlq)]
    assert sorted(letters, key=lambda d: d["sequenceNumber"])[0]["sequenceNumber"] == placed[1][1]
    first = next(d for d in letters if d["sequenceNumber"] == placed[1][1])
    assert first["stage"] == "value converter" and first["stream"] == stream
    assert first["error"] and first["shardId"] == placed[1][0]


def test_errors_tolerance_none_stops_at_the_bad_record(aws, kinesis_config, run_connector):
    stream = stream_name("stop")
    create_stream(aws, stream, shards=1)
    placed = put(aws, stream, [{"n": 1}, b"not json"])
    with pytest.raises(RecordError) as failure:
        run_connector(kinesis_config(stream))
    assert f"stream={stream} shardId={placed[1][0]} sequenceNumber={placed[1][1]}" in str(failure.value)


def test_at_timestamp_and_latest_starts(aws, kinesis_config, run_connector, read_table, spark):
    from floeline.ingest import Connector

    stream = stream_name("starts")
    create_stream(aws, stream, shards=1)
    put(aws, stream, orders(0, 3))
    time.sleep(1.2)
    boundary = int(time.time() * 1000)
    time.sleep(0.2)
    later = put(aws, stream, orders(3, 2))
    run_connector(kinesis_config(stream, kinesis__initial__position="AT_TIMESTAMP",
                                 kinesis__initial__timestamp=str(boundary)))
    assert_exactly_once(read_table(stream.upper()), later)

    latest = stream_name("latest")
    create_stream(aws, latest, shards=1)
    put(aws, latest, orders(0, 3))  # before the connector starts: not read with LATEST
    connector = Connector(kinesis_config(latest, kinesis__initial__position="LATEST"), spark)
    runner = threading.Thread(target=connector.run, daemon=True)
    runner.start()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not connector.reports:
            time.sleep(0.2)
        time.sleep(0.5)
        fresh = put(aws, latest, orders(100, 2))
        while time.time() < deadline and sum(r.records_read for r in connector.reports) < 2:
            assert connector.failure is None, connector.failure
            time.sleep(0.2)
    finally:
        connector.stop()
        runner.join(120)
    assert_exactly_once(read_table(latest.upper()), fresh)


def test_two_streams_into_two_tables(aws, kinesis_config, run_connector, read_table):
    first, second = stream_name("one"), stream_name("two")
    create_stream(aws, first, shards=1)
    create_stream(aws, second, shards=2)
    placed_first = put(aws, first, orders(0, 4))
    placed_second = put(aws, second, [{"other": i} for i in range(5)])
    config = kinesis_config(f"{first},{second}")
    run_connector(config)
    assert_exactly_once(read_table(first.upper()), placed_first)
    assert_exactly_once(read_table(second.upper()), placed_second)
    # Several streams: KCL's multi-stream lease keys (account:stream:epoch:shardId).
    keys = lease_items(aws, config.kinesis.application_name)
    assert {k.split(":")[1] for k in keys} == {first, second}


def test_a_second_connector_with_the_same_application_waits_as_a_standby(
        aws, kinesis_config, read_table, spark, tmp_path, caplog):
    """The standby runs elsewhere (a Spark checkpoint of its own, the same warehouse):
    what the active run commits while the standby waits is not read again. That it
    waits is seen in its log (it names the leases' holder), not after a fixed 3 s; it
    has read nothing then, nor once the active run has read the next records."""
    from floeline.config import config_from_dict
    from floeline.ingest import Connector

    stream = stream_name("standby")
    create_stream(aws, stream, shards=1)
    config = kinesis_config(stream)
    placed = put(aws, stream, orders(0, 3))
    active = Connector(config, spark)
    active_run = threading.Thread(target=active.run, daemon=True)
    active_run.start()

    def active_read(count: int) -> None:
        deadline = time.time() + 120
        while time.time() < deadline and sum(r.records_read for r in active.reports) < count:
            time.sleep(0.2)
        assert sum(r.records_read for r in active.reports) >= count

    active_read(3)
    elsewhere = config_from_dict({**config.raw, "floeline.checkpoint.dir": str(tmp_path / "standby")})
    standby = Connector(elsewhere, spark)
    standby_run = threading.Thread(target=lambda: standby.run(until_caught_up=True), daemon=True)
    standby_run.start()
    waiting = f"lease table {config.kinesis.application_name}: waiting for leases held by other workers"
    deadline = time.time() + 60
    while not any(waiting in r.getMessage() for r in list(caplog.records)):
        assert standby_run.is_alive(), standby.failure
        assert time.time() < deadline, "the standby did not say it waits for the leases"
        time.sleep(0.1)
    assert standby_run.is_alive() and not standby.reports  # waiting for the leases
    placed += put(aws, stream, orders(100, 4))  # committed by the active run meanwhile
    active_read(7)
    assert standby_run.is_alive() and not standby.reports  # still waiting
    active.stop()
    active_run.join(120)
    placed += put(aws, stream, orders(3, 2))
    standby_run.join(180)
    assert not standby_run.is_alive() and standby.failure is None
    assert_exactly_once(read_table(stream.upper()), placed)


def test_kafka_converters_and_transforms_work_on_kinesis_records(aws, kinesis_config,
                                                                run_connector, read_table):
    stream = stream_name("smt")
    create_stream(aws, stream, shards=1)
    put(aws, stream, [[1, 2], [3]])
    hoist = "org.apache.kafka.connect.transforms.HoistField$Value"
    run_connector(kinesis_config(stream, transforms="wrap", transforms__wrap__type=hoist,
                                 transforms__wrap__field="payload",
                                 value__converter="org.apache.kafka.connect.json.JsonConverter",
                                 value__converter__schemas__enable="false"))
    rows = read_table(stream.upper()).selectExpr("PAYLOAD", "RECORD_METADATA:stream::string AS s").collect()
    assert sorted(json.loads(r["PAYLOAD"].toJson()) for r in rows) == [[1, 2], [3]]
    assert {r["s"] for r in rows} == {stream}
