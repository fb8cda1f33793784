"""Compatible schema evolution keeps landing, for every registry format: records
written with a schema's v1 create the table, records of its v2 (wider numbers, new
fields at any depth, a decimal whose precision grows) land after them, the v1 rows
stay as they were and nothing goes to the dead-letter queue. A change no column type
holds (a number field that becomes text) is a row error naming the record and the
fix. Real broker, real registry (Apicurio), real connector runs: each format's
connector runs once after v1 and once after v2, over small topics."""

from __future__ import annotations

import json
import os
import uuid
from decimal import Decimal

import pytest

from floeline.config import config_from_dict
from floeline.config.decoding import AVRO_CONVERTER, JSON_SCHEMA_CONVERTER, PROTOBUF_CONVERTER
from floeline.dev import kafka as devkafka
from floeline.ingest import Connector
from floeline.records.values_to_columns import FIT_FIX
from floeline.sources.kafka import produce
from floeline.sql.script import run_sql
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.tables import read_declared
from records_io import avro, consume_all, headers_of, proto_class, register, wire

pytestmark = pytest.mark.integration

N = 12  # records per schema version and topic

PAYMENT_V1 = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"},
    {"name": "amount", "type": "float"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "note", "type": {"type": "record", "name": "Note", "fields": [
        {"name": "text", "type": "string"}]}},
]}
PAYMENT_V2 = {"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "double"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 4}},
    {"name": "note", "type": {"type": "record", "name": "Note", "fields": [
        {"name": "text", "type": "string"},
        {"name": "lang", "type": "string", "default": "en"},
        {"name": "meta", "type": ["null", {"type": "record", "name": "Meta", "fields": [
            {"name": "source", "type": "string"}]}], "default": None}]}},
    {"name": "channel", "type": "string", "default": "web"},
]}
# A table made by hand with NUMBER(10,2), fed an Avro decimal that grows to (14,4).
PRICE_V1 = {"type": "record", "name": "Price", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}
PRICE_V2 = {**PRICE_V1, "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 4}}]}
# A field no column type holds both ways: int, then string.
CODE_V1 = {"type": "record", "name": "Coded", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "code", "type": "int"}]}
CODE_V2 = {**CODE_V1, "fields": [{"name": "id", "type": "long"}, {"name": "code", "type": "string"}]}

PAYMENT_PROTO_V1 = """syntax = "proto3";
package shop;
message Payment {
  message Note { string text = 1; }
  int32 id = 1;
  float amount = 2;
  Note note = 3;
}
"""
PAYMENT_PROTO_V2 = """syntax = "proto3";
package shop;
message Payment {
  message Note {
    message Meta { string source = 1; }
    string text = 1;
    string lang = 2;
    Meta meta = 3;
  }
  int64 id = 1;
  double amount = 2;
  Note note = 3;
  string channel = 4;
}
"""

PAYMENT_JSON_V1 = {"type": "object", "properties": {
    "id": {"type": "integer", "connect.type": "int32"},
    "amount": {"type": "number"},
    "note": {"type": "object", "properties": {"text": {"type": "string"}}}}}
PAYMENT_JSON_V2 = {"type": "object", "properties": {
    "id": {"type": "integer", "connect.type": "int64"},
    "amount": {"type": "number"},
    "note": {"type": "object", "properties": {
        "text": {"type": "string"}, "lang": {"type": "string"},
        "meta": {"type": "object", "properties": {"source": {"type": "string"}}}}},
    "channel": {"type": "string"}}}


def v1_payment(i: int) -> dict:
    return {"id": i, "amount": i + 0.25, "price": Decimal(f"{i}.99"), "note": {"text": f"t{i}"}}


def v2_payment(i: int) -> dict:
    return {"id": 2**40 + i, "amount": i + 1 / 3, "price": Decimal(f"1234567890.{i:03d}7"),
            "note": {"text": f"t{i}", "lang": "fr", "meta": {"source": "app"}}, "channel": "app"}


def variant(value):
    return None if value is None else json.loads(value.toJson())


def offset(row) -> int:
    return json.loads(row["RECORD_METADATA"].toJson())["offset"]


def table_path(warehouse: str, topic: str) -> str:
    return os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())


class Run:
    """One format's connector over its topics, run after each schema version."""

    def __init__(self, spark, kafka, registry, warehouse, converter, topics, dlq):
        self.spark, self.warehouse = spark, warehouse
        self.config = config_from_dict({
            "name": f"evo{uuid.uuid4().hex[:6]}", "bootstrap.servers": kafka, "topics": ",".join(topics),
            "floeline.warehouse": warehouse, "buffer.flush.time": "1",
            "value.converter": converter, "value.converter.schema.registry.url": registry,
            "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
        self.errors = 0

    def __call__(self) -> None:
        connector = Connector(self.config, self.spark)
        connector.run(until_caught_up=True)
        self.errors += sum(r.errors for r in connector.reports)

    def rows(self, topic: str) -> list:
        table = read_declared(self.spark, table_path(self.warehouse, topic))
        return sorted(table.collect(), key=offset)

    def types(self, topic: str) -> dict[str, str]:
        table = read_declared(self.spark, table_path(self.warehouse, topic))
        return {f.name: f.dataType.simpleString() for f in table.schema}


@pytest.fixture(scope="module")
def avro_run(kafka, spark, schema_registry, tmp_path_factory):
    """Three topics through the Avro connector: PAYMENT_V1 -> V2 (connector-made table),
    PRICE_V1 -> V2 (a hand-made NUMBER(10,2) column), CODE_V1 -> V2 (int -> string)."""
    warehouse = str(tmp_path_factory.mktemp("evolution") / "warehouse")
    suffix = uuid.uuid4().hex[:8]
    payments, prices, codes, dlq = (f"{n}_{suffix}" for n in ("pay", "price", "code", "evo_dlq"))
    for topic in (payments, prices, codes, dlq):
        devkafka.create_topic(kafka, topic)
    run_sql(spark, f"CREATE TABLE {prices.upper()} (RECORD_METADATA VARIANT, ID NUMBER, PRICE NUMBER(10,2)) "
                   f"ENABLE_SCHEMA_EVOLUTION = TRUE", Warehouse(warehouse))
    run = Run(spark, kafka, schema_registry, warehouse, AVRO_CONVERTER, [payments, prices, codes], dlq)
    schemas = {(t, v): register(schema_registry, f"{t}-value", json.dumps(s))
               for t, v, s in ((payments, 1, PAYMENT_V1), (prices, 1, PRICE_V1), (codes, 1, CODE_V1))}

    def send(topic, version, schema, values):
        produce(kafka, topic, [wire(schemas[(topic, version)], avro(schema, v)) for v in values], partition=0)

    send(payments, 1, PAYMENT_V1, [v1_payment(i) for i in range(N)])
    send(prices, 1, PRICE_V1, [{"id": i, "price": Decimal("12345678.91")} for i in range(N)])
    send(codes, 1, CODE_V1, [{"id": i, "code": i} for i in range(N)])
    run()
    schemas.update({(t, v): register(schema_registry, f"{t}-value", json.dumps(s))
                    for t, v, s in ((payments, 2, PAYMENT_V2), (prices, 2, PRICE_V2), (codes, 2, CODE_V2))})
    send(payments, 2, PAYMENT_V2, [v2_payment(i) for i in range(N)])
    send(prices, 2, PRICE_V2, [{"id": N + i, "price": Decimal(f"1234567890.{i:03d}7")} for i in range(N)])
    send(codes, 2, CODE_V2, [{"id": N, "code": "42"}, {"id": N + 1, "code": "A-17"}])
    run()
    run.topics = {"payments": payments, "prices": prices, "codes": codes}
    run.dead = consume_all(kafka, dlq, 1)
    return run


def test_avro_wider_numbers_new_nested_fields_and_a_growing_decimal_land(avro_run):
    topic = avro_run.topics["payments"]
    rows = avro_run.rows(topic)
    assert len(rows) == 2 * N and [offset(r) for r in rows] == list(range(2 * N))
    # NUMBER holds int and long, FLOAT float and double, VARIANT the record as it grows,
    # VARCHAR the decimal at any precision (as Snowflake maps Connect's types).
    assert avro_run.types(topic) == {"RECORD_METADATA": "variant", "ID": "decimal(38,0)", "AMOUNT": "double",
                                     "PRICE": "string", "NOTE": "variant", "CHANNEL": "string"}
    for i, row in enumerate(rows[:N]):  # v1 rows as they were
        assert (row["ID"], row["AMOUNT"], row["PRICE"]) == (i, i + 0.25, f"{i}.99")
        assert variant(row["NOTE"]) == {"text": f"t{i}"} and row["CHANNEL"] is None
    for i, row in enumerate(rows[N:]):  # v2 rows exact
        assert (row["ID"], row["AMOUNT"], row["PRICE"]) == (2**40 + i, i + 1 / 3, f"1234567890.{i:03d}7")
        assert variant(row["NOTE"]) == {"text": f"t{i}", "lang": "fr", "meta": {"source": "app"}}
        assert row["CHANNEL"] == "app"
    assert not [m for m in avro_run.dead if headers_of(m)["__connect.errors.topic"] == topic]


def test_a_number_column_widens_when_evolution_is_on_and_old_rows_keep_their_values(avro_run):
    topic = avro_run.topics["prices"]
    rows = avro_run.rows(topic)
    assert len(rows) == 2 * N
    # Delta type widening: NUMBER(10,2) -> NUMBER(14,4), no file rewritten, no row refused.
    assert avro_run.types(topic)["PRICE"] == "decimal(14,4)"
    assert all(r["PRICE"] == Decimal("12345678.91") for r in rows[:N])
    assert [r["PRICE"] for r in rows[N:]] == [Decimal(f"1234567890.{i:03d}7") for i in range(N)]
    described = {r["name"]: r["type"] for r in run_sql(
        avro_run.spark, f"DESCRIBE TABLE {topic.upper()}", Warehouse(avro_run.warehouse)).collect()}
    assert described["PRICE"] == "NUMBER(14,4)"
    history = avro_run.spark.sql(f"DESCRIBE HISTORY delta.`{table_path(avro_run.warehouse, topic)}`")
    assert "CHANGE COLUMN" in [r["operation"] for r in history.collect()]
    assert not [m for m in avro_run.dead if headers_of(m)["__connect.errors.topic"] == topic]


def test_a_field_that_turns_from_int_to_text_is_a_row_error_naming_the_fix(avro_run):
    topic = avro_run.topics["codes"]
    rows = avro_run.rows(topic)
    assert [(r["ID"], r["CODE"]) for r in rows] == [(i, i) for i in range(N)] + [(N, 42)]  # "42" fits
    (dead,) = [m for m in avro_run.dead if headers_of(m)["__connect.errors.topic"] == topic]
    h = headers_of(dead)
    assert (h["__connect.errors.partition"], h["__connect.errors.offset"]) == ("0", str(N + 1))
    message = h["__connect.errors.exception.message"]
    assert '"A-17"' in message and "does not fit column CODE of type NUMBER(38,0)" in message, message
    assert FIT_FIX in message
    assert avro_run.types(topic)["CODE"] == "decimal(38,0)"  # the column did not change
    assert avro_run.errors == 1  # the one record, of every topic's


def evolve(kafka, spark, registry, tmp_path, converter, schema_type, schemas, values) -> list:
    """A topic through `converter`'s connector: `values[0]` (encoders of record i) with
    `schemas[0]`, a run, `values[1]` with `schemas[1]`, a run; the table's rows, once
    checked to be all of them, with no row error and nothing in the DLQ, in columns of
    the types Snowflake's connector makes (NUMBER, FLOAT, VARIANT, VARCHAR)."""
    topic, dlq = f"evo_{uuid.uuid4().hex[:8]}", f"evo_dlq_{uuid.uuid4().hex[:8]}"
    devkafka.create_topic(kafka, topic)
    devkafka.create_topic(kafka, dlq)
    run = Run(spark, kafka, registry, str(tmp_path / "warehouse"), converter, [topic], dlq)
    for schema, encode in zip(schemas, values):
        schema_id = register(registry, f"{topic}-value", schema, schema_type)
        produce(kafka, topic, [wire(schema_id, encode(i)) for i in range(N)], partition=0)
        run()
    rows = run.rows(topic)
    assert len(rows) == 2 * N and run.errors == 0 and consume_all(kafka, dlq, 0, timeout_s=1) == []
    assert run.types(topic) == {"RECORD_METADATA": "variant", "ID": "decimal(38,0)", "AMOUNT": "double",
                                "NOTE": "variant", "CHANNEL": "string"}
    return rows


V2_NOTE = {"lang": "fr", "meta": {"source": "app"}}


def test_protobuf_wider_numbers_and_fields_at_any_depth_land(kafka, spark, schema_registry, tmp_path):
    v1, v2 = (proto_class(text, "shop.Payment") for text in (PAYMENT_PROTO_V1, PAYMENT_PROTO_V2))
    rows = evolve(kafka, spark, schema_registry, tmp_path, PROTOBUF_CONVERTER, "PROTOBUF",
                  [PAYMENT_PROTO_V1, PAYMENT_PROTO_V2], [
                      lambda i: b"\x00" + v1(id=i, amount=i + 0.25, note={"text": f"t{i}"}).SerializeToString(),
                      lambda i: b"\x00" + v2(id=2**40 + i, amount=i + 1 / 3, channel="app",
                                             note={"text": f"t{i}", **V2_NOTE}).SerializeToString()])
    assert [(r["ID"], r["AMOUNT"], variant(r["NOTE"]), r["CHANNEL"]) for r in rows] == [
        (i, i + 0.25, {"text": f"t{i}"}, None) for i in range(N)] + [
        (2**40 + i, i + 1 / 3, {"text": f"t{i}", **V2_NOTE}, "app") for i in range(N)]


def test_json_schema_wider_numbers_and_fields_at_any_depth_land(kafka, spark, schema_registry, tmp_path):
    # Whole amounts first: the schema's `number` makes AMOUNT a FLOAT column, so the
    # fractions of v2 are not rounded into a NUMBER made from the first values.
    rows = evolve(kafka, spark, schema_registry, tmp_path, JSON_SCHEMA_CONVERTER, "JSON",
                  [json.dumps(PAYMENT_JSON_V1), json.dumps(PAYMENT_JSON_V2)], [
                      lambda i: json.dumps({"id": i, "amount": i, "note": {"text": f"t{i}"}}).encode(),
                      lambda i: json.dumps({"id": 2**40 + i, "amount": i + 0.5, "channel": "app",
                                            "note": {"text": f"t{i}", **V2_NOTE}}).encode()])
    assert [(r["ID"], r["AMOUNT"], variant(r["NOTE"]), r["CHANNEL"]) for r in rows] == [
        (i, float(i), {"text": f"t{i}"}, None) for i in range(N)] + [
        (2**40 + i, i + 0.5, {"text": f"t{i}", **V2_NOTE}, "app") for i in range(N)]
