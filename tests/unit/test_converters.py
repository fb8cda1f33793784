"""Converters and the spec's conversion rules, without Kafka, Spark or HTTP: schemas
come from an in-memory registry object passed to converter_for."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import subprocess
import sys
import tempfile
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from floeline.config import config_from_dict
from floeline.config.decoding import (
    AVRO_CONVERTER, BYTES_CONVERTER, JSON_CONVERTER, JSON_SCHEMA_CONVERTER, PROTOBUF_CONVERTER,
    REGISTRY_CONVERTERS, STRING_CONVERTER, SUPPORTED_CONVERTERS, check_converters, converter_spec,
    decode_spec)
from floeline.errors import ConfigError, RetriesExhausted
from floeline.records.avro_schema import column_types
from floeline.records.converters.base import ConverterError, RegistryUnavailable
from floeline.records.converters.factory import converter_for
from floeline.records.decode import DECODE_COLUMNS, RecordDecoder, decode_batches, needs_python_decode
from floeline.records.json_text import to_json_text
from floeline.records.record import Float32
from floeline.retry import policy_from_settings

UTC = dt.timezone.utc


class MemoryRegistry:
    """Answers as a Confluent registry would, from a dict; counts lookups."""

    def __init__(self, by_id=None, subjects=None):
        self.ids = by_id or {}
        self.subjects = subjects or {}
        self.parsed = {}
        self.lookups = 0

    def by_id(self, schema_id):
        self.lookups += 1
        if schema_id not in self.ids:
            raise ConverterError(f"unknown schema id {schema_id} at memory: 404")
        return self.ids[schema_id]

    def by_subject(self, subject, version):
        return self.subjects[(subject, version)]


def settings_for(which, cls, **options):
    out = {f"{which}.converter": cls}
    if cls in REGISTRY_CONVERTERS:
        out[f"{which}.converter.schema.registry.url"] = "http://unused"
    out.update({f"{which}.converter.{k.replace('__', '.')}": v for k, v in options.items()})
    return out


def wire(schema_id: int, payload: bytes) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + payload


# ------------------------------------------------------------------ to_json_text

def test_numbers_and_booleans_pass_through():
    assert to_json_text({"i": 42, "f": 1.5, "b": True, "n": None, "big": 2**70}) == \
        '{"i":42,"f":1.5,"b":true,"n":null,"big":1180591620717411303424}'


def test_decimal_up_to_38_digits_is_a_number_beyond_is_a_string():
    assert to_json_text(Decimal("12.340")) == "12.340"
    assert to_json_text(Decimal("-" + "9" * 38)) == "-" + "9" * 38
    assert to_json_text(Decimal("1" * 39)) == '"' + "1" * 39 + '"'
    assert to_json_text(Decimal("1" * 20 + "." + "2" * 19)) == '"' + "1" * 20 + "." + "2" * 19 + '"'
    assert to_json_text(Decimal("1E+40")) == '"1' + "0" * 40 + '"'  # written out in full
    assert to_json_text(Decimal("1E+3")) == "1000"


def test_bytes_are_base64_strings():
    assert to_json_text({"b": b"\x00\xffhi"}) == '{"b":"AP9oaQ=="}'
    assert to_json_text(bytearray(b"a")) == '"YQ=="'


def test_arrays_stay_arrays_and_structs_stay_nested():
    value = {"a": [1, [2, {"x": "y"}]], "s": {"t": {"u": []}}}
    assert json.loads(to_json_text(value)) == value


def test_maps_with_non_string_keys_become_key_value_pairs():
    assert to_json_text({1: "a", 2: "b"}) == '[[1,"a"],[2,"b"]]'
    assert to_json_text({"outer": {True: 1}}) == '{"outer":[[true,1]]}'
    assert to_json_text({(1, 2): "t"}) == '[[[1,2],"t"]]'


def test_dates_and_times_are_iso_8601_utc():
    assert to_json_text(dt.date(2024, 2, 29)) == '"2024-02-29"'
    assert to_json_text(dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)) == \
        '"2024-01-02T03:04:05.123Z"'
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert to_json_text(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=plus2)) == '"2024-01-02T01:04:05.000Z"'
    assert to_json_text(dt.datetime(2024, 1, 2, 3, 4, 5, 123456)) == '"2024-01-02T03:04:05.123456Z"'
    assert to_json_text(dt.time(13, 14, 15, 500000)) == '"13:14:15.500"'


def test_nan_and_infinities_are_strings():
    assert to_json_text([float("nan"), float("inf"), float("-inf")]) == '["NaN","Inf","-Inf"]'
    assert to_json_text([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")]) == \
        '["NaN","Inf","-Inf"]'


def test_strings_are_escaped_and_unicode_kept():
    assert to_json_text({"q": 'a"b\\c\n', "é": "日本"}) == '{"q":"a\\"b\\\\c\\n","é":"日本"}'


def test_unknown_types_are_refused():
    with pytest.raises(TypeError, match="set"):
        to_json_text({"s": {1, 2}})


def test_keys_are_written_as_json():  # RECORD_METADATA.key: strings stay strings
    assert [to_json_text(k) for k in ("k-1", {"id": 7}, 7, b"\x01")] == \
        ['"k-1"', '{"id":7}', "7", '"AQ=="']


# ------------------------------------------------------------------ config checks

def test_unknown_converter_names_the_key_and_lists_supported():
    with pytest.raises(ConfigError) as err:
        converter_for(converter_spec({"value.converter": "com.example.Nope"}, "value"))
    message = str(err.value)
    assert "value.converter=com.example.Nope" in message
    for name in SUPPORTED_CONVERTERS:
        assert name in message


def test_snowflake_converters_are_refused_with_the_replacement():
    with pytest.raises(ConfigError, match="not supported with Snowpipe Streaming.*AvroConverter"):
        check_converters({"value.converter":
                               "com.snowflake.kafka.connector.records.SnowflakeAvroConverter"})
    with pytest.raises(ConfigError, match="key.converter=.*SnowflakeJsonConverter.*JsonConverter"):
        check_converters({"key.converter":
                               "com.snowflake.kafka.connector.records.SnowflakeJsonConverter"})


def test_registry_converters_need_a_registry_url():
    with pytest.raises(ConfigError, match="value.converter.schema.registry.url"):
        check_converters({"value.converter": AVRO_CONVERTER})


def test_bad_schemas_enable_is_reported():
    with pytest.raises(ConfigError, match="schemas.enable='yes'"):
        check_converters({"value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "yes"})


def test_json_envelope_is_kafka_connects_default():
    assert converter_spec({"value.converter": JSON_CONVERTER}, "value").json_schemas_enabled
    assert not converter_spec({"value.converter": JSON_CONVERTER,
                                          "value.converter.schemas.enable": "false"}, "value").json_schemas_enabled
    assert not converter_spec({}, "value").json_schemas_enabled  # no converter: plain JSON


def _config(**settings):
    base = {"name": "c", "topics": "t"}
    base.update({k.replace("__", "."): v for k, v in settings.items()})
    return config_from_dict(base)


def test_needs_python_decode():
    assert not needs_python_decode(_config())
    assert not needs_python_decode(_config(value__converter=JSON_CONVERTER,
                                           value__converter__schemas__enable="false",
                                           key__converter=STRING_CONVERTER))
    # a JSON key is RECORD_METADATA.key as its JSON value: converted in Python
    assert needs_python_decode(_config(key__converter=JSON_CONVERTER,
                                       key__converter__schemas__enable="false"))
    assert needs_python_decode(_config(value__converter=JSON_CONVERTER))  # envelope by default
    assert needs_python_decode(_config(value__converter=AVRO_CONVERTER,
                                       value__converter__schema__registry__url="http://r"))
    assert needs_python_decode(_config(key__converter=BYTES_CONVERTER))
    assert needs_python_decode(_config(transforms="hoist", transforms__hoist__type=
                                       "org.apache.kafka.connect.transforms.HoistField$Value"))


# ------------------------------------------------------------------ JSON, String, bytes

def test_plain_json():
    c = converter_for(converter_spec({"value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false"}, "value"))
    assert c.convert(b'{"a": [1, 2.5, "x"]}').value == {"a": [1, 2.5, "x"]}
    assert c.convert(None).value is None


def test_empty_json_is_null_a_tombstone_but_not_inside_the_envelope():
    plain = converter_for(converter_spec({}, "value"))
    assert plain.convert(b"").value is None and plain.convert(b" \r\n\t").value is None
    assert converter_for(converter_spec({"key.converter": JSON_CONVERTER,
                          "key.converter.schemas.enable": "false"}, "key")).convert(b"").value is None
    with pytest.raises(ConverterError, match='requires "schema" and "payload"'):
        converter_for(converter_spec({"value.converter": JSON_CONVERTER}, "value")).convert(b"")


def test_invalid_json_names_the_byte_offset():
    c = converter_for(converter_spec({}, "value"))
    with pytest.raises(ConverterError) as err:
        c.convert('{"é": 1,,}'.encode())
    assert err.value.stage == "value converter"
    assert "value is not valid JSON at byte 9" in str(err.value)
    with pytest.raises(ConverterError, match="NaN is not a JSON number"):
        c.convert(b'{"x": NaN}')
    with pytest.raises(ConverterError, match="not valid UTF-8 at byte 1"):
        c.convert(b'"\xff"')


def _envelope(schema, payload) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


def test_json_envelope_applies_the_schema_and_logical_types():
    c = converter_for(converter_spec({"value.converter": JSON_CONVERTER}, "value"))
    schema = {"type": "struct", "fields": [
        {"field": "id", "type": "int64"},
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2"}},
        {"field": "day", "type": "int32", "name": "org.apache.kafka.connect.data.Date"},
        {"field": "at", "type": "int32", "name": "org.apache.kafka.connect.data.Time"},
        {"field": "ts", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
        {"field": "raw", "type": "bytes"},
        {"field": "tags", "type": "array", "items": {"type": "string"}},
        {"field": "counts", "type": "map", "keys": {"type": "int32"}, "values": {"type": "int64"}},
        {"field": "attrs", "type": "map", "keys": {"type": "string"}, "values": {"type": "boolean"}},
        {"field": "note", "type": "string", "optional": True},
        {"field": "level", "type": "int8", "optional": True, "default": 3},
        {"field": "ratio", "type": "float64"},
    ]}
    price = base64.b64encode((-12345).to_bytes(2, "big", signed=True)).decode()
    payload = {"id": 7, "price": price, "day": 19782, "at": 3_600_000, "ts": 1_700_000_000_123,
               "raw": base64.b64encode(b"hi").decode(), "tags": ["a"], "counts": [[1, 10], [2, 20]],
               "attrs": {"x": True}, "ratio": 0.5, "ignored": 1}
    value = c.convert(_envelope(schema, payload)).value
    assert value == {
        "id": 7, "price": Decimal("-123.45"), "day": dt.date(2024, 2, 29), "at": dt.time(1, 0),
        "ts": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC), "raw": b"hi",
        "tags": ["a"], "counts": {1: 10, 2: 20}, "attrs": {"x": True}, "note": None, "level": 3,
        "ratio": 0.5}
    assert json.loads(to_json_text(value))["counts"] == [[1, 10], [2, 20]]


def test_json_envelope_errors():
    c = converter_for(converter_spec({"value.converter": JSON_CONVERTER}, "value"))
    with pytest.raises(ConverterError, match='requires "schema" and "payload".*schemas.enable=false'):
        c.convert(b'{"a": 1}')
    with pytest.raises(ConverterError, match="invalid null value for required INT32 field at payload.n"):
        c.convert(_envelope({"type": "struct", "fields": [{"field": "n", "type": "int32"}]}, {}))
    with pytest.raises(ConverterError, match="out of range for INT8"):
        c.convert(_envelope({"type": "int8"}, 300))
    assert c.convert(_envelope(None, {"free": "form"})).value == {"free": "form"}
    assert c.convert(_envelope({"type": "string", "optional": True}, None)).value is None


def test_key_converter_errors_carry_the_key_stage():
    c = converter_for(converter_spec({"key.converter": JSON_CONVERTER}, "key"))
    with pytest.raises(ConverterError) as err:
        c.convert(b'"plain"')
    assert err.value.stage == "key converter"
    assert "key.converter.schemas.enable=false" in str(err.value)


def test_string_and_bytes_converters():
    s = converter_for(converter_spec({"key.converter": STRING_CONVERTER}, "key"))
    assert s.convert("ключ".encode()).value == "ключ"
    assert s.convert(b"a\xffb").value == "a\ufffdb"  # as Kafka's StringDeserializer
    latin = converter_for(converter_spec({"value.converter": STRING_CONVERTER,
                           "value.converter.encoding": "ISO-8859-1"}, "value"))
    assert latin.convert(b"\xe9").value == "é"
    assert converter_for(converter_spec({}, "key")).convert(b"k").value == "k"  # unset key: text
    b = converter_for(converter_spec({"value.converter": BYTES_CONVERTER}, "value"))
    assert b.convert(b"\x00\x01").value == b"\x00\x01"


# ------------------------------------------------------------------ Avro

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "tags", "type": {"type": "map", "values": "int"}},
    {"name": "items", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "blob", "type": "bytes"},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "hash", "type": {"type": "fixed", "name": "H", "size": 2}},
]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "channel", "type": "string", "default": "web"}]}
ORDER = {"id": 1, "amount": Decimal("12.34"), "day": dt.date(2024, 1, 2),
         "at": dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC), "status": "PAID",
         "tags": {"a": 1}, "items": ["x", "y"], "note": "hi", "blob": b"\x01\x02",
         "ref": "12345678-1234-5678-1234-567812345678", "hash": b"ab"}


def avro_bytes(schema, record) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def avro_registry():
    return MemoryRegistry({1: {"schema": json.dumps(ORDER_V1)},
                           2: {"schema": json.dumps(ORDER_V2)},
                           9: {"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"}})


def test_avro_values():
    registry = avro_registry()
    c = converter_for(converter_spec(settings_for("value", AVRO_CONVERTER), "value"), registry)
    got = c.convert(wire(1, avro_bytes(ORDER_V1, ORDER)))
    assert got.schema_id == 1
    assert got.value == ORDER
    assert json.loads(to_json_text(got.value)) == {
        "id": 1, "amount": 12.34, "day": "2024-01-02", "at": "2024-01-02T03:04:05.006Z",
        "status": "PAID", "tags": {"a": 1}, "items": ["x", "y"], "note": "hi", "blob": "AQI=",
        "ref": "12345678-1234-5678-1234-567812345678", "hash": "YWI="}
    c.convert(wire(1, avro_bytes(ORDER_V1, {**ORDER, "note": None})))
    assert registry.lookups == 1  # the schema is fetched once


def test_avro_evolved_schema_decodes_with_its_own_id():
    c = converter_for(converter_spec(settings_for("value", AVRO_CONVERTER), "value"), avro_registry())
    got = c.convert(wire(2, avro_bytes(ORDER_V2, {**ORDER, "channel": "app"})))
    assert got.schema_id == 2 and got.value["channel"] == "app"


@pytest.mark.parametrize("data, message", [
    (wire(1, avro_bytes(ORDER_V1, ORDER))[:-4], "corrupt Avro"),
    (wire(1, avro_bytes(ORDER_V1, ORDER)) + b"xx", "2 bytes left over"),
    (wire(1, b"\x02\xff\xff\xff\xff\x0f"), "corrupt Avro"),  # absurd length prefix
    (b"\x01" + wire(1, b"")[1:], "unknown magic byte 0x01"),
    (b"\x00\x00", "shorter than the 5-byte"),
    (wire(42, b"\x02"), "unknown schema id 42"),
    (wire(9, b"\x02"), "schema id 9 is a PROTOBUF schema"),
])
def test_avro_errors(data, message):
    c = converter_for(converter_spec(settings_for("value", AVRO_CONVERTER), "value"), avro_registry())
    with pytest.raises(ConverterError, match=message) as err:
        c.convert(data)
    assert err.value.stage == "value converter"


def test_avro_invalid_schema_is_reported():
    c = converter_for(converter_spec(settings_for("value", AVRO_CONVERTER), "value"),
                      MemoryRegistry({3: {"schema": '{"type": "nonsense"}'}}))
    with pytest.raises(ConverterError, match="schema id 3 is not a valid Avro schema"):
        c.convert(wire(3, b""))


def test_avro_schema_references():
    address = {"type": "record", "name": "Address", "namespace": "shop",
               "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "namespace": "shop",
              "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "shop.Address"}]}
    registry = MemoryRegistry(
        {5: {"schema": json.dumps(person),
             "references": [{"name": "shop.Address", "subject": "address", "version": 1}]}},
        {("address", 1): {"schema": json.dumps(address)}})
    full = {**person, "fields": [person["fields"][0], {"name": "home", "type": address}]}
    c = converter_for(converter_spec(settings_for("key", AVRO_CONVERTER), "key"), registry)
    got = c.convert(wire(5, avro_bytes(full, {"name": "Ann", "home": {"city": "Oslo"}})))
    assert got.value == {"name": "Ann", "home": {"city": "Oslo"}}
    assert to_json_text(got.value) == '{"name":"Ann","home":{"city":"Oslo"}}'


# ------------------------------------------------------------------ Protobuf

ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Envelope { string kind = 1; }
message Order {
  int64 id = 1;
  string name = 2;
  repeated double amounts = 3;
  Item item = 4;
  enum Color { RED = 0; BLUE = 1; }
  Color color = 5;
  map<string, int32> counts = 6;
  google.protobuf.Timestamp at = 7;
  optional string note = 8;
  bytes blob = 9;
  message Item { bool ok = 1; }
}
"""


def proto_classes(text: str):
    """Message classes compiled independently of the converter (protoc + pool)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    import importlib.resources
    import grpc_tools

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "o.proto"), "w") as f:
            f.write(text)
        out = os.path.join(tmp, "o.desc")
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}",
                        f"-I{importlib.resources.files(grpc_tools) / '_proto'}", "--include_imports",
                        f"--descriptor_set_out={out}", "o.proto"], check=True)
        fds = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def proto_registry():
    return MemoryRegistry({11: {"schema": ORDER_PROTO, "schemaType": "PROTOBUF"},
                           12: {"schema": "syntax = \"proto3\"; message X { int32 a = 1 }",
                                "schemaType": "PROTOBUF"}})


def test_protobuf_values():
    cls = proto_classes(ORDER_PROTO)
    Order = cls("shop.Order")
    msg = Order(id=5, name="n", amounts=[1.5, 2.0], item=cls("shop.Order.Item")(ok=True),
                color=1, counts={"a": 3}, blob=b"\x00")
    msg.at.FromDatetime(dt.datetime(2024, 1, 2, 3, 4, 5))
    c = converter_for(converter_spec(settings_for("value", PROTOBUF_CONVERTER), "value"), proto_registry())
    # message indexes [1] (Order is the file's second message): count 1, index 1, zigzag
    got = c.convert(wire(11, bytes([2, 2]) + msg.SerializeToString()))
    assert got.schema_id == 11
    assert got.value == {"id": 5, "name": "n", "amounts": [1.5, 2.0], "item": {"ok": True},
                         "color": "BLUE", "counts": {"a": 3},
                         "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "note": None,
                         "blob": b"\x00"}
    empty = c.convert(wire(11, bytes([2, 2]))).value  # proto3 defaults, unset messages None
    assert empty == {"id": 0, "name": "", "amounts": [], "item": None, "color": "RED",
                     "counts": {}, "at": None, "note": None, "blob": b""}


NUMBERS_PROTO = """
syntax = "proto3";
import "google/protobuf/wrappers.proto";
message Numbers {
  uint64 u64 = 1; fixed64 f64 = 2; uint32 u32 = 3; float f = 4; double d = 5;
  repeated float fs = 6; google.protobuf.UInt64Value wu64 = 7; google.protobuf.FloatValue wf = 8;
}
"""


def test_protobuf_numbers_as_confluents_converter_gives_them():
    Numbers = proto_classes(NUMBERS_PROTO)("Numbers")
    msg = Numbers(u64=2**64 - 1, f64=2**63, u32=2**32 - 1, f=4321.432, d=4321.432, fs=[0.1, 1e-7])
    msg.wu64.value, msg.wf.value = 2**64 - 2, 1.1
    c = converter_for(converter_spec(settings_for("value", PROTOBUF_CONVERTER), "value"),
                      MemoryRegistry({13: {"schema": NUMBERS_PROTO, "schemaType": "PROTOBUF"}}))
    value = c.convert(wire(13, b"\x00" + msg.SerializeToString())).value
    # uint64 and fixed64 in a Java long; uint32 widened unsigned; floats at float32 precision
    assert json.loads(to_json_text(value)) == {
        "u64": -1, "f64": -(2**63), "u32": 2**32 - 1, "f": 4321.432, "d": 4321.432,
        "fs": [0.1, 1e-7], "wu64": -2, "wf": 1.1}
    assert '"f":4321.432,' in to_json_text(value)


def test_float32_prints_the_shortest_float32_digits():
    assert to_json_text([Float32(4321.43212890625), Float32(3.0), Float32(1e-45),
                         Float32(3.4028234663852886e38), Float32(float("nan")),
                         Float32(1e39)]) == '[4321.432,3.0,1e-45,3.4028235e+38,"NaN","Inf"]'
    c = converter_for(converter_spec({"value.converter": JSON_CONVERTER}, "value"))  # Connect's FLOAT32 schema
    assert to_json_text(c.convert(_envelope({"type": "float32"}, 4321.43212890625)).value) == "4321.432"


def test_avro_floats_are_float32_and_column_types_come_from_the_schema():
    from floeline.records import avro_schema

    schema = {"type": "record", "name": "M", "namespace": "t", "fields": [
        {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
        {"name": "of", "type": ["null", "float"]}, {"name": "fs", "type": {"type": "array", "items": "float"}},
        {"name": "n", "type": {"type": "record", "name": "N", "fields": [{"name": "x", "type": "float"}]}},
        {"name": "n2", "type": "t.N"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
        {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "raw", "type": "bytes"},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "m", "type": {"type": "map", "values": "float"}},
        {"name": "u", "type": ["null", "int", "string"]}]}
    record = {"f": float("nan"), "d": 1.1, "of": 1.1, "fs": [0.1], "n": {"x": 2.2}, "n2": {"x": 3.3},
              "i": 1, "l": 2, "b": True, "s": "s", "e": "A", "raw": b"r", "dec": Decimal("1.50"),
              "day": dt.date(2024, 1, 2), "tm": dt.time(1, 2, 3), "ts": dt.datetime(2024, 1, 2, tzinfo=UTC),
              "m": {"k": 4.4}, "u": 5}
    registry = MemoryRegistry({21: {"schema": json.dumps(schema)}})
    c = converter_for(converter_spec(settings_for("value", AVRO_CONVERTER), "value"), registry)
    value = c.convert(wire(21, avro_bytes(schema, record))).value
    assert json.loads(to_json_text(value))["of"] == 1.1 and json.loads(to_json_text(value))["d"] == 1.1
    assert to_json_text([value["fs"], value["n"], value["n2"], value["m"], value["f"]]) == \
        '[[0.1],{"x":2.2},{"x":3.3},{"k":4.4},"NaN"]'
    assert avro_schema.column_types(fastavro.parse_schema(schema)) == {
        "f": "double", "d": "double", "of": "double", "fs": "variant", "n": "variant",
        "n2": "variant", "i": "decimal(38,0)", "l": "decimal(38,0)", "b": "boolean",
        "s": "string", "e": "string", "raw": "string", "dec": "string", "day": "date",
        "tm": "string", "ts": "timestamp_ntz", "m": "variant", "u": "variant"}
    assert avro_schema.column_types(fastavro.parse_schema("string")) == {}


def test_protobuf_message_index_zero_and_nested():
    cls = proto_classes(ORDER_PROTO)
    c = converter_for(converter_spec(settings_for("value", PROTOBUF_CONVERTER), "value"), proto_registry())
    env = cls("shop.Envelope")(kind="k").SerializeToString()
    assert c.convert(wire(11, b"\x00" + env)).value == {"kind": "k"}  # single 0: [0]
    item = cls("shop.Order.Item")(ok=True).SerializeToString()
    # [1, 0]: Order's first declared nested message (protoc's CountsEntry comes first
    # in the descriptor but is not a declared message)
    assert c.convert(wire(11, bytes([4, 2, 0]) + item)).value == {"ok": True}


def test_protobuf_errors():
    c = converter_for(converter_spec(settings_for("value", PROTOBUF_CONVERTER), "value"), proto_registry())
    with pytest.raises(ConverterError, match="message index \\[7\\]"):
        c.convert(wire(11, bytes([2, 14]) + b""))
    with pytest.raises(ConverterError, match="corrupt Protobuf"):
        c.convert(wire(11, b"\x00" + b"\x0a\x05ab"))  # string length past the end
    with pytest.raises(ConverterError, match="schema id 12 is not a valid Protobuf schema: .*1:44: Expected \";\""):
        c.convert(wire(12, b"\x00"))


# ------------------------------------------------------------------ JSON Schema, registry client

def test_json_schema_converter():
    c = converter_for(converter_spec(settings_for("value", JSON_SCHEMA_CONVERTER), "value"),
                      MemoryRegistry({4: {"schema": "{}", "schemaType": "JSON"}}))
    got = c.convert(wire(4, b'{"a": 1}'))
    assert got.value == {"a": 1} and got.schema_id == 4
    with pytest.raises(ConverterError, match="not valid JSON at byte 1"):
        c.convert(wire(4, b"{x"))


def test_unreachable_registry_is_retried_until_the_bound():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    settings = {"value.converter": AVRO_CONVERTER, "errors.retry.timeout": "300",
                "value.converter.schema.registry.url": f"http://127.0.0.1:{port}/x"}
    c = converter_for(converter_spec(settings, "value"), policy=policy_from_settings(settings))
    with pytest.raises(RetriesExhausted, match=f"(?s)127.0.0.1:{port}.*errors.retry.timeout") as caught:
        c.convert(wire(1, b""))
    assert isinstance(caught.value.__cause__, RegistryUnavailable) and caught.value.attempts > 1
    # In a batch the next records do not wait the bound again, and fail the batch, not the record.
    row = decoded(RecordDecoder(decode_spec(settings)), "t", 0, 1, None, -1, None, wire(1, b""), [])
    assert row["_batch_failure"] == "terminal" and f"127.0.0.1:{port}" in row["_decode_error"]


# ------------------------------------------------------------------ decode without Spark

def decoded(decoder, *args) -> dict:
    """One record through RecordDecoder.decode, as {decode column: value}."""
    return dict(zip((name for name, _ in DECODE_COLUMNS), decoder.decode(*args)))


def test_record_decoder_rows():
    settings = settings_for("value", AVRO_CONVERTER)
    settings["key.converter"] = STRING_CONVERTER
    decoder = RecordDecoder(decode_spec(settings), avro_registry())
    ok = decoded(decoder, "t", 0, 1, 5, 0, b"k", wire(1, avro_bytes(ORDER_V1, ORDER)), [("h", b"42")])
    assert ok == {"_route_topic": "t", "_key_json": '"k"', "_headers_json": '{"h":"42"}',
                  "_value_json": to_json_text(ORDER), "_schema_id": 1, "_skip": False,
                  "_decode_error": None, "_decode_stage": None, "_error_class": None,
                  "_error_trace": None, "_batch_failure": None,
                  # the columns the schema declares, as DeclaredTypes reads them on the driver
                  "_declared_types": json.dumps(column_types(fastavro.parse_schema(ORDER_V1)),
                                                separators=(",", ":"))}
    tomb = decoded(decoder, "t", 0, 2, 5, 0, None, None, [])
    assert (tomb["_key_json"], tomb["_headers_json"], tomb["_value_json"], tomb["_decode_error"]) == \
        (None, None, None, None)
    bad = decoded(decoder, "t", 0, 3, 5, 0, b"k", wire(42, b""), [])
    assert bad["_route_topic"] == "t" and bad["_value_json"] is None and bad["_skip"] is False
    assert "unknown schema id 42" in bad["_decode_error"]
    assert (bad["_decode_stage"], bad["_error_class"]) == ("value converter", "ConverterError")
    assert "Traceback" in bad["_error_trace"] and bad["_batch_failure"] is None  # the record's fault


def test_decode_batches_keeps_every_row_and_column():
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array([b"k", None], pa.binary()),
        "value": pa.array([b'{"a":1}', b"{oops"], pa.binary()),
        "route": ["t", "t"],
        "timestamp": pa.array([1_700_000_000_000_000, None], pa.timestamp("us", tz="UTC")),
        "source": pa.StructArray.from_arrays(
            [pa.array([0, 0], pa.int32()), pa.array([0, 1], pa.int64()), pa.array([0, 0], pa.int32())],
            ["partition", "offset", "timestampType"]),
    })
    (out,) = list(decode_batches(iter([batch]), decode_spec({"value.converter.schemas.enable": "false"}),
                                 batch.schema.names))
    assert out.schema.names == batch.schema.names + [name for name, _ in DECODE_COLUMNS]
    rows = out.to_pylist()
    assert rows[0]["_value_json"] == '{"a":1}' and rows[0]["_key_json"] == '"k"'
    assert rows[1]["_decode_stage"] == "value converter" and rows[1]["_value_json"] is None
    assert rows[1]["source"]["offset"] == 1 and rows[1]["value"] == b"{oops"


T = "org.apache.kafka.connect.transforms."


def test_record_decoder_applies_transforms():
    settings = {
        "value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false",
        "transforms": "drop,route,hoist",
        "transforms.drop.type": T + "Filter", "transforms.drop.predicate": "tomb",
        "predicates": "tomb", "predicates.tomb.type": T + "predicates.RecordIsTombstone",
        "transforms.route.type": T + "RegexRouter", "transforms.route.regex": "raw_(.*)",
        "transforms.route.replacement": "clean_$1",
        "transforms.hoist.type": T + "HoistField$Value", "transforms.hoist.field": "payload",
    }
    decoder = RecordDecoder(decode_spec(settings))
    row = decoded(decoder, "raw_orders", 0, 1, 5, 0, b"k", b"[1,2]", [])
    assert (row["_route_topic"], row["_key_json"], row["_value_json"], row["_skip"]) == \
        ("clean_orders", '"k"', '{"payload":[1,2]}', False)
    dropped = decoded(decoder, "raw_orders", 0, 2, 5, 0, b"k", None, [])
    assert (dropped["_route_topic"], dropped["_value_json"], dropped["_skip"]) == ("raw_orders", None, True)


def test_record_decoder_reports_transform_errors():
    settings = {"value.converter.schemas.enable": "false", "transforms": "x",
                "transforms.x.type": T + "ExtractField$Value", "transforms.x.field": "a"}
    row = decoded(RecordDecoder(decode_spec(settings)), "t", 0, 1, None, -1, None, b"[1]", [])
    assert row["_skip"] is False and row["_decode_stage"] == "transform"
    assert row["_error_class"] == "TransformError" and "'x'" in row["_decode_error"]


def test_converter_error_pickles_with_its_stage():
    import pickle
    err = pickle.loads(pickle.dumps(ConverterError("bad", "key converter")))
    assert (err.reason, err.stage, str(err)) == ("bad", "key converter", "bad")


def test_avro_with_a_schema_given_in_the_config():
    import io
    import json as _json

    import fastavro

    from floeline.errors import ConfigError
    from floeline.records.converters.base import ConverterError
    from floeline.config.decoding import AVRO_CONVERTER, check_converters, converter_spec
    from floeline.records.converters.factory import converter_for

    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
                                                        {"name": "tag", "type": "string"}]}
    settings = {"value.converter": AVRO_CONVERTER, "value.converter.avro.schema": _json.dumps(schema)}
    check_converters(settings)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), {"id": 7, "tag": "x"})
    assert converter_for(converter_spec(settings, "value")).convert(out.getvalue()).value == {"id": 7, "tag": "x"}
    with pytest.raises(ConverterError, match="corrupt Avro"):
        converter_for(converter_spec(settings, "value")).convert(out.getvalue()[:1])
    with pytest.raises(ConfigError, match="value.converter.avro.schema is not a valid Avro schema"):
        check_converters({"value.converter": AVRO_CONVERTER, "value.converter.avro.schema": "{nope"})
