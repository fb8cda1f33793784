"""snowflake.ingestion.method=SNOWPIPE on the real broker, Spark and Delta: records go
through gzip JSON files in the connector's internal stage, loaded by the table's pipe;
loaded files are removed, a crash's leftovers never duplicate a record."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.ingest import snowpipe_files
from floeline.ingest.snowpipe_sink import table_stage_dir
from floeline.sources.kafka import produce
from floeline.sql.script import run_sql
from floeline.warehouse import stage_store
from floeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.integration


def stage_root(warehouse: str, connector: str, table: str):
    name = snowpipe_files.stage_name(connector, table)
    return Warehouse(warehouse).root / "FLOELINE" / "PUBLIC" / stage_store.STAGE_FILES_DIR / name


def staged(warehouse, connector, table) -> list[str]:
    root = stage_root(warehouse, connector, table)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def rows_of(df):
    return [(json.loads(r["m"]), json.loads(r["c"])) for r in df.selectExpr(
        "to_json(RECORD_METADATA) AS m", "to_json(RECORD_CONTENT) AS c").collect()]


def test_snowpipe_method_stages_loads_and_cleans(kafka, topic_name, make_config, run_connector,
                                                 read_table, spark, warehouse):
    topic = topic_name("sp")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": {"n": i, "tags": ["a"]}, "partition": i % 2} for i in range(20)])
    config = make_config(topics=topic, **{"snowflake.ingestion.method": "SNOWPIPE"})
    connector = run_connector(config)
    table = topic.upper()
    df = read_table(table)
    assert [f.name for f in df.schema.fields] == ["RECORD_METADATA", "RECORD_CONTENT"]
    rows = rows_of(df)
    assert sorted(c["n"] for _m, c in rows) == list(range(20))
    assert all(c["tags"] == ["a"] for _m, c in rows)
    coords = sorted((m["partition"], m["offset"]) for m, _c in rows)
    assert coords == sorted((p, o) for p in (0, 1) for o in range(10))
    assert all(m["topic"] == topic for m, _c in rows)
    for m, c in rows:  # offset order within a partition: n = 2 * offset + partition
        assert c["n"] == 2 * m["offset"] + m["partition"]
    assert sum(r.rows_written.get(table, 0) for r in connector.reports) == 20
    assert staged(warehouse, config.name, table) == []  # loaded files are removed
    wh = Warehouse(warehouse)
    # stored as JSON text by default (floeline.variant.storage=json): delta-rs reads it
    from deltalake import DeltaTable

    stored = DeltaTable(wh.table("FLOELINE", "PUBLIC", table).path).to_pyarrow_table().to_pylist()
    key = json.dumps
    assert sorted(key([json.loads(r["RECORD_METADATA"]), json.loads(r["RECORD_CONTENT"])], sort_keys=True)
                  for r in stored) == sorted(key(list(row), sort_keys=True) for row in rows), \
        "delta-rs reads what Spark reads"
    stage = snowpipe_files.stage_name(config.name, table)
    assert stage in [r["name"] for r in run_sql(spark, "SHOW STAGES", wh).collect()]
    pipes = {r["name"]: r for r in run_sql(spark, "SHOW PIPES", wh).collect()}
    assert pipes[snowpipe_files.pipe_name(config.name, table)]["kind"] == "STAGE"
    run_connector(config)  # nothing new: nothing written twice
    assert read_table(table).count() == 20


def test_leftover_file_from_a_crash_is_removed_and_records_land_once(
        kafka, topic_name, make_config, run_connector, read_table, warehouse):
    topic = topic_name("spcrash")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic, **{"snowflake.ingestion.method": "SNOWPIPE"})
    table = topic.upper()
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(10)])
    run_connector(config)
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(10, 20)])
    # A crash after the files of the next batch were written, before their load: a file
    # of partition 1 covering offsets 5..9, not committed yet, is left in the stage.
    leftover = snowpipe_files.file_name(config.name, table, 1, "5", "9", int(time.time() * 1000))
    path = stage_root(warehouse, config.name, table) / leftover
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"meta": {"topic": topic, "partition": 1, "offset": o}, "content": {"n": 2 * o + 1}})
             for o in range(5, 10)]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    run_connector(config)
    rows = rows_of(read_table(table))
    coords = [(m["partition"], m["offset"]) for m, _c in rows]
    assert len(coords) == len(set(coords)) == 20
    assert sorted(c["n"] for _m, c in rows) == list(range(20))
    assert staged(warehouse, config.name, table) == []


def test_file_that_fails_to_load_goes_to_the_table_stage(kafka, topic_name, make_config,
                                                         run_connector, read_table, spark, warehouse):
    topic = topic_name("spfail")
    devkafka.create_topic(kafka, topic, partitions=1)
    table = topic.upper()
    # A user-made table whose RECORD_CONTENT is a NUMBER: an object does not fit it, so
    # the pipe (ON_ERROR=SKIP_FILE) fails the file.
    run_sql(spark, f"CREATE TABLE {table} (RECORD_METADATA VARIANT, RECORD_CONTENT NUMBER)",
            Warehouse(warehouse)).collect()
    produce(kafka, topic, [{"value": {"n": i}} for i in range(3)])
    config = make_config(topics=topic, **{"snowflake.ingestion.method": "SNOWPIPE"})
    connector = run_connector(config)
    assert read_table(table).count() == 0
    assert connector.row_errors == {f"FLOELINE.PUBLIC.{table}": 3}
    assert any(r.failed_files for r in connector.reports)
    moved = sorted(p.name for p in table_stage_dir(Warehouse(warehouse),
                                                   Warehouse(warehouse).table("FLOELINE", "PUBLIC", table))
                   .rglob("*") if p.is_file())
    assert len(moved) == 2 and moved[0].endswith(".json.gz") and moved[1].endswith(".error.json")
    assert staged(warehouse, config.name, table) == []
    run_connector(config)  # positions moved past the failed file: it is not loaded again
    assert read_table(table).count() == 0


def test_sigkill_between_file_write_and_load(kafka, topic_name, tmp_path, warehouse, run_connector,
                                             read_table):
    """A connector process SIGKILLed the moment its first files are in the stage (before
    their load commits, or before their removal); started again, every record is in the
    table once and the stage is empty."""
    import os
    import signal
    import subprocess
    import sys

    from floeline.config import load_config

    topic = topic_name("spkill")
    devkafka.create_topic(kafka, topic, partitions=2)
    table = topic.upper()
    config_file = tmp_path / "spkill.properties"
    config_file.write_text("\n".join([
        "name=spkill", f"topics={topic}", f"bootstrap.servers={kafka}", f"floeline.warehouse={warehouse}",
        "snowflake.ingestion.method=SNOWPIPE", "buffer.flush.time=1", "buffer.count.records=200"]) + "\n")
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(600)])
    root = stage_root(warehouse, "spkill", table)
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            if any(p.is_file() for p in root.glob("spkill/**/*.json.gz")):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL, "the connector ended before it staged a file"
    finally:
        if proc.poll() is None:
            proc.kill()
    left = staged(warehouse, "spkill", table)
    assert left, "the kill left no file in the stage"
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(600, 800)])
    run_connector(load_config(str(config_file)))  # started again, in this process
    rows = rows_of(read_table(table))
    coords = [(m["partition"], m["offset"]) for m, _c in rows]
    assert len(coords) == len(set(coords)) == 800
    assert sorted(c["n"] for _m, c in rows) == list(range(800))
    assert staged(warehouse, "spkill", table) == []
