"""The worker's offsets API (KIP-875) against a real broker, Spark and Delta: GET shows
what the tables hold as Connect's next offsets; PATCH replays or skips, DELETE
re-delivers everything, each change is a commit in the table's history saying who
asked, and a Spark checkpoint made before a change never overrides it."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from floeline.dev import kafka as devkafka
from floeline.ingest.checkpoint_guard import marker_location
from floeline.sources.kafka import KafkaCluster, group_id, produce
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.offsets_changes import (OffsetsChange, changed_positions,
                                                commit_offsets_change, offsets_changes)
from floeline.warehouse.positions import committed_in_log
from floeline.worker.errors import BadRequest
from floeline.worker.offsets import ALTERED, RESET, alter_offsets, connector_offsets, reset_offsets

pytestmark = pytest.mark.integration


def produce_per_partition(kafka, topic, partitions, start, count):
    """`count` records to each partition, numbered from `start`."""
    produce(kafka, topic, [{"value": {"n": start + i}, "partition": p}
                           for p in range(partitions) for i in range(count)])


def rows_per_offset(df) -> Counter:
    """How many rows the table holds of each (partition, offset)."""
    return Counter((r["p"], r["o"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect())


def kafka_offsets(topic, nexts: dict[int, int]) -> list[dict]:
    return [{"partition": {"kafka_topic": topic, "kafka_partition": p},
             "offset": {"kafka_offset": n}} for p, n in sorted(nexts.items())]


def has_checkpoint(config) -> bool:
    offsets = os.path.join(config.checkpoint_dir, "offsets")
    return os.path.isdir(offsets) and bool(os.listdir(offsets))


def test_alter_replays_and_skips_reset_redelivers(kafka, spark, topic_name, make_config,
                                                  run_connector, read_table):
    topic = topic_name("offsets")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic)
    table = topic.upper()
    produce_per_partition(kafka, topic, 2, 0, 20)
    run_connector(config)
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 20, 1: 20})
    assert has_checkpoint(config)  # the changes below must win over it

    # Rewind partition 0 to 10: records 10..19 are appended again.
    assert alter_offsets(config, spark, kafka_offsets(topic, {0: 10}), "alice") == ALTERED
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 10, 1: 20})
    group = KafkaCluster(kafka)
    assert group.group_offsets(group_id(config.name), [(topic, 0), (topic, 1)]) == {
        (topic, 0): 10, (topic, 1): 20}  # the mirror follows, as Connect's consumer group
    run_connector(config)
    counts = rows_per_offset(read_table(table))
    assert sum(counts.values()) == 40 + 10
    assert {o for (p, o), n in counts.items() if n == 2} == set(range(10, 20))
    assert all(p == 0 for (p, o), n in counts.items() if n == 2)
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 20, 1: 20})

    ref = Warehouse(config.warehouse).table(config.database, config.schema, table)
    change = offsets_changes(spark, ref, config.name)[0]
    assert change["requested_by"] == "alice" and change["kind"] == "alter"
    assert change["previous"]["positions"] == {f"{topic}/0": "19", f"{topic}/1": "19"}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{ref.path}`").collect()
    recorded = [json.loads(h["userMetadata"]) for h in history
                if h["userMetadata"] and "floeline.offsets.changed" in h["userMetadata"]]
    assert recorded and recorded[0]["floeline.channels"]["positions"][f"{topic}/0"] == "9"

    # Skip forward on partition 1: of 20..29, only 25..29 land.
    produce_per_partition(kafka, topic, 2, 20, 10)
    alter_offsets(config, spark, kafka_offsets(topic, {1: 25}), "bob")
    run_connector(config)
    counts = rows_per_offset(read_table(table))
    assert {o for (p, o) in counts if p == 1} == set(range(20)) | set(range(25, 30))
    assert {o for (p, o) in counts if p == 0} == set(range(30))
    assert sum(counts.values()) == 50 + 10 + 5

    # Past the partition's end: refused, naming the entry; nothing changes.
    with pytest.raises(BadRequest, match=r"offsets\[0\].*partition 0.*past the partition's end"):
        alter_offsets(config, spark, kafka_offsets(topic, {0: 31}), "carol")
    with pytest.raises(BadRequest, match=r"offsets\[1\].*'nope' partition 0.*not read by"):
        alter_offsets(config, spark, kafka_offsets(topic, {0: 5}) + kafka_offsets("nope", {0: 1}),
                      "carol")
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 30, 1: 30})

    # DELETE: every record is delivered again.
    assert reset_offsets(config, spark, "dave") == RESET
    assert connector_offsets(config, spark) == []
    assert group.group_offsets(group_id(config.name), [(topic, 0), (topic, 1)]) == {}
    run_connector(config)
    counts = rows_per_offset(read_table(table))
    assert sum(counts.values()) == 65 + 60
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 30, 1: 30})
    assert [c["requested_by"] for c in offsets_changes(spark, ref, config.name)] == ["dave", "bob", "alice"]


def test_null_offset_resets_one_partition_to_its_earliest(kafka, spark, topic_name, make_config,
                                                          run_connector, read_table):
    """Not the consumer group's offset (which the connector advanced to 8): the earliest."""
    topic = topic_name("earliest")
    devkafka.create_topic(kafka, topic, partitions=2)
    config = make_config(topics=topic)
    produce_per_partition(kafka, topic, 2, 0, 8)
    run_connector(config)
    alter_offsets(config, spark, [{"partition": {"kafka_topic": topic, "kafka_partition": 1},
                                   "offset": None}], "erin")
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 8})
    run_connector(config)
    counts = rows_per_offset(read_table(topic.upper()))
    assert counts == Counter({**{(0, o): 1 for o in range(8)}, **{(1, o): 2 for o in range(8)}})


def test_initial_offsets_before_the_first_run(kafka, spark, topic_name, make_config,
                                              run_connector, read_table):
    """Offsets set before the connector ever ran (Connect's initial_offsets): the table
    is created to hold them, and the first run starts there."""
    topic = topic_name("initial")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic)
    produce_per_partition(kafka, topic, 1, 0, 20)
    assert connector_offsets(config, spark) == []
    alter_offsets(config, spark, kafka_offsets(topic, {0: 15}), "frank")
    assert connector_offsets(config, spark) == kafka_offsets(topic, {0: 15})
    run_connector(config)
    assert rows_per_offset(read_table(topic.upper())) == Counter({(0, o): 1 for o in range(15, 20)})


def test_a_crash_between_the_change_and_the_checkpoint_still_ends_with_the_change(
        kafka, spark, topic_name, make_config, run_connector, read_table):
    """The change committed to the table, then a crash: before the connector's next
    start, or in the middle of setting its checkpoint aside (the marker deleted, the
    checkpoint still there). The table's positions win either way."""
    topic = topic_name("crash")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic)
    produce_per_partition(kafka, topic, 1, 0, 10)
    run_connector(config)
    assert os.path.exists(marker_location(config.checkpoint_dir)) is False  # no change yet

    # The lower-level step alone, as a process that died right after it would leave it.
    ref = Warehouse(config.warehouse).table(config.database, config.schema, topic.upper())
    held = committed_in_log(ref.path, config.name)[0]
    change = OffsetsChange("grace", "alter")
    commit_offsets_change(spark, ref, config.name, held,
                          changed_positions(held, change, {f"{topic}/0": "3"}), change)
    assert has_checkpoint(config)
    run_connector(config)
    counts = rows_per_offset(read_table(topic.upper()))
    assert sum(counts.values()) == 10 + 6 and all(counts[(0, o)] == 2 for o in range(4, 10))
    marker = marker_location(config.checkpoint_dir)
    assert json.loads(open(marker).read()) == {"changes": [change.id]}

    # The next run keeps the checkpoint made after the change: nothing is replayed.
    produce_per_partition(kafka, topic, 1, 10, 2)
    connector = run_connector(config)
    assert sum(r.skipped for r in connector.reports) == 0
    assert sum(rows_per_offset(read_table(topic.upper())).values()) == 16 + 2

    # A second change; the crash hits while the checkpoint is being set aside: its marker
    # is gone, the checkpoint itself is not.
    alter_offsets(config, spark, kafka_offsets(topic, {0: 10}), "heidi")
    os.remove(marker)
    assert has_checkpoint(config)
    run_connector(config)
    counts = rows_per_offset(read_table(topic.upper()))
    assert counts[(0, 10)] == 2 and counts[(0, 11)] == 2 and sum(counts.values()) == 18 + 2


# ---- Kinesis ----------------------------------------------------------------------------

def test_kinesis_offsets_are_shards_and_sequence_numbers(aws, warehouse, spark, run_connector,
                                                         read_table):
    """GET shows the last sequence number per shard; PATCH replays after a sequence
    number; DELETE starts every shard at TRIM_HORIZON, not at the lease table's
    checkpoint (which the connector advanced)."""
    import uuid

    from floeline.config import config_from_dict
    from kinesis_io import create_stream, put, stream_name

    stream = stream_name("offsets")
    create_stream(aws, stream, shards=1)
    placed = put(aws, stream, [{"n": i} for i in range(6)])
    name = f"k{uuid.uuid4().hex[:6]}"
    config = config_from_dict({
        "name": name, "floeline.source": "kinesis", "kinesis.stream.name": stream,
        "kinesis.application.name": f"app-{name}", "aws.region": aws.region,
        "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
        "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
        "floeline.warehouse": warehouse, "buffer.flush.time": "1"})
    shard = placed[0][0]
    run_connector(config)

    def entry(sequence):
        return {"partition": {"stream": stream, "shard": shard}, "offset": {"sequence_number": sequence}}

    def sequences():
        return Counter(r["q"] for r in read_table(stream.upper()).selectExpr(
            "RECORD_METADATA:sequenceNumber::string AS q").collect())

    assert connector_offsets(config, spark) == [entry(placed[-1][1])]
    with pytest.raises(BadRequest, match=r"offsets\[0\] is a Kafka partition"):
        alter_offsets(config, spark, kafka_offsets(stream, {0: 1}), "ivan")

    assert alter_offsets(config, spark, [entry(placed[2][1])], "ivan") == ALTERED
    run_connector(config)
    assert sequences() == Counter({q: 1 for _s, q in placed[:3]} | {q: 2 for _s, q in placed[3:]})

    assert reset_offsets(config, spark, "judy") == RESET
    assert connector_offsets(config, spark) == []
    run_connector(config)
    assert sequences() == Counter({q: 2 for _s, q in placed[:3]} | {q: 3 for _s, q in placed[3:]})
    assert connector_offsets(config, spark) == [entry(placed[-1][1])]
