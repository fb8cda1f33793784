"""The decode stage end to end: records written in the Confluent wire format against
the real schema registry, produced to the real broker, read back with Spark's Kafka
source and passed through decode_frame."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from floeline.config.decoding import AVRO_CONVERTER, PROTOBUF_CONVERTER, STRING_CONVERTER
from floeline.records.decode import decode_frame
from floeline.sources.kafka import produce
from records_io import ORDER_PROTO, ORDER_V1, ORDER_V2, avro, proto_class, register, wire

pytestmark = pytest.mark.integration

from floeline.sources.kafka import NORMALIZED_KAFKA  # noqa: E402

def read_decoded(spark, kafka, topic, settings):
    from floeline.config import config_from_dict

    config = config_from_dict({"name": "decode-test", "topics": topic,
                               "bootstrap.servers": kafka, **settings})
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("includeHeaders", "true").load().selectExpr(*NORMALIZED_KAFKA))
    decoded = decode_frame(df, config)
    assert decoded.columns[:len(df.columns)] == df.columns
    return sorted(decoded.collect(), key=lambda r: r["source"]["offset"])


def test_avro_records_decode_with_errors_flagged(kafka, spark, schema_registry, topic_name):
    topic = topic_name("avro")
    v1 = register(schema_registry, f"{topic}-value", json.dumps(ORDER_V1))
    v2 = register(schema_registry, f"{topic}-value", json.dumps(ORDER_V2))
    assert v1 != v2
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.timezone.utc)
    first = {"id": 1, "amount": Decimal("19.99"), "at": at, "status": "PAID", "tags": {"x": 1},
             "note": None}
    produce(kafka, topic, [
        {"value": wire(v1, avro(ORDER_V1, first)), "key": b"k1"},
        {"value": wire(v2, avro(ORDER_V2, {**first, "id": 2, "channel": "app"})), "key": b"k2"},
        {"value": wire(987654, avro(ORDER_V1, first))},  # unknown schema id
        {"value": wire(v1, avro(ORDER_V1, first)[:-3])},  # truncated: corrupt Avro
        {"value": None, "key": b"gone"},  # tombstone
    ], partition=0)
    rows = read_decoded(spark, kafka, topic, {
        "key.converter": STRING_CONVERTER, "value.converter": AVRO_CONVERTER,
        "value.converter.schema.registry.url": schema_registry})
    assert len(rows) == 5

    assert rows[0]["_decode_error"] is None and rows[0]["_schema_id"] == v1
    assert rows[0]["_key_json"] == '"k1"' and rows[0]["_route_topic"] == topic
    assert json.loads(rows[0]["_value_json"]) == {
        "id": 1, "amount": 19.99, "at": "2024-05-06T07:08:09.123Z", "status": "PAID",
        "tags": {"x": 1}, "note": None}
    assert rows[0]["value"].startswith(b"\0")  # original columns unchanged

    assert rows[1]["_schema_id"] == v2  # the evolved schema (v2, one more field)
    assert json.loads(rows[1]["_value_json"])["channel"] == "app"

    assert rows[2]["_value_json"] is None and rows[2]["_decode_stage"] == "value converter"
    assert "unknown schema id 987654" in rows[2]["_decode_error"]
    assert schema_registry in rows[2]["_decode_error"]
    assert rows[2]["_error_class"] == "ConverterError" and rows[2]["_error_trace"]

    assert rows[3]["_decode_stage"] == "value converter"
    assert rows[3]["_decode_error"].startswith("corrupt Avro")

    assert rows[4]["_value_json"] is None and rows[4]["_decode_error"] is None
    assert rows[4]["_key_json"] == '"gone"' and rows[4]["_skip"] is False


def test_protobuf_records_decode(kafka, spark, schema_registry, topic_name):
    topic = topic_name("proto")
    schema_id = register(schema_registry, f"{topic}-value", ORDER_PROTO, "PROTOBUF")
    Order = proto_class(ORDER_PROTO, "shop.Order")
    msg = Order(id=7, name="seven", amounts=[1.25, 2.5], color=1, counts={"a": 2})
    msg.at.FromDatetime(dt.datetime(2024, 1, 2, 3, 4, 5))
    produce(kafka, topic, [
        wire(schema_id, b"\x00" + msg.SerializeToString()),  # message indexes [0]
        wire(schema_id, b"\x00" + b"\x12\x09short"),  # name's length runs past the end
    ], partition=0)
    rows = read_decoded(spark, kafka, topic, {
        "value.converter": PROTOBUF_CONVERTER,
        "value.converter.schema.registry.url": schema_registry})
    assert rows[0]["_decode_error"] is None and rows[0]["_schema_id"] == schema_id
    assert json.loads(rows[0]["_value_json"]) == {
        "id": 7, "name": "seven", "amounts": [1.25, 2.5], "color": "BLUE", "counts": {"a": 2},
        "at": "2024-01-02T03:04:05.000Z"}
    assert rows[1]["_decode_stage"] == "value converter"
    assert rows[1]["_decode_error"].startswith("corrupt Protobuf")


def test_streaming_decode_with_transforms(kafka, spark, schema_registry, topic_name, tmp_path):
    """decode_frame on a streaming DataFrame (as the connector uses it), with the
    Avro converter on the key and transforms on the value."""
    from floeline.config import config_from_dict

    topic = topic_name("stream")
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    key_id = register(schema_registry, f"{topic}-key", json.dumps(key_schema))
    produce(kafka, topic, [
        {"key": wire(key_id, avro(key_schema, {"id": i})), "value": json.dumps([i])}
        for i in range(3)] + [{"key": b"not avro", "value": None}], partition=0)
    t = "org.apache.kafka.connect.transforms."
    config = config_from_dict({
        "name": "decode-stream", "topics": topic, "bootstrap.servers": kafka,
        "key.converter": AVRO_CONVERTER, "key.converter.schema.registry.url": schema_registry,
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "transforms": "route,hoist",
        "transforms.route.type": t + "RegexRouter", "transforms.route.regex": "stream_(.*)",
        "transforms.route.replacement": "routed_$1",
        "transforms.hoist.type": t + "HoistField$Value", "transforms.hoist.field": "ids"})
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").load().selectExpr(*NORMALIZED_KAFKA))
    table = f"decoded_{topic}"
    query = (decode_frame(stream, config).writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
             .start())
    query.awaitTermination(120)
    rows = sorted(spark.table(table).collect(), key=lambda r: r["source"]["offset"])
    assert [r["_key_json"] for r in rows[:3]] == ['{"id":0}', '{"id":1}', '{"id":2}']
    assert [r["_value_json"] for r in rows[:3]] == ['{"ids":[0]}', '{"ids":[1]}', '{"ids":[2]}']
    assert {r["_route_topic"] for r in rows[:3]} == {"routed_" + topic[len("stream_"):]}
    assert rows[3]["_decode_stage"] == "key converter"
    assert "unknown magic byte" in rows[3]["_decode_error"]
