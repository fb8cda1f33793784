"""RECORD_METADATA built by floeline's JVM function (resources/java/KafkaMetadata.java) is the
same VARIANT, byte for byte, as Spark's to_variant_object over the same fields
(records/metadata.py's SQL), for every snowflake.metadata.* combination and for records
with odd coordinates, keys and headers; and the JSON text metadata.py builds for a
JSON-stored RECORD_METADATA (as_json) holds the same value as that VARIANT."""

import datetime
import itertools
import json
import random

import pytest

from floeline import jvm
from floeline.config import MetadataFlags
from floeline.records.metadata import kafka_metadata_sql

SCHEMA = ("key binary, headers array<struct<key: string, value: binary>>, timestamp timestamp, "
          "source struct<topic: string, partition: int, offset: bigint, timestampType: int>, push bigint")
MAX_KEY = 1 << 20  # KafkaMetadata.MAX_KEY: a longer key takes the SQL path


def _records(count: int) -> list[tuple]:
    rng = random.Random(26)
    topics = ["orders", "t" * 63, "t" * 64, "zamówienia-" * 7, "a"]
    numbers = [0, 1, -1, 127, 128, -129, 32767, 32768, 2**31 - 1, 2**31, 2**40, -(2**63)]
    keys = [None, b"", b"k", b"\xff\xfe", "klucz-ł".encode(), b"x" * 63, b"x" * 64, b"y" * 70000,
            b"ab\xc0\xafcdefghij", b"z" * (MAX_KEY + 1)]
    headers = [None, [], [("h", b"v")], [("a", b"1"), ("b", None)]]
    rows = []
    for _ in range(count):
        ts = rng.choice([None, datetime.datetime(2026, 11, 29, 12, 0, 0, rng.randrange(1000) * 1000),
                         datetime.datetime(1969, 12, 31, 23, 59, 59)])
        source = (rng.choice(topics), rng.choice([0, 5, 300, 70000]), rng.choice(numbers),
                  rng.choice([0, 1, 0, 1, -1, None]))
        rows.append((rng.choice(keys), rng.choice(headers), ts, source, rng.choice(numbers)))
    return rows


@pytest.fixture(scope="module")
def records(spark):
    frame = spark.createDataFrame(_records(300), SCHEMA).cache()
    yield frame
    frame.unpersist()


@pytest.mark.parametrize("flags", [MetadataFlags(True, *bits) for bits in itertools.product([True, False], repeat=4)],
                         ids=lambda f: f"t{f.topic:d}o{f.offset_and_partition:d}c{f.createtime:d}p{f.connector_push_time:d}")
def test_function_writes_the_bytes_of_the_sql(spark, records, flags):
    function = jvm.ensure_kafka_metadata(spark, flags)
    assert jvm.ensure_kafka_metadata(spark, flags) == function  # registered once per session
    rows = records.selectExpr(f"{kafka_metadata_sql(flags, 'push')} AS by_sql",
                              f"{kafka_metadata_sql(flags, 'push', function=function)} AS by_function",
                              "key", "headers").collect()
    built = 0
    for row in rows:
        sql, fn = row["by_sql"], row["by_function"]
        assert (sql is None) == (fn is None), row
        if sql is not None:
            assert (bytes(fn.value), bytes(fn.metadata)) == (bytes(sql.value), bytes(sql.metadata)), (
                row, sql.toJson(), fn.toJson())
            built += 1
    assert built > 150  # most records have a RECORD_METADATA


def test_function_declines_what_it_does_not_build(spark, records):
    """The function itself (not the SQL around it) returns NULL for a NULL timestamp type
    and for a key past MAX_KEY, and builds every other record."""
    flags = MetadataFlags()
    function = jvm.ensure_kafka_metadata(spark, flags)
    rows = records.selectExpr(
        f"{function}(CAST(source.topic AS BINARY), source.partition, source.offset, "
        "source.timestampType, unix_millis(timestamp), push, key) IS NULL AS declined",
        f"source.timestampType IS NULL OR coalesce(octet_length(key), 0) > {MAX_KEY} AS expected").collect()
    assert any(r["declined"] for r in rows) and not all(r["declined"] for r in rows)
    assert [r["declined"] for r in rows] == [r["expected"] for r in rows]


@pytest.mark.parametrize("flags", [MetadataFlags(True, *bits) for bits in itertools.product([True, False], repeat=4)],
                         ids=lambda f: f"t{f.topic:d}o{f.offset_and_partition:d}c{f.createtime:d}p{f.connector_push_time:d}")
def test_json_text_holds_the_value_of_the_variant(spark, records, flags):
    rows = records.selectExpr(f"{kafka_metadata_sql(flags, 'push')} AS variant",
                              f"{kafka_metadata_sql(flags, 'push', as_json=True)} AS text",
                              "key", "headers").collect()
    assert any(row["text"] is not None for row in rows)
    for row in rows:
        assert (row["text"] is None) == (row["variant"] is None), row  # (no timestamp type: NULL)
        if row["text"] is not None:
            assert json.loads(row["text"]) == json.loads(row["variant"].toJson()), row
    # A key converted to JSON (an object key, as the Avro and JSON converters give it)
    keyed = records.selectExpr(
        "to_json(named_struct('k', CAST(key AS STRING), 'n', source.partition)) AS key_json", "*"
    ).where("key IS NOT NULL AND source.timestampType IS NOT NULL").limit(20)
    for row in keyed.selectExpr(
            f"{kafka_metadata_sql(flags, 'push', key_json='key_json')} AS variant",
            f"{kafka_metadata_sql(flags, 'push', key_json='key_json', as_json=True)} AS text").collect():
        assert json.loads(row["text"]) == json.loads(row["variant"].toJson()), row
