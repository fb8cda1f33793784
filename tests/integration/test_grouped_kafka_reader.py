"""floeline's Kafka reader (floeline.kafka.reader=grouped, resources/java/GroupedKafka.java):
a consumer per Spark task, each assigned several topic partitions. What a user sees must
not change: every record once across restarts, a deleted checkpoint and a switch of
reader on the same checkpoint; buffer.count.records bounds a batch; topics.regex finds
new topics, also while back-to-back batches run (buffer.flush.time=0); records deleted
by retention before they were read stop the connector with an error that says so."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import FloelineError
from floeline.sources.kafka import produce

pytestmark = pytest.mark.integration


def produce_numbered(kafka, topic, partitions, start, count):
    produce(kafka, topic, [{"value": {"n": start + i}, "partition": (start + i) % partitions,
                            "headers": [("h", f"v{start + i}".encode())]}
                           for i in range(count)])


def assert_exactly_once(df, expected_per_partition: dict[int, int]):
    coords = [(r["p"], r["o"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect()]
    assert len(coords) == len(set(coords)), "duplicate rows"
    expected = {(p, o) for p, n in expected_per_partition.items() for o in range(n)}
    assert set(coords) == expected, f"missing {sorted(expected - set(coords))[:5]}"


def test_many_topics_land_once_across_restarts_a_deleted_checkpoint_and_a_switch_of_reader(
        kafka, topic_name, make_config, run_connector, read_table):
    topics = [topic_name(f"grouped{i}") for i in range(3)]
    for topic in topics:
        devkafka.create_topic(kafka, topic, partitions=3)
        produce_numbered(kafka, topic, 3, 0, 30)
    name = f"g{topic_name('n')[-6:]}"
    grouped = make_config(name=name, topics=",".join(topics), floeline__kafka__reader="grouped")
    first = run_connector(grouped)
    assert sum(r.records_read for r in first.reports) == 90
    assert len({r.batch_id for r in first.reports}) == len(first.reports)
    run_connector(grouped)  # nothing new: writes nothing
    for topic in topics:
        produce_numbered(kafka, topic, 3, 30, 9)
    # Spark's reader on the grouped reader's checkpoint: the same offsets in its log.
    spark_reader = make_config(name=name, topics=",".join(topics), floeline__kafka__reader="spark")
    assert sum(r.records_read for r in run_connector(spark_reader).reports) == 27
    for topic in topics:
        produce_numbered(kafka, topic, 3, 39, 6)
    assert sum(r.records_read for r in run_connector(grouped).reports) == 18
    shutil.rmtree(grouped.checkpoint_dir)
    for topic in topics:
        produce_numbered(kafka, topic, 3, 45, 3)
    # Without a checkpoint: from the offsets in the tables.
    assert sum(r.records_read for r in run_connector(grouped).reports) == 9
    for topic in topics:
        table = read_table(topic.upper())
        assert_exactly_once(table, {0: 16, 1: 16, 2: 16})
        headers = {r["n"]: r["h"] for r in table.selectExpr(
            "RECORD_CONTENT:n::int AS n" if "RECORD_CONTENT" in table.columns else "N::int AS n",
            "RECORD_METADATA:headers.h::string AS h").collect()}
        assert headers == {n: f"v{n}" for n in range(48)}


def test_the_default_reader_of_this_session_is_floelines(make_config, spark):
    """The session has floeline's reader jar (on the driver's class path, a local
    master's way): a config that names no reader reads with it, not Spark's source."""
    from floeline.jvm import KAFKA_READER_CLASS
    from floeline.sources.kafka import KafkaSource

    assert KafkaSource(make_config(topics="t"))._reader_format(spark) == KAFKA_READER_CLASS


def test_buffer_count_records_bounds_each_batch(kafka, topic_name, make_config, run_connector,
                                                read_table):
    topic = topic_name("gbounds")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(40)])
    connector = run_connector(make_config(topics=topic, buffer__count__records=5,
                                          floeline__kafka__reader="grouped"))
    assert [r.records_read for r in connector.reports] == [10, 10, 10, 10]
    assert_exactly_once(read_table(topic.upper()), {0: 20, 1: 20})


def open_reader_consumers(spark) -> int:
    """The reader's Kafka consumers open in this JVM: each registers its app-info MBean
    under its client.id, floeline-kafka-reader-<n>, until it is closed."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    # Through the public interface's Method: the server's own class is not exported to Py4J.
    types = gateway.new_array(jvm.java.lang.Class, 2)
    types[0] = jvm.java.lang.Class.forName("javax.management.ObjectName")
    types[1] = jvm.java.lang.Class.forName("javax.management.QueryExp")
    query_names = jvm.java.lang.Class.forName("javax.management.MBeanServer").getMethod("queryNames", types)
    args = gateway.new_array(jvm.java.lang.Object, 2)
    args[0] = jvm.javax.management.ObjectName("kafka.consumer:type=app-info,id=floeline-kafka-reader-*")
    return query_names.invoke(server, args).size()


def test_a_stopped_query_closes_every_consumer_it_opened(kafka, spark, topic_name, make_config,
                                                          read_table):
    topic = topic_name("gclose")
    devkafka.create_topic(kafka, topic, partitions=4)
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 4} for i in range(40)])
    from floeline.ingest import Connector

    before = open_reader_consumers(spark)
    seen = []

    class Counting(Connector):
        def process_batch(self, batch, batch_id):
            report = super().process_batch(batch, batch_id)
            seen.append(open_reader_consumers(spark))
            return report

    connector = Counting(make_config(topics=topic, buffer__count__records=5,
                                     floeline__kafka__reader="grouped"), spark)
    connector.run(until_caught_up=True)
    assert sum(r.records_read for r in connector.reports) == 40
    assert seen and max(seen) > before  # the batches read with consumers kept between them
    assert open_reader_consumers(spark) == before  # and the stopped query closed them all
    assert read_table(topic.upper()).count() == 40


def test_topics_regex_reads_every_matching_topic(kafka, topic_name, make_config, run_connector,
                                                 read_table):
    suffix = topic_name("gre")
    topics = [f"cat_{suffix}_1", f"cat_{suffix}_2"]
    for t in topics:
        devkafka.create_topic(kafka, t, partitions=2)
        produce(kafka, t, [{"value": {"n": i}, "partition": i % 2} for i in range(4)])
    run_connector(make_config(topics__regex=f"cat_{suffix}_.*", floeline__kafka__reader="grouped",
                              snowflake__topic2table__map=f"cat_{suffix}_.*:CATS_{suffix.upper()}"))
    assert read_table(f"CATS_{suffix.upper()}").count() == 8


def test_a_small_batch_is_read_in_one_task_and_commits_one_file(
        kafka, topic_name, make_config, run_connector, read_table):
    """A batch of fewer than MIN_RECORDS_PER_TASK (10,000) records is read in one task
    whatever its partitions: one Parquet file a commit, not one a partition (measured:
    p50 latency 1.25-1.42 s -> 1.14-1.16 s at 5,000 records/s, buffer.flush.time=1)."""
    from floeline.warehouse import delta_log

    topic = topic_name("gsmall")
    devkafka.create_topic(kafka, topic, partitions=4)
    config = make_config(topics=topic)
    for start in (0, 400):
        produce(kafka, topic, [{"value": {"n": start + i}, "partition": i % 4} for i in range(400)])
        connector = run_connector(config)
    assert sorted(int(r["N"]) for r in read_table(topic.upper()).collect()) == list(range(800))
    path = connector.pipeline.table_ref(topic).path
    assert len(delta_log.live_files(path)) == 2  # one a batch (a run each)


@pytest.mark.parametrize("reader", ["grouped", "spark"])
def test_a_wide_batch_is_read_in_at_most_the_task_limit_with_either_reader(
        kafka, topic_name, make_config, run_connector, read_table, spark, reader):
    """12 partitions of 3,000 records (more than the reader's 10,000 a task times the
    limit): floeline's reader plans at most read_task_limit tasks itself, so the
    connector does not plan the batch again to count them (`bounded_read_tasks`);
    Spark's source makes a task per partition, which the connector coalesces. Either
    way one commit of at most that many files, every record once."""
    from floeline.ingest.read_tasks import read_task_limit
    from floeline.warehouse import delta_log

    topic = topic_name(f"gwide_{reader}")
    devkafka.create_topic(kafka, topic, partitions=12)
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 12} for i in range(36_000)])
    connector = run_connector(make_config(topics=topic, floeline__kafka__reader=reader,
                                          buffer__count__records=5000))
    assert connector.source.bounded_read_tasks is (reader == "grouped")
    assert len(connector.reports) == 1
    assert read_table(topic.upper()).selectExpr("count(DISTINCT N) AS n", "count(*) AS c").first() == (36_000, 36_000)
    limit = read_task_limit(spark)
    assert limit < 12
    assert 1 <= len(delta_log.live_files(connector.pipeline.table_ref(topic).path)) <= limit


def test_back_to_back_batches_read_while_records_arrive_and_find_a_new_topic(
        kafka, topic_name, spark, make_config, read_table, wait_for_rows):
    """buffer.flush.time=0: a batch starts as soon as the one before ends. The reader
    lists the topics at most every TOPICS_MAX_AGE_MS (10 s), so a topic created while it
    runs is found within that and read from its start."""
    from floeline.ingest import Connector

    suffix = topic_name("b2b")
    first, second, table = f"bird_{suffix}_1", f"bird_{suffix}_2", f"BIRDS_{suffix.upper()}"
    devkafka.create_topic(kafka, first, partitions=2)
    connector = Connector(make_config(topics__regex=f"bird_{suffix}_.*", buffer__flush__time="0",
                                      snowflake__topic2table__map=f"bird_{suffix}_.*:{table}"), spark)
    assert connector.config.flush_time_s == 0
    runner = threading.Thread(target=connector.run, daemon=True)
    runner.start()
    try:
        for start in range(0, 30, 10):  # records arriving while batches run
            produce(kafka, first, [{"value": {"n": start + i}, "partition": i % 2} for i in range(10)])
            wait_for_rows(table, start + 10, connector, timeout_s=60)
        devkafka.create_topic(kafka, second, partitions=1)
        produce(kafka, second, [{"n": 100 + i} for i in range(5)])
        wait_for_rows(table, 35, connector, timeout_s=60)
    finally:
        connector.stop()
        runner.join(timeout=120)
    assert not runner.is_alive() and connector.failure is None
    assert len([r for r in connector.reports if r.records_read]) >= 4
    rows = read_table(table).selectExpr("RECORD_METADATA:topic::string AS t", "N").collect()
    assert sorted(int(r["N"]) for r in rows) == list(range(30)) + list(range(100, 105))
    assert {r["t"] for r in rows} == {first, second}


@pytest.mark.parametrize("reader", ["grouped", "spark"])
def test_records_deleted_before_they_were_read_stop_the_connector_and_say_so(
        kafka, topic_name, make_config, run_connector, read_table, reader):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = topic_name("gloss")
    devkafka.create_topic(kafka, topic, partitions=1)
    config = make_config(topics=topic, floeline__kafka__reader=reader)
    produce(kafka, topic, [{"n": i} for i in range(5)])
    run_connector(config)
    produce(kafka, topic, [{"n": i} for i in range(5, 10)])
    # Retention takes offsets 5-7 before the connector reads them.
    admin = AdminClient({"bootstrap.servers": kafka})
    for done in admin.delete_records([TopicPartition(topic, 0, 8)]).values():
        done.result(timeout=30)
    with pytest.raises(FloelineError) as failed:
        run_connector(config)
    assert (f"topic {topic} partition 0: lost: offsets 5-7 were deleted (retention) before they were "
            f"read; committed offset 4; available: offsets 8-9") in str(failed.value)
    assert read_table(topic.upper()).count() == 5  # nothing of the failed batch landed
    assert json.loads(read_table(topic.upper()).first()["RECORD_METADATA"].toJson())["partition"] == 0
    # Told to go on: from the earliest record there is.
    run_connector(make_config(name=config.name, topics=topic, floeline__kafka__reader=reader,
                              floeline__kafka__fail__on__data__loss="false"))
    assert sorted(int(r["N"]) for r in read_table(topic.upper()).collect()) == [0, 1, 2, 3, 4, 8, 9]


@pytest.mark.parametrize("option, value", [
    ("startingOffsetsByTimestamp", '{"t": {"0": 1000}}'), ("startingTimestamp", "1000"), ("assign", '{"t": [0]}'),
    ("minPartitions", "8"), ("maxTriggerDelay", "5m"), ("minOffsetsPerTrigger", "100"),
    ("failOnDataLoss", "false"), ("includeHeaders", "false"), ("kafka.group.id", "mine"),
    ("kafka.auto.offset.reset", "latest"), ("groupIdPrefix", "g"), ("endingOffsets", "latest"),
    ("noSuchOption", "1")])
def test_an_option_the_reader_does_not_implement_is_refused_when_the_stream_is_loaded(kafka, spark, option, value):
    from floeline.jvm import KAFKA_READER_CLASS

    reader = (spark.readStream.format(KAFKA_READER_CLASS).option("kafka.bootstrap.servers", kafka)
              .option("subscribe", "t").option(option, value))
    with pytest.raises(Exception) as refused:
        reader.load()
    message = str(refused.value)
    assert option in message and "floeline.kafka.reader=grouped" in message
    assert "floeline.kafka.reader=spark" in message or option == "noSuchOption"


def test_minus_one_in_starting_offsets_is_the_latest_offset(kafka, spark, topic_name):
    from floeline.jvm import KAFKA_READER_CLASS

    topic = topic_name("latest")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": {"n": i}, "partition": i % 2} for i in range(10)])
    counts = {}
    for start in (-1, -2):
        name = f"latest_{topic}_{-start}"
        query = (spark.readStream.format(KAFKA_READER_CLASS).option("kafka.bootstrap.servers", kafka)
                 .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": start}}))
                 .load().writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
        query.awaitTermination(120)
        counts[start] = spark.table(name).groupBy("partition").count().collect()
    assert sorted(tuple(r) for r in counts[-1]) == [(1, 5)]  # partition 0 from its end, 1 unnamed: earliest
    assert sorted(tuple(r) for r in counts[-2]) == [(0, 5), (1, 5)]


def test_a_partition_added_while_running_without_its_first_records_stops_the_connector(
        kafka, topic_name, make_config, run_connector, spark, read_table, wait_for_rows):
    """Spark's check, ported: a partition the reader first sees while the query runs must
    start at offset 0, else records were deleted before they were read (or, if the
    reader saw it first, its read finds them gone). The connector stops saying so; a
    start after that reads the partition, now known, from its earliest record."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from floeline.ingest import Connector

    topic = topic_name("gadded")
    devkafka.create_topic(kafka, topic, partitions=1)
    produce(kafka, topic, [{"value": {"n": i}, "partition": 0} for i in range(5)])
    config = make_config(topics=topic, floeline__kafka__reader="grouped")
    connector = Connector(config, spark)
    failed = []
    runner = threading.Thread(target=_run_catching, args=(connector, failed), daemon=True)
    runner.start()
    try:
        wait_for_rows(topic.upper(), 5, connector, timeout_s=120)
        devkafka.add_partitions(kafka, topic, 2)
        produce(kafka, topic, [{"value": {"n": 100 + i}, "partition": 1} for i in range(4)])
        # Retention takes its first two before the reader lists the topic again (10 s).
        admin = AdminClient({"bootstrap.servers": kafka})
        for done in admin.delete_records([TopicPartition(topic, 1, 2)]).values():
            done.result(timeout=30)
        runner.join(120)
    finally:
        connector.stop()
        runner.join(120)
    assert failed, "the connector read on"
    message = str(failed[0])
    assert (f"partition {topic}-1, added while the query ran, starts at offset 2, not 0" in message
            or "no longer has the records" in message), message
    assert read_table(topic.upper()).count() == 5
    run_connector(config)
    assert sorted(int(r["N"]) for r in read_table(topic.upper()).collect()) == [0, 1, 2, 3, 4, 102, 103]


def _run_catching(connector, failed):
    try:
        connector.run()
    except BaseException as exc:  # noqa: BLE001 - the test looks at it
        failed.append(exc)
