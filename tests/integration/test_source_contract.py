"""The source contract (sources/base.py), one suite run against every source: the
memory source, Kafka on the test broker and Kinesis on kinesis-local. What the shared
pipeline relies on: the channels and their routes, the normalized layout, every record
read once in channel order, each channel started right after a committed position, the
batch end read back from Spark's offset log, RECORD_METADATA from the source fields and
the record's coordinates in messages."""

from __future__ import annotations

import json
import uuid

import pytest

from floeline.sources.base import NORMALIZED_COLUMNS, Committed, position_key

pytestmark = pytest.mark.integration

# A memory channel's first position: past 64 bits, as Kinesis sequence numbers are.
BIG = 2 ** 70


class MemoryHarness:
    kind = "memory"

    def __init__(self, tmp_path, make_config):
        from floeline.sources.memory import MemoryLog

        self.log = MemoryLog(tmp_path / "log")
        self.config = make_config(topics="orders")
        self.counts: dict[str, int] = {}

    def write(self, values: list[bytes]) -> list[tuple[str, str]]:
        placed = []
        for i, value in enumerate(values):
            channel = f"orders/{i % 2}"
            n = self.counts.get(channel, 0)
            self.log.append(channel, "orders", [value], first_position=BIG)
            self.counts[channel] = n + 1
            placed.append((channel, str(BIG + n)))
        return placed

    def source(self):
        from floeline.sources.memory import MemorySource

        return MemorySource(self.config, self.log)


class KafkaHarness:
    kind = "kafka"

    def __init__(self, kafka, make_config, reader="spark"):
        from floeline.dev import kafka as devkafka

        self.kafka = kafka
        self.topic = f"contract_{uuid.uuid4().hex[:8]}"
        devkafka.create_topic(kafka, self.topic, partitions=2)
        self.config = make_config(topics=self.topic, floeline__kafka__reader=reader)
        self.counts: dict[int, int] = {}

    def write(self, values: list[bytes]) -> list[tuple[str, str]]:
        from floeline.sources.kafka import produce

        produce(self.kafka, self.topic, [{"value": v, "partition": i % 2} for i, v in enumerate(values)])
        placed = []
        for i in range(len(values)):
            n = self.counts.get(i % 2, 0)
            self.counts[i % 2] = n + 1
            placed.append((f"{self.topic}/{i % 2}", str(n)))
        return placed

    def source(self):
        from floeline.sources.kafka import KafkaSource

        return KafkaSource(self.config)


class KinesisHarness:
    kind = "kinesis"

    def __init__(self, aws, warehouse):
        from floeline.config import config_from_dict
        from kinesis_io import create_stream

        self.aws = aws
        self.stream = f"contract-{uuid.uuid4().hex[:8]}"
        create_stream(aws, self.stream, shards=2)
        name = f"k{uuid.uuid4().hex[:6]}"
        self.config = config_from_dict({
            "name": name, "floeline.source": "kinesis", "kinesis.stream.name": self.stream,
            "kinesis.application.name": f"app-{name}", "aws.region": aws.region,
            "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
            "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
            "floeline.warehouse": warehouse, "buffer.flush.time": "1"})

    def write(self, values: list[bytes]) -> list[tuple[str, str]]:
        from kinesis_io import put

        return [(f"{self.stream}/{shard}", seq) for shard, seq in put(self.aws, self.stream, values)]

    def source(self):
        from floeline.sources.kinesis.source import KinesisSource

        return KinesisSource(self.config)


# kafka-grouped: Kafka read by floeline's reader (floeline.kafka.reader=grouped).
@pytest.fixture(params=["memory", "kafka", "kafka-grouped", "kinesis"])
def harness(request, tmp_path, make_config, warehouse):
    if request.param == "memory":
        return MemoryHarness(tmp_path, make_config)
    if request.param.startswith("kafka"):
        return KafkaHarness(request.getfixturevalue("kafka"), make_config,
                            "grouped" if request.param == "kafka-grouped" else "spark")
    return KinesisHarness(request.getfixturevalue("aws"), warehouse)


def read(spark, source, committed: Committed, tmp_path, metadata_flags=None):
    """Every row the source's stream gives from `committed` (Trigger.AvailableNow,
    normalized per batch as the connector does) and the BatchEnd of each batch. With
    `metadata_flags`, each row also has `meta`: its RECORD_METADATA as JSON text."""
    rows, ends = [], []
    stream = source.open(spark, committed, has_checkpoint=False)

    def batch(df, _batch_id):
        normalized = source.normalize(df)
        if metadata_flags is not None:
            normalized = normalized.selectExpr(
                "*", f"to_json({source.metadata_sql(metadata_flags, 1234)}) AS meta")
        rows.extend(normalized.collect())

    query = (stream.writeStream.foreachBatch(batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / f"cp-{uuid.uuid4().hex[:6]}")).start())
    try:
        assert query.awaitTermination(180), "the source's AvailableNow query did not finish"
        for progress in query.recentProgress:
            end = progress["sources"][0]["endOffset"]
            ends.append(source.batch_end(end if isinstance(end, str) else json.dumps(end)))
    finally:
        query.stop()
        source.close()
    return rows, ends


def values(n: int, tag: str) -> list[bytes]:
    return [json.dumps({"n": i, "tag": tag}).encode() for i in range(n)]


def test_channels_and_routes(harness):
    placed = harness.write(values(4, "c"))
    source = harness.source()
    try:
        channels = source.channels()
    finally:
        source.close()
    written = {c for c, _ in placed}
    assert written <= {c.id for c in channels}
    for channel in channels:
        assert source.route_of(channel.id) == channel.route
        assert source.table_name(channel.route)


def test_every_record_once_in_channel_order_in_the_normalized_layout(harness, spark, tmp_path):
    from floeline.config import MetadataFlags

    sent = values(12, "all")
    placed = harness.write(sent)
    source = harness.source()
    rows, ends = read(spark, source, Committed(), tmp_path, metadata_flags=MetadataFlags())

    assert rows and tuple(rows[0].asDict())[:-1] == NORMALIZED_COLUMNS
    got = [(r["channel"], r["position"]) for r in rows]
    assert len(got) == len(set(got)) == len(sent), "each record exactly once"
    assert set(got) == set(placed)
    by_coordinates = {(r["channel"], r["position"]): r for r in rows}
    for (channel, position), value in zip(placed, sent):
        row = by_coordinates[(channel, position)]
        assert bytes(row["value"]) == value
        assert row["route"] == source.route_of(channel)
        assert row["position"].isdigit()
        assert row["timestamp"] is not None
        assert row["headers"] is None or isinstance(row["headers"], list)
        # RECORD_METADATA from the source fields, and the record's coordinates for messages.
        assert isinstance(json.loads(row["meta"]), dict)
        described = source.describe(row["source"].asDict())
        assert position in described and "None" not in described, described
    for channel in {c for c, _ in placed}:  # read in position order, as written
        read_order = [r["position"] for r in rows if r["channel"] == channel]
        written = [p for c, p in placed if c == channel]
        assert read_order == sorted(read_order, key=position_key) == written
    last = {}
    for end in ends:
        last.update(end.positions)
    assert last == {c: max((p for cc, p in placed if cc == c), key=position_key)
                    for c in {c for c, _ in placed}}


def test_each_channel_starts_right_after_its_committed_position(harness, spark, tmp_path):
    sent = values(10, "resume")
    placed = harness.write(sent)
    committed = {}
    for channel, position in placed[:6]:  # the first three of each channel
        committed[channel] = position
    source = harness.source()
    rows, _ = read(spark, source, Committed(positions=committed), tmp_path)
    got = sorted((r["channel"], r["position"]) for r in rows)
    assert got == sorted(placed[6:])


def test_no_record_metadata_when_switched_off(harness):
    from floeline.config import MetadataFlags

    source = harness.source()
    try:
        assert source.metadata_sql(MetadataFlags(all_=False), 1234) == "CAST(NULL AS VARIANT)"
    finally:
        source.close()
