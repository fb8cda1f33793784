"""Debezium change events through the whole connector, as a user runs one: the recorded
Debezium PostgreSQL output (tests/fixtures/debezium, JsonConverter with schemas) is
produced to a real topic, the connector runs with Debezium's ExtractNewRecordState
(insert.mode=insert: the flattened rows are appended) until caught up, and the table's
column types and values are queried."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
JSON = "org.apache.kafka.connect.json.JsonConverter"


def recorded_customers() -> list[dict]:
    records = json.loads((FIXTURES / "postgres_json_schemas.json").read_text())
    return [r for r in records if r["topic"].endswith(".customers")]


def test_flattened_change_events_land_with_debeziums_types(
        kafka, spark, topic_name, make_config, run_connector, read_table):
    recorded = recorded_customers()
    topic = topic_name("dbz")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"key": r["key"], "value": r["value"]} for r in recorded], partition=0)
    config = make_config(**{
        "topics": topic, "snowflake.topic2table.map": f"{topic}:CUSTOMERS",
        "snowflake.enable.schematization": "true",
        "key.converter": JSON, "value.converter": JSON,
        "transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
        "transforms.unwrap.add.fields": "op,source.ts_ms"})
    connector = run_connector(config)

    table = read_table("CUSTOMERS")
    types = {f.name.upper(): f.dataType.simpleString() for f in table.schema}
    assert {name: types[name] for name in (
        "ID", "ACCOUNT", "NAME", "BALANCE", "RATING", "BORN", "WAKES_AT", "UPDATED_AT", "CREATED_AT",
        "ACTIVE", "REF", "EMAIL", "__DELETED", "__OP", "__SOURCE_TS_MS")} == {
        "ID": "decimal(38,0)", "ACCOUNT": "decimal(38,0)", "NAME": "string", "BALANCE": "string",
        "RATING": "double", "BORN": "date", "WAKES_AT": "string", "UPDATED_AT": "timestamp_ntz",
        "CREATED_AT": "timestamp", "ACTIVE": "boolean", "REF": "string", "EMAIL": "string",
        "__DELETED": "string", "__OP": "string", "__SOURCE_TS_MS": "decimal(38,0)"}
    assert types["ATTRS"] in ("variant", "string")  # VARIANT (as JSON text with variant storage=json)

    rows = {json.loads(r["RECORD_METADATA"].toJson())["offset"]: r.asDict() for r in table.collect()}
    tombstones = [r["offset"] for r in recorded if r["value"] is None]
    assert sorted(rows) == [r["offset"] for r in recorded if r["value"] is not None]
    assert tombstones == [8, 11, 19] and sum(rep.skipped for rep in connector.reports) == 3
    ada = {k.upper(): v for k, v in rows[0].items()}
    # numeric(10,2) 1234.50: Connect's Decimal is a VARCHAR column, as Snowflake's connector
    # makes it; the number's text, without the scale's trailing zero
    assert (ada["ID"], ada["NAME"], ada["BALANCE"], ada["__OP"], ada["__DELETED"]) == (
        Decimal(1), "Ada", "1234.5", "r", "false")
    assert ada["BORN"] == dt.date(1990, 3, 1)
    assert ada["UPDATED_AT"] == dt.datetime(2026, 1, 2, 3, 4, 5, 123456)  # local time, as written
    assert ada["CREATED_AT"].astimezone(dt.timezone.utc) == dt.datetime(2026, 1, 2, 3, 4, 5, 123456,
                                                                         dt.timezone.utc)
    assert ada["WAKES_AT"].startswith("07:30:00")
    attrs = ada["ATTRS"]
    assert json.loads(attrs if isinstance(attrs, str) else attrs.toJson()) == {"tags": ["a", "b"],
                                                                                 "tier": "gold"}
    grace = {k.upper(): v for k, v in rows[1].items()}
    assert grace["BORN"] == dt.date(1906, 12, 9) and grace["BALANCE"] == "-0.01"
    assert grace["CREATED_AT"].astimezone(dt.timezone.utc) == dt.datetime(2000, 1, 1, 4, 59, 59,
                                                                           tzinfo=dt.timezone.utc)
    deleted = {k.upper(): v for k, v in rows[7].items()}  # the delete of id 2, rewritten
    assert (deleted["ID"], deleted["__OP"], deleted["__DELETED"]) == (Decimal(2), "d", "true")
    frances = {k.upper(): v for k, v in rows[15].items()}  # after ALTER TABLE ... ADD email
    assert frances["EMAIL"] == "fa@example.com" and frances["BORN"] is None


def test_plain_change_events_without_the_smt_land_one_row_per_change(
        kafka, spark, topic_name, make_config, run_connector, read_table):
    """Today's behaviour without the SMT (and the connector's SQL path: plain JSON, no
    converters in Python): each change is a row of the envelope's fields."""
    records = [r for r in json.loads((FIXTURES / "postgres_json_plain.json").read_text())
               if r["topic"].endswith(".order_lines")]
    topic = topic_name("dbz_plain")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"key": r["key"], "value": r["value"]} for r in records], partition=0)
    run_connector(make_config(**{"topics": topic, "snowflake.topic2table.map": f"{topic}:ORDER_LINES",
                                 "snowflake.enable.schematization": "true"}))
    rows = {json.loads(r["RECORD_METADATA"].toJson())["offset"]: {k.upper(): v for k, v in r.asDict().items()}
            for r in read_table("ORDER_LINES").collect()}
    assert sorted(rows) == [r["offset"] for r in records]  # the tombstone too (behavior.on.null.values)
    assert [rows[o]["OP"] for o in range(6)] == ["r", "r", "r", "c", "u", "d"]
    assert json.loads(rows[4]["AFTER"].toJson())["qty"] == 3 and rows[6]["OP"] is None


def test_plain_change_events_upsert_in_one_pass_from_a_real_topic(
        kafka, spark, topic_name, make_config, run_connector, read_table):
    """insert.mode=upsert over the same plain JSON: batches of envelopes take the
    one-pass MERGE (ingest/onepass_merge.py) from the broker, the batch with a new column
    falls back to the general path, and the table ends as PostgreSQL's did."""
    records = [r for r in json.loads((FIXTURES / "postgres_json_plain.json").read_text())
               if r["topic"].endswith(".customers")]
    topic = topic_name("dbz_upsert")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"key": r["key"], "value": r["value"]} for r in records], partition=0)
    connector = run_connector(make_config(**{
        "topics": topic, "snowflake.topic2table.map": f"{topic}:CUSTOMERS", "insert.mode": "upsert",
        "primary.key.mode": "record_key", "delete.enabled": "true", "buffer.count.records": "6"}))
    paths = ["one pass merge" in r.phases for r in connector.reports]
    assert paths[0] and not all(paths), [r.phases for r in connector.reports]
    assert sum(r.records_read for r in connector.reports) == len(records)
    rows = {int(r["ID"]): r for r in read_table("CUSTOMERS").collect()}
    assert set(rows) == {1, 4, 5, 6, 7, 20}
    assert rows[4]["RATING"] == 3.0 and rows[20]["NAME"] == "Grace" and rows[1]["EMAIL"] is not None


def test_avro_change_events_through_the_registry_land_typed_columns(
        kafka, spark, schema_registry, topic_name, make_config, run_connector, read_table):
    """Debezium's Avro output (Apicurio's AvroConverter, recorded with its schemas): the
    schemas registered in this run's registry, the recorded bytes produced with the
    ids it gave them, the connector with AvroConverter and the SMT (default mode)."""
    from records_io import register

    answers = json.loads((FIXTURES / "postgres_avro_registry.json").read_text())
    records = [r for r in json.loads((FIXTURES / "postgres_avro.json").read_text())
               if r["topic"].endswith(".customers")]
    topic = topic_name("dbz_avro")
    devkafka.create_topic(kafka, topic)
    new_ids: dict[int, int] = {}

    def rewired(text: str | None, side: str) -> bytes | None:
        if text is None:
            return None
        data = base64.b64decode(text)
        old = int.from_bytes(data[1:5], "big")
        if old not in new_ids:
            new_ids[old] = register(schema_registry, f"{topic}-{side}", answers[str(old)]["schema"])
        return data[:1] + new_ids[old].to_bytes(4, "big") + data[5:]

    produce(kafka, topic, [{"key": rewired(r["key"], "key"), "value": rewired(r["value"], "value")}
                           for r in records], partition=0)
    avro = "io.confluent.connect.avro.AvroConverter"
    run_connector(make_config(**{
        "topics": topic, "snowflake.topic2table.map": f"{topic}:CUSTOMERS_AVRO",
        "snowflake.enable.schematization": "true", "behavior.on.null.values": "IGNORE",
        "key.converter": avro, "key.converter.schema.registry.url": schema_registry,
        "value.converter": avro, "value.converter.schema.registry.url": schema_registry,
        "transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}))

    table = read_table("CUSTOMERS_AVRO")
    types = {f.name.upper(): f.dataType.simpleString() for f in table.schema}
    assert {name: types[name] for name in ("ID", "BALANCE", "BORN", "UPDATED_AT", "CREATED_AT", "EMAIL")} == {
        "ID": "decimal(38,0)", "BALANCE": "string", "BORN": "date", "UPDATED_AT": "timestamp_ntz",
        "CREATED_AT": "timestamp", "EMAIL": "string"}
    rows = {json.loads(r["RECORD_METADATA"].toJson())["offset"]: {k.upper(): v for k, v in r.asDict().items()}
            for r in table.collect()}
    deletes = [r["offset"] for r in json.loads((FIXTURES / "postgres_json_schemas.json").read_text())
               if r["topic"].endswith(".customers") and r["value"] and '"op":"d"' in r["value"]]
    assert sorted(rows) == [r["offset"] for r in records if r["value"] is not None and r["offset"] not in deletes]
    barbara = rows[3]
    assert (barbara["BORN"], barbara["UPDATED_AT"]) == (dt.date(2000, 2, 29), dt.datetime(2026, 6, 30, 12, 0, 0, 500000))
    assert barbara["CREATED_AT"].astimezone(dt.timezone.utc) == dt.datetime(2026, 6, 30, 10, 0, 0, 500000,
                                                                             tzinfo=dt.timezone.utc)
    assert rows[15]["EMAIL"] == "fa@example.com"
