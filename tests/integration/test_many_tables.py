"""One connector writing several tables: each table's share of a batch is read from
the batch merged into at most spark.default.parallelism partitions, not one task per
topic partition per table (bench/bench_scale.py: 100 topics x 4 partitions made
40,000 tasks a batch), and a table whose channels saw different key types gets
them merged by one job for all such tables, not a job per table."""

from __future__ import annotations

import json

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce
from floeline.warehouse import delta_log

pytestmark = pytest.mark.integration


def amount(i: int) -> float:
    return i if i % 4 == 0 else i + 0.25


def test_several_tables_are_written_from_few_partitions_exactly_once(
        kafka, topic_name, make_config, run_connector, read_table, spark):
    wide, narrow = topic_name("wide"), topic_name("narrow")
    devkafka.create_topic(kafka, wide, partitions=4)
    devkafka.create_topic(kafka, narrow, partitions=1)
    # AMOUNT: integers in partition 0, decimals elsewhere: the channels' key types
    # differ, and the table's column must fit both (merged over the table's routes).
    produce(kafka, wide, [{"value": {"id": i, "amount": amount(i)}, "partition": i % 4} for i in range(40)])
    produce(kafka, narrow, [{"value": {"id": i, "kind": "narrow"}} for i in range(5)])
    connector = run_connector(make_config(topics=f"{wide},{narrow}", buffer__count__records=1000))

    assert len(connector.reports) == 1
    for topic, count in ((wide, 40), (narrow, 5)):
        rows = read_table(topic.upper()).collect()
        assert sorted(int(r["ID"]) for r in rows) == list(range(count))
        if topic == wide:
            assert all(float(r["AMOUNT"]) == amount(int(r["ID"])) for r in rows)
        offsets = {(m["partition"], m["offset"]) for m in
                   (json.loads(r["RECORD_METADATA"].toJson()) for r in rows)}
        assert len(offsets) == count  # each record once
    # The 4-partition topic's table got at most one file per merged partition.
    path = connector.pipeline.table_ref(wide).path
    assert len(delta_log.live_files(path)) <= spark.sparkContext.defaultParallelism < 4


def test_a_wide_topic_is_read_in_few_tasks_and_lands_each_record_once_with_every_partitions_offset(
        kafka, topic_name, make_config, run_connector, read_table, spark):
    """A 12-partition topic into one table: the batch is read in at most twice Spark's
    default parallelism tasks (ingest/read_tasks.py), so its commit holds that many
    files, not twelve; every record lands once and the table holds each partition's
    next offset (a restart resumes from there)."""
    from floeline.ingest.read_tasks import read_task_limit

    wide = topic_name("twelve")
    devkafka.create_topic(kafka, wide, partitions=12)
    produce(kafka, wide, [{"value": {"id": i}, "partition": i % 12} for i in range(120)])
    connector = run_connector(make_config(topics=wide, buffer__count__records=1000))

    rows = read_table(wide.upper()).collect()
    assert sorted(int(r["ID"]) for r in rows) == list(range(120))
    meta = [json.loads(r["RECORD_METADATA"].toJson()) for r in rows]
    assert len({(m["partition"], m["offset"]) for m in meta}) == 120
    limit = read_task_limit(spark)
    assert limit < 12
    path = connector.pipeline.table_ref(wide).path
    assert 1 <= len(delta_log.live_files(path)) <= limit * len(connector.reports)
    state = connector.pipeline.tables.state(connector.pipeline.table_ref(wide))
    assert {ch: int(p) for ch, p in state.committed.positions.items()} == {
        f"{wide}/{p}": 9 for p in range(12)}


def test_a_table_read_from_several_tasks_gets_one_file_a_batch(
        kafka, topic_name, make_config, run_connector, read_table):
    """Two 6-partition topics: the batch's 12 partitions are read in 4 tasks
    (read_tasks.py; 42,000 records, more than the reader's 10,000 a task times 4), so
    each table's rows sit in several of them; the shared write brings a table's rows
    together (shared_write.py) and its commit adds one file."""
    topics, count = [topic_name("six_a"), topic_name("six_b")], 21_000
    for topic in topics:
        devkafka.create_topic(kafka, topic, partitions=6)
        produce(kafka, topic, [{"value": {"id": i, "kind": topic}, "partition": i % 6} for i in range(count)])
    connector = run_connector(make_config(topics=",".join(topics), buffer__count__records=5000))

    assert len(connector.reports) == 1 and "write together" in connector.reports[0].phases
    for topic in topics:
        assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == list(range(count))
        assert len(delta_log.live_files(connector.pipeline.table_ref(topic).path)) == 1


def test_a_key_the_first_records_lack_still_lands_when_many_tables_learn_their_keys(
        kafka, topic_name, make_config, run_connector, read_table):
    """A connector's first batch learns its 12 new tables' keys from each channel's
    first records (onepass_tables.py: about 833 a table here); a key that appears only
    after them fails the one-pass write, nothing is committed, and the general path
    writes the batch: the late key gets its column and every record lands once. (Had
    every record been read for the keys, the tables would share theirs and take one pass.)"""
    from floeline.ingest.onepass_tables import sample_per_channel

    topics = [topic_name(f"learn_{i}") for i in range(12)]
    late = sample_per_channel(12, 1) + 50
    for topic in topics:
        devkafka.create_topic(kafka, topic, partitions=1)
        produce(kafka, topic, [{"value": {"id": i}} for i in range(late)] + [{"value": {"id": late, "late": "x"}}])
    connector = run_connector(make_config(topics=",".join(topics), buffer__count__records=5000))

    assert len(connector.reports) == 1
    assert "read+stats" in connector.reports[0].phases  # the sample missed the key: the general path
    for topic in topics:
        rows = read_table(topic.upper()).collect()
        assert sorted(int(r["ID"]) for r in rows) == list(range(late + 1))
        assert [r["LATE"] for r in rows if int(r["ID"]) == late] == ["x"]
        assert len({json.loads(r["RECORD_METADATA"].toJson())["offset"] for r in rows}) == late + 1


def test_many_new_tables_learn_their_keys_from_each_channels_first_records(
        kafka, topic_name, make_config, run_connector, read_table):
    """Twelve new tables whose records all have the same keys: the batch learns them
    from a sample and writes every table in one pass (no general path)."""
    topics = [topic_name(f"same_{i}") for i in range(12)]
    for topic in topics:
        devkafka.create_topic(kafka, topic, partitions=2)
        produce(kafka, topic, [{"value": {"id": i, "kind": "k"}, "partition": i % 2} for i in range(1000)])
    connector = run_connector(make_config(topics=",".join(topics), buffer__count__records=5000))

    assert len(connector.reports) == 1
    assert "one pass keys" in connector.reports[0].phases
    for topic in topics:
        assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == list(range(1000))
