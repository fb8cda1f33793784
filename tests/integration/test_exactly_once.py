"""Exactly once per channel: restarts, a replayed batch, a deleted checkpoint and a
SIGKILL mid-stream never duplicate or lose a row."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.config import load_config
from floeline.sources.kafka import produce
from floeline.sql.script import run_sql
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse import delta_log
from floeline.warehouse.position_txns import held_in_txns

pytestmark = pytest.mark.integration


def coordinates(df):
    """Every (partition, offset) in the table, from RECORD_METADATA."""
    return [(r["p"], r["o"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect()]


def assert_exactly_once(df, expected_per_partition: dict[int, int]):
    coords = coordinates(df)
    assert len(coords) == len(set(coords)), "duplicate rows"
    expected = {(p, o) for p, n in expected_per_partition.items() for o in range(n)}
    assert set(coords) == expected, f"missing {sorted(expected - set(coords))[:5]}"


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def produce_numbered(kafka, topic, partitions, start, count):
    produce(kafka, topic, [{"value": {"n": start + i}, "partition": (start + i) % partitions}
                           for i in range(count)])


def test_restart_resumes_without_duplicates(kafka, topic_name, make_config, run_connector,
                                            read_table):
    topic = topic_name("restart")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic)
    produce_numbered(kafka, topic, 2, 0, 10)
    run_connector(config)
    run_connector(config)  # nothing new: writes nothing
    produce_numbered(kafka, topic, 2, 10, 10)
    run_connector(config)
    assert_exactly_once(read_table(topic.upper()), {0: 10, 1: 10})


def test_replayed_batch_is_not_written_twice(kafka, topic_name, make_config, run_connector,
                                             read_table):
    """A crash after the table commit but before Spark's checkpoint commit makes Spark
    replay the batch; the table's offsets make the replay a no-op."""
    topic = topic_name("replay")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic)
    produce_numbered(kafka, topic, 1, 0, 5)
    run_connector(config)
    commits = os.path.join(config.checkpoint_dir, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    connector = run_connector(config)
    assert connector.reports[0].batch_id == last and connector.reports[0].skipped == 5
    assert_exactly_once(read_table(topic.upper()), {0: 5})


def test_deleted_checkpoint_resumes_from_table_offsets(kafka, topic_name, make_config,
                                                       run_connector, read_table):
    topic = topic_name("nockpt")
    devkafka.create_topic(kafka, topic, partitions=3)
    config = make_config(topics=topic)
    produce_numbered(kafka, topic, 3, 0, 30)
    run_connector(config)
    shutil.rmtree(config.checkpoint_dir)
    produce_numbered(kafka, topic, 3, 30, 15)
    connector = run_connector(config)
    assert sum(r.records_read for r in connector.reports) == 15  # started after the table's offsets
    assert_exactly_once(read_table(topic.upper()), {0: 15, 1: 15, 2: 15})


def test_sigkill_mid_stream_then_restart(kafka, topic_name, tmp_path, warehouse, spark, read_table,
                                        run_connector):
    """A connector process killed with SIGKILL while records flow; after a restart every
    (partition, offset) is in the table exactly once. A second process (this test)
    queries the table while the connector writes."""
    topic = topic_name("kill")
    partitions = 3
    devkafka.create_topic(kafka, topic, partitions=partitions)
    config_file = tmp_path / "kill.properties"
    config_file.write_text("\n".join([
        "name=killtest", f"topics={topic}", f"bootstrap.servers={kafka}",
        f"floeline.warehouse={warehouse}", "buffer.flush.time=1", "buffer.count.records=150",
        "snowflake.topic2table.map=" + f"{topic}:KILLED"]) + "\n")
    produce_numbered(kafka, topic, partitions, 0, 3000)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    total = 3000
    try:
        deadline = time.time() + 240
        while time.time() < deadline and sum(l.startswith("batch ") for l in lines) < 4:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.5)
        assert sum(l.startswith("batch ") for l in lines) >= 4, "".join(lines)
        # More records arrive while it runs; then a second process reads the table.
        produce_numbered(kafka, topic, partitions, total, 1500)
        total += 1500
        seen = run_sql(spark, "SELECT count(*) AS n FROM KILLED", Warehouse(warehouse)).first()["n"]
        assert seen > 0
        time.sleep(1.5)
        jvms = children(proc.pid)
        assert jvms, "the connector's Spark JVM"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # Its JVM goes with it (resources/java/ParentWatch.java), before anything is restarted:
        # left running, it went on planning batches and committing beside the restart.
        deadline = time.time() + 5
        while time.time() < deadline and any(alive(pid) for pid in jvms):
            time.sleep(0.05)
        assert not any(alive(pid) for pid in jvms), "the killed connector's JVM still runs"
    finally:
        if proc.poll() is None:
            proc.kill()
    produce_numbered(kafka, topic, partitions, total, 600)
    total += 600
    # Started again on the killed process's checkpoint and table (in this process: the
    # state it resumes from is all on disk).
    config = load_config(str(config_file))
    spark_log = {d: sorted(os.listdir(os.path.join(config.checkpoint_dir, d)))
                 for d in ("offsets", "commits")}
    run_connector(config)
    df = read_table("KILLED")
    try:
        assert_exactly_once(df, {p: len(range(p, total, partitions)) for p in range(partitions)})
    except AssertionError:
        print("the killed process printed:\n" + "".join(lines))
        print(f"its Spark checkpoint: {spark_log}")
        print(table_history(spark, os.path.join(warehouse, "FLOELINE", "PUBLIC", "KILLED")))
        raise


def table_history(spark, path: str) -> str:
    """The table's commits (version, operation, rows, positions): what a failure needs."""
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    return "\n".join(f"v{r['version']} {r['operation']} rows={(r['operationMetrics'] or {}).get('numOutputRows')} "
                     f"{r['userMetadata']}" for r in rows)


def test_sigterm_to_the_process_group_stops_cleanly(kafka, topic_name, tmp_path, warehouse):
    """SIGTERM to `floeline run`'s whole process group (what a service manager or a
    terminal sends), reaching Spark's JVM first: a clean stop, exit 0, no traceback."""
    topic = topic_name("term")
    devkafka.create_topic(kafka, topic)
    config_file = tmp_path / "term.json"
    config_file.write_text(
        '{"name": "termtest", "config": {"topics": "%s", "bootstrap.servers": "%s", '
        '"floeline.warehouse": "%s", "buffer.flush.time": "1"}}' % (topic, kafka, warehouse))
    produce_numbered(kafka, topic, 1, 0, 5)
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not any(l.startswith("batch ") for l in lines):
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.5)
        jvm = subprocess.run(["pgrep", "-P", str(proc.pid), "java"], capture_output=True,
                             text=True).stdout.split()
        assert jvm, "no JVM child"
        for pid in jvm:  # the JVM first, then everyone in the group
            os.kill(int(pid), signal.SIGTERM)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(120) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in "".join(lines), "".join(lines)


def test_table_written_before_sources_resumes_from_its_kafka_offsets(
        kafka, topic_name, make_config, run_connector, read_table, spark, warehouse):
    """Tables written by floeline before the source seam hold Kafka offsets as
    [topic, partition, offset] triples in their commits; they still say where to resume."""
    import json as _json

    topic = topic_name("legacy")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic)
    produce_numbered(kafka, topic, 2, 0, 6)
    run_connector(config)
    table = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    # The newest commit carries the offsets the way that floeline wrote them.
    legacy = _json.dumps({"floeline.channels": {"connector": config.name,
                                                "offsets": [[topic, 0, 2], [topic, 1, 2]]}})
    empty = spark.read.format("delta").load(table).limit(0)
    empty.write.format("delta").mode("append").option("userMetadata", legacy).save(table)
    shutil.rmtree(config.checkpoint_dir)
    produce_numbered(kafka, topic, 2, 6, 4)
    connector = run_connector(config)
    assert sum(r.records_read for r in connector.reports) == 4
    assert_exactly_once(read_table(topic.upper()), {0: 5, 1: 5})
    # Its next commit moved the table to positions as txn actions (what checkpoints keep).
    snapshot = delta_log.transactions(table)
    held = held_in_txns(config.name, snapshot.versions)
    assert held is not None and held.stamp == snapshot.version


def test_replay_after_the_error_table_commit_keeps_bad_records_out_of_the_table(
        kafka, topic_name, make_config, run_connector, read_table, warehouse):
    """A crash after the error table's commit and before the table's (found by
    bench/chaos.py): the replay finds the bad records held by the error table already,
    and they must not land in the table as empty rows instead."""
    topic = topic_name("errreplay")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic, errors__tolerance="all")
    produce(kafka, topic, [{"n": 0}, b'{"broken": ', {"n": 2}])
    run_connector(config)
    table = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    log = os.path.join(table, "_delta_log")
    last = max(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
    if last == 0:
        # The commit of the table's rows created it: as if killed before that commit,
        # there is no table at all.
        shutil.rmtree(table)
    for name in (f"{last:020d}.json", f".{last:020d}.json.crc", f"{last:020d}.crc",
                 f".{last:020d}.crc.crc"):
        if last > 0 and os.path.exists(os.path.join(log, name)):
            os.remove(os.path.join(log, name))  # as if killed before the table's commit
    commits = os.path.join(config.checkpoint_dir, "commits")
    for name in os.listdir(commits):  # and before Spark's: the batch is replayed
        os.remove(os.path.join(commits, name))
    connector = run_connector(config)
    assert connector.reports[0].records_read == 3
    assert sorted(coordinates(read_table(topic.upper()))) == [(0, 0), (0, 2)]
    assert read_table(f"{topic.upper()}_ERRORS").count() == 1
