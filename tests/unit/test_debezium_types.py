"""Debezium's semantic types (records/debezium_types.py) as the converters read them:
recorded Debezium PostgreSQL output (tests/fixtures/debezium) through JsonConverter's
schema envelope and, for the same changes, Avro in Confluent's wire format with the
registry's recorded schemas (connect.name on each field); and the column types their
schemas declare."""

from __future__ import annotations

import base64
import io
import json
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from floeline.records.avro_schema import column_types
from floeline.records.converters.avro import AvroConverter, ConfigSchemaAvroConverter
from floeline.records.converters.base import ConverterError
from floeline.records.converters.connect_json import JsonConverter, connect_json_value
from floeline.records.json_text import to_json_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
UTC = timezone.utc


def recorded(name: str, topic_suffix: str = "customers") -> dict[int, dict]:
    """offset -> the recorded record of one table's topic."""
    records = json.loads((FIXTURES / name).read_text())
    return {r["offset"]: r for r in records if r["topic"].endswith("." + topic_suffix)}


CUSTOMERS = recorded("postgres_json_schemas.json")
CUSTOMERS_PLAIN = recorded("postgres_json_plain.json")


def envelope(offset: int) -> dict:
    return JsonConverter(True).convert(CUSTOMERS[offset]["value"].encode()).value


# --- JsonConverter with schemas.enable=true ---------------------------------------------


def test_snapshot_row_lands_as_the_values_postgresql_holds():
    # (1, 9000000001, 'Ada', 'ada', 1234.50, 4.5, '1990-03-01', '07:30:00',
    #  '2026-01-02 03:04:05.123456', '2026-01-02 03:04:05.123456+00', true,
    #  '{"tier": "gold", "tags": ["a", "b"]}', '6f1c1d2e-...-000000000001', '\x0102ff')
    after = envelope(0)["after"]
    assert after == {
        "id": 1, "account": 9000000001, "name": "Ada", "nickname": "ada",
        "balance": Decimal("1234.50"), "rating": 4.5, "born": date(1990, 3, 1),
        "wakes_at": time(7, 30), "updated_at": datetime(2026, 1, 2, 3, 4, 5, 123456, UTC),
        "created_at": datetime(2026, 1, 2, 3, 4, 5, 123456, UTC), "active": True,
        "attrs": {"tags": ["a", "b"], "tier": "gold"},
        "ref": "6f1c1d2e-0000-4000-8000-000000000001", "photo": b"\x01\x02\xff"}
    text = json.loads(to_json_text(after))
    assert (text["born"], text["wakes_at"], text["updated_at"], text["created_at"]) == (
        "1990-03-01", "07:30:00.000", "2026-01-02T03:04:05.123456Z", "2026-01-02T03:04:05.123456Z")
    assert text["attrs"] == {"tags": ["a", "b"], "tier": "gold"} and text["balance"] == 1234.5


def test_edge_values_dates_before_1970_offsets_and_the_last_microsecond():
    grace, linus = envelope(1)["after"], envelope(2)["after"]
    # '1906-12-09', -0.01, '1999-12-31 23:59:59' (local), '1999-12-31 23:59:59-05'
    assert grace["born"] == date(1906, 12, 9) and grace["balance"] == Decimal("-0.01")
    assert grace["updated_at"] == datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert grace["created_at"] == datetime(2000, 1, 1, 4, 59, 59, tzinfo=UTC)
    assert grace["attrs"] == {} and grace["wakes_at"] is None
    # '1969-12-28', '23:59:59.999999', the epoch, nulls
    assert linus["born"] == date(1969, 12, 28) and linus["wakes_at"] == time(23, 59, 59, 999999)
    assert linus["updated_at"] == datetime(1970, 1, 1, tzinfo=UTC) and linus["attrs"] is None
    assert linus["balance"] == Decimal("0.00")


def test_streamed_insert_with_an_offset_and_the_largest_decimal():
    # (4, ..., 99999999.99, 1e-3, '2000-02-29', '12:00:00', '2026-06-30 12:00:00.5',
    #  '2026-06-30 12:00:00.5+02', true, '{"nested": {"k": [1, 2, 3]}}', ...)
    event = envelope(3)
    assert event["op"] == "c" and event["before"] is None
    after = event["after"]
    assert after["balance"] == Decimal("99999999.99") and after["born"] == date(2000, 2, 29)
    assert after["updated_at"] == datetime(2026, 6, 30, 12, 0, 0, 500000, UTC)
    assert after["created_at"] == datetime(2026, 6, 30, 10, 0, 0, 500000, UTC)
    assert after["attrs"] == {"nested": {"k": [1, 2, 3]}}


def test_a_delete_event_before_image_and_the_envelope_fields():
    event = envelope(7)
    assert event["op"] == "d" and event["after"] is None
    assert event["before"]["id"] == 2 and event["before"]["born"] is None
    assert event["source"]["table"] == "customers" and isinstance(event["source"]["lsn"], int)
    assert event["source"]["snapshot"] == "false"  # an io.debezium.data.Enum stays its text


def test_without_schemas_the_values_stay_what_debezium_encoded():
    """schemas.enable=false drops the names: days, micros and JSON text are all there is."""
    after = JsonConverter(False).convert(CUSTOMERS_PLAIN[0]["value"].encode()).value["after"]
    assert (after["born"], after["updated_at"], after["balance"]) == (7364, 1767323045123456, "AeI6")
    assert after["attrs"] == '{"tags": ["a", "b"], "tier": "gold"}'


def test_a_base_value_that_does_not_fit_its_type_names_the_field():
    with pytest.raises(ConverterError, match=r"payload\.born does not match its io\.debezium\.time\.Date"):
        connect_json_value({"type": "struct", "fields": [
            {"type": "string", "optional": True, "name": "io.debezium.time.Date", "field": "born"}]},
            {"born": "1990-03-01"})
    with pytest.raises(ConverterError, match="io.debezium.data.Json schema: is not JSON text"):
        connect_json_value({"type": "string", "name": "io.debezium.data.Json"}, "{oops")


@pytest.mark.parametrize("name, kind, base, expected", [
    ("io.debezium.time.Timestamp", "int64", 1767323045123, datetime(2026, 1, 2, 3, 4, 5, 123000, UTC)),
    ("io.debezium.time.NanoTimestamp", "int64", 1767323045123456789,
     datetime(2026, 1, 2, 3, 4, 5, 123456, UTC)),
    ("io.debezium.time.Time", "int32", 27000123, time(7, 30, 0, 123000)),
    ("io.debezium.time.NanoTime", "int64", 27000123456789, time(7, 30, 0, 123456)),
    ("io.debezium.time.MicroTime", "int64", 86400000000, "24:00:00"),
    ("io.debezium.time.ZonedTimestamp", "string", "2026-01-02T03:04:05.123456789+02:00",
     datetime(2026, 1, 2, 1, 4, 5, 123456, UTC)),
    ("io.debezium.time.Year", "int32", 2026, 2026),
    ("io.debezium.time.ZonedTime", "string", "07:30:00Z", "07:30:00Z"),
])
def test_the_other_time_types_of_debezium(name, kind, base, expected):
    """Types other connectors and time.precision.mode settings give (the recording uses
    the PostgreSQL defaults: Date, MicroTime, MicroTimestamp, ZonedTimestamp)."""
    assert connect_json_value({"type": kind, "name": name}, base) == expected


def test_variable_scale_decimal_struct_is_a_decimal():
    """numeric without a precision: Debezium's {scale, value} struct (value: the unscaled
    big-endian two's complement, as Connect's Decimal)."""
    schema = {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "optional": True,
              "fields": [{"type": "int32", "optional": False, "field": "scale"},
                         {"type": "bytes", "optional": False, "field": "value"}]}
    unscaled = (-123456789).to_bytes(4, "big", signed=True)
    assert connect_json_value(schema, {"scale": 4, "value": base64.b64encode(unscaled).decode()}) \
        == Decimal("-12345.6789")
    assert connect_json_value(schema, None) is None


# --- Avro (recorded through Apicurio's AvroConverter: connect.name on each field) -------


class RecordedRegistry:
    """The registry's answers as recorded beside the records (postgres_avro_registry.json)."""

    def __init__(self):
        self.answers = json.loads((FIXTURES / "postgres_avro_registry.json").read_text())
        self.parsed: dict = {}

    def by_id(self, schema_id: int) -> dict:
        return self.answers[str(schema_id)]

    def by_subject(self, subject, version):
        raise AssertionError("the recorded schemas have no references")


AVRO = recorded("postgres_avro.json")


def avro_converter() -> AvroConverter:
    return AvroConverter(RecordedRegistry())


def test_avro_change_events_read_as_the_json_ones():
    """Debezium's Avro output and its JSON output of the same changes give the same
    values: Debezium's types read the same way from connect.name as from the envelope."""
    converter = avro_converter()
    compared = 0
    for offset, record in AVRO.items():
        if record["value"] is None:
            assert CUSTOMERS[offset]["value"] is None
            continue
        value = converter.convert(base64.b64decode(record["value"])).value
        json_value = envelope(offset)
        for image in ("before", "after"):
            assert value[image] == json_value[image], (offset, image)
        assert value["op"] == json_value["op"]
        compared += 1
    assert compared == 18


CUSTOMER_COLUMNS = {
    "id": "decimal(38,0)", "account": "decimal(38,0)", "name": "string", "nickname": "string",
    "balance": "string", "rating": "double", "born": "date", "wakes_at": "string",
    "updated_at": "timestamp_ntz", "created_at": "timestamp", "active": "boolean",
    "attrs": "variant", "ref": "string", "photo": "string"}


def test_avro_schema_declares_the_columns_of_the_after_image():
    converted = avro_converter().convert(base64.b64decode(AVRO[0]["value"]))
    kind, after = converted.field_types["after"]
    assert kind == "variant" and {name: t for name, (t, _) in after.items()} == CUSTOMER_COLUMNS
    # the same columns as the JsonConverter envelope's schema declares
    json_types = JsonConverter(True).convert(CUSTOMERS[0]["value"].encode()).field_types
    assert {name: t for name, (t, _) in json_types["after"][1].items()} == CUSTOMER_COLUMNS
    later = avro_converter().convert(base64.b64decode(AVRO[15]["value"]))  # after ALTER TABLE
    assert later.schema_id == 5 and later.field_types["after"][1]["email"] == ("string", None)


def test_avro_change_event_through_the_smt_declares_the_after_columns():
    from floeline.records.record import Record
    from floeline.records.transforms.chain import transform_chain

    converted = avro_converter().convert(base64.b64decode(AVRO[3]["value"]))
    record = Record("pg_avro.public.customers", 0, 3, None, -1, value=converted.value,
                    field_types=converted.field_types)
    chain = transform_chain({"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState",
                             "transforms.u.add.fields": "op"})
    out = chain.apply(record)
    assert out.value["born"] == date(2000, 2, 29) and out.value["__op"] == "c"
    assert {name: kind for name, (kind, _) in out.field_types.items()} == {**CUSTOMER_COLUMNS, "__op": "string"}


def test_avro_variable_scale_decimal_and_json_fields():
    """numeric without precision and jsonb as Kafka Connect's AvroConverter writes
    Debezium's schemas: a record named io.debezium.data.VariableScaleDecimal, a string
    with connect.name io.debezium.data.Json."""
    vsd = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
           "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
           "connect.version": 1, "connect.name": "io.debezium.data.VariableScaleDecimal"}
    row = fastavro.parse_schema({"type": "record", "name": "Value", "namespace": "pg.public.t", "fields": [
        {"name": "amount", "type": ["null", vsd], "default": None},
        {"name": "doc", "type": ["null", {"type": "string", "connect.version": 1,
                                          "connect.name": "io.debezium.data.Json"}], "default": None}]})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, row, {"amount": {"scale": 3, "value": (-1234567).to_bytes(3, "big", signed=True)},
                                          "doc": '{"a": [1, null]}'})
    converted = ConfigSchemaAvroConverter(row).convert(out.getvalue())
    assert converted.value == {"amount": Decimal("-1234.567"), "doc": {"a": [1, None]}}
    assert column_types(row) == {"amount": "string", "doc": "variant"}
    assert converted.field_types == {"amount": ("string", None), "doc": ("variant", None)}


def test_avro_value_that_does_not_fit_its_debezium_type_is_a_record_error():
    schema = fastavro.parse_schema({"type": "record", "name": "V", "fields": [
        {"name": "born", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}}]})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {"born": 2 ** 62})  # beyond year 9999
    with pytest.raises(ConverterError, match="Debezium-typed field of the configured avro.schema: "
                                             r"\d+ microseconds since the epoch is beyond the years 1-9999"):
        ConfigSchemaAvroConverter(schema).convert(out.getvalue())
