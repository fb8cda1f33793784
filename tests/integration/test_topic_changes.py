"""A Kafka topic that changes under a connector (issue 53), with either reader: a topic
deleted and created again (told apart by its topic id), a topic deleted, a partition
whose end is now before the committed offset, partitions added while it runs. By
default the connector stops with an error naming the topic, partition, committed and
available offsets and the fix, and commits nothing; floeline.kafka.fail.on.data.loss=false
reads the new records from their start instead, and the table's history says so.
Never a stall, never a skip."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import SourceChanged
from floeline.sources.base import Committed
from floeline.sources.kafka import produce
from floeline.warehouse.offsets_changes import OffsetsChange, commit_offsets_change, offsets_changes
from floeline.warehouse.positions import committed_in_log

pytestmark = pytest.mark.integration

READERS = pytest.mark.parametrize("reader", ["grouped", "spark"])
GO_ON = {"floeline__kafka__fail__on__data__loss": "false"}


def numbered(kafka, topic, partitions, start, count):
    """Records {"n": start..start+count}, record n to partition n % partitions."""
    produce(kafka, topic, [{"value": {"n": n}, "partition": n % partitions}
                           for n in range(start, start + count)])


def numbers(read_table, table) -> list[int]:
    return sorted(int(r["N"]) for r in read_table(table).select("N").collect())


def recreate(kafka, topic, partitions):
    devkafka.delete_topic(kafka, topic)
    devkafka.create_topic(kafka, topic, partitions=partitions)


class Running:
    """A connector running in a thread, as `floeline run` runs it; `error`: what its run
    raised."""

    def __init__(self, connector):
        self.connector, self.error = connector, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.connector.run()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.error = exc

    def stop(self, timeout_s: float = 120):
        self.connector.stop()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the connector did not stop"


@READERS
def test_a_topic_created_again_while_stopped_stops_the_connector_until_told_to_read_it_from_its_start(
        kafka, topic_name, make_config, run_connector, read_table, spark, reader):
    topic = topic_name("again")
    devkafka.create_topic(kafka, topic, partitions=2)
    numbered(kafka, topic, 2, 0, 20)  # offsets 0-9 in each partition
    config = make_config(topics=topic, floeline__kafka__reader=reader)
    run_connector(config)
    recreate(kafka, topic, 2)
    numbered(kafka, topic, 2, 100, 30)  # offsets 0-14: past where the old topic ended

    with pytest.raises(SourceChanged) as stopped:
        run_connector(config)
    message = str(stopped.value)
    assert f"topic {topic} partition 0: recreated: the topic was deleted and created again" in message
    assert "committed offset 9; available: offsets 0-14" in message
    assert f"PATCH /connectors/{config.name}/offsets" in message
    assert "floeline.kafka.fail.on.data.loss=false" in message
    assert numbers(read_table, topic.upper()) == list(range(20))  # nothing committed

    # Told to go on: the new topic from its start, and the table's history says why.
    going_on = run_connector(make_config(name=config.name, topics=topic, floeline__kafka__reader=reader,
                                         **GO_ON))
    assert numbers(read_table, topic.upper()) == list(range(20)) + list(range(100, 130))
    change = offsets_changes(spark, going_on.pipeline.table_ref(topic), config.name)[0]
    assert change["requested_by"] == f"connector {config.name} (floeline.kafka.fail.on.data.loss=false)"
    assert f"{topic}/0: recreated" in change["reason"] and f"{topic}/1: recreated" in change["reason"]
    # The new topic's id is the table's now: the default goes on from there.
    numbered(kafka, topic, 2, 130, 4)
    run_connector(config)
    assert numbers(read_table, topic.upper()) == list(range(20)) + list(range(100, 134))


@READERS
@pytest.mark.parametrize("go_on", [False, True], ids=["shorter-stops", "longer-goes-on"])
def test_a_topic_created_again_while_the_connector_runs(
        kafka, topic_name, make_config, read_table, spark, wait_for_rows, reader, go_on):
    """Created again with fewer records than the connector had read, the partitions' ends
    are before the next offsets to read: the reader's own checks (Spark's data-loss checks,
    ported to floeline's reader) fail the query, where floeline's reader used to wait for
    the new topic to pass the old offsets and then skip its first records. With more
    records than before, only the topic's id tells the two apart (checked before each
    batch); told to go on, the connector reads the new topic from its start."""
    from floeline.ingest import Connector

    topic = topic_name("live")
    devkafka.create_topic(kafka, topic, partitions=2)
    numbered(kafka, topic, 2, 0, 20)
    settings = GO_ON if go_on else {}
    running = Running(Connector(make_config(topics=topic, floeline__kafka__reader=reader, **settings), spark))
    try:
        wait_for_rows(topic.upper(), 20, running.connector, timeout_s=120)
        recreate(kafka, topic, 2)
        numbered(kafka, topic, 2, 100, 40 if go_on else 4)  # offsets 0-19, or 0-1
        if go_on:
            wait_for_rows(topic.upper(), 60, running.connector, timeout_s=120)
        else:
            running.thread.join(120)
    finally:
        running.stop()
    if go_on:
        assert running.error is None
        assert numbers(read_table, topic.upper()) == list(range(20)) + list(range(100, 140))
        reasons = [c["reason"] for c in offsets_changes(spark, running.connector.pipeline.table_ref(topic),
                                                         running.connector.config.name)]
        assert reasons and f"{topic}/0" in reasons[-1]
    else:
        assert isinstance(running.error, SourceChanged), running.error
        assert not isinstance(running.error.__cause__, SourceChanged)  # the reader's own check
        message = str(running.error)
        # Seen deleted, or deleted and created again: either way, named with its offsets.
        assert f"topic {topic} partition 0: " in message and "committed offset 9" in message
        assert "floeline.kafka.fail.on.data.loss=false" in message
        assert numbers(read_table, topic.upper()) == list(range(20))


@READERS
def test_a_deleted_topic_stops_the_connector_and_is_read_from_its_start_when_it_comes_back(
        kafka, topic_name, make_config, run_connector, read_table, spark, reader):
    topic = topic_name("gone")
    devkafka.create_topic(kafka, topic, partitions=2)
    numbered(kafka, topic, 2, 0, 10)
    config = make_config(topics=topic, floeline__kafka__reader=reader)
    going_on = make_config(name=config.name, topics=topic, floeline__kafka__reader=reader, **GO_ON)
    run_connector(config)
    devkafka.delete_topic(kafka, topic)

    with pytest.raises(SourceChanged) as stopped:
        run_connector(config)
    assert f"topic {topic} partition 1: gone: the topic was deleted; committed offset 4" in str(stopped.value)
    if reader == "grouped":  # Spark's source fails on a subscribed topic that does not exist
        ref = run_connector(going_on).pipeline.table_ref(topic)
        held = committed_in_log(ref.path, config.name)[0]
        assert held.positions == {} and held.earliest == {f"{topic}/0", f"{topic}/1"}
    devkafka.create_topic(kafka, topic, partitions=2)  # back: read from its first record
    numbered(kafka, topic, 2, 100, 6)
    if reader == "spark":  # the positions still are the deleted topic's
        with pytest.raises(SourceChanged, match="recreated: the topic was deleted and created again"):
            run_connector(config)
        run_connector(going_on)
    else:
        run_connector(config)
    assert numbers(read_table, topic.upper()) == list(range(10)) + list(range(100, 106))


@READERS
def test_a_partition_that_now_ends_before_its_committed_offset_stops_the_connector(
        kafka, topic_name, make_config, run_connector, read_table, spark, reader):
    """A table an older floeline wrote holds no topic id: the first run records it
    without a word; a topic created again then shows as a partition whose end is before
    its committed offset."""
    topic = topic_name("behind")
    devkafka.create_topic(kafka, topic, partitions=1)
    numbered(kafka, topic, 1, 0, 10)
    written = run_connector(make_config(topics=topic, floeline__kafka__reader=reader))
    ref = written.pipeline.table_ref(topic)
    # Connector `old`'s position in that table, as a floeline before topic ids wrote it.
    old = make_config(name=f"old{topic[-6:]}", topics=topic, floeline__kafka__reader=reader)
    commit_offsets_change(spark, ref, old.name, Committed(), Committed({f"{topic}/0": "9"}),
                          OffsetsChange("a test: a table of an older floeline", "alter"))
    assert committed_in_log(ref.path, old.name)[0].epochs == {}
    numbered(kafka, topic, 1, 10, 2)
    run_connector(old)
    assert committed_in_log(ref.path, old.name)[0].epochs == written.source.epochs  # recorded now
    assert numbers(read_table, topic.upper()) == list(range(12))

    # Another table for `old`, again without the id, and the topic created again, shorter.
    commit_offsets_change(spark, ref, old.name + "b", Committed(), Committed({f"{topic}/0": "11"}),
                          OffsetsChange("a test: a table of an older floeline", "alter"))
    older = make_config(name=old.name + "b", topics=topic, floeline__kafka__reader=reader)
    recreate(kafka, topic, 1)
    numbered(kafka, topic, 1, 100, 5)
    with pytest.raises(SourceChanged) as stopped:
        run_connector(older)
    assert (f"topic {topic} partition 0: behind: the partition now ends at offset 5, before the next "
            f"offset to read, 12" in str(stopped.value))
    assert "committed offset 11; available: offsets 0-4" in str(stopped.value)
    run_connector(make_config(name=older.name, topics=topic, floeline__kafka__reader=reader, **GO_ON))
    assert numbers(read_table, topic.upper()) == list(range(12)) + list(range(100, 105))


@READERS
def test_partitions_added_while_running_then_a_sigkill_and_a_catch_up_land_every_record_once(
        kafka, topic_name, tmp_path, warehouse, read_table, run_connector, reader):
    """2 -> 6 partitions mid-stream: the new ones are read from their first offset (floeline's
    reader lists the topics every 10 s, Spark's each batch); the process is killed, and a
    catch-up run lands the rest: every (partition, offset) once."""
    from floeline.config import load_config

    topic = topic_name("grow")
    devkafka.create_topic(kafka, topic, partitions=2)
    config_file = tmp_path / "grow.properties"
    config_file.write_text("\n".join([
        f"name=grow{reader}", f"topics={topic}", f"bootstrap.servers={kafka}",
        f"floeline.warehouse={warehouse}", "buffer.flush.time=1", "buffer.count.records=200",
        f"floeline.kafka.reader={reader}"]) + "\n")
    numbered(kafka, topic, 2, 0, 1000)
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        wait_until(lambda: any(line.startswith("batch ") for line in lines), proc, lines)
        devkafka.add_partitions(kafka, topic, 6)
        numbered(kafka, topic, 6, 1000, 3000)  # 500 in each partition, the new ones too
        wait_until(lambda: partitions_in(read_table, topic.upper()) > {0, 1}, proc, lines)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    numbered(kafka, topic, 6, 4000, 600)
    run_connector(load_config(str(config_file)))
    coords = [(r["p"], r["o"]) for r in read_table(topic.upper()).selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect()]
    assert len(coords) == len(set(coords)), "duplicate rows"
    per_partition = {p: 500 + 500 + 100 for p in (0, 1)} | {p: 500 + 100 for p in range(2, 6)}
    assert set(coords) == {(p, o) for p, n in per_partition.items() for o in range(n)}


def wait_until(predicate, proc, lines, timeout_s: float = 120):
    deadline = time.time() + timeout_s
    while not predicate():
        assert proc.poll() is None, "".join(lines)
        assert time.time() < deadline, "".join(lines)
        time.sleep(0.5)


def partitions_in(read_table, table) -> set[int]:
    try:
        return {r["p"] for r in read_table(table).selectExpr("RECORD_METADATA:partition::int AS p")
                .distinct().collect()}
    except Exception:  # noqa: BLE001 - not created yet
        return set()
