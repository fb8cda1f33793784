"""Debezium's ExtractNewRecordState in floeline's transform chain
(records/transforms/debezium.py), run on recorded Debezium PostgreSQL output
(tests/fixtures/debezium) through the decode stage as a connector runs it: the key and
value converters, then the chain, then the JSON text that lands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from floeline.config.decoding import decode_spec
from floeline.errors import ConfigError
from floeline.records.decode import DECODE_COLUMNS, RecordDecoder
from floeline.records.transforms.chain import transform_chain

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
JSON = "org.apache.kafka.connect.json.JsonConverter"
SMT = "io.debezium.transforms.ExtractNewRecordState"


def recorded(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())


SCHEMAS = recorded("postgres_json_schemas.json")
PLAIN = recorded("postgres_json_plain.json")


def settings(schemas: bool = True, **options) -> dict:
    """JsonConverter for key and value, and the SMT as `unwrap` with `options` (names
    with _ for dots)."""
    out = {"key.converter": JSON, "value.converter": JSON,
           "key.converter.schemas.enable": str(schemas).lower(),
           "value.converter.schemas.enable": str(schemas).lower(),
           "transforms": "unwrap", "transforms.unwrap.type": SMT}
    out.update({f"transforms.unwrap.{k.replace('_', '.')}": v for k, v in options.items()})
    return out


def run(records: list[dict], config: dict, table: str = "customers") -> dict[int, dict]:
    """offset -> what the decode stage made of each recorded record of one table:
    topic, key and value (parsed JSON, None: a tombstone), headers, dropped."""
    decoder = RecordDecoder(decode_spec(config))
    out = {}
    for r in records:
        if not r["topic"].endswith("." + table):
            continue
        row = dict(zip((n for n, _ in DECODE_COLUMNS), decoder.decode(
            r["topic"], r["partition"], r["offset"], 1_800_000_000_000, 0,
            None if r["key"] is None else r["key"].encode(),
            None if r["value"] is None else r["value"].encode(), [])))
        assert row["_decode_error"] is None, row
        out[r["offset"]] = {
            "topic": row["_route_topic"], "dropped": row["_skip"],
            "key": None if row["_key_json"] is None else json.loads(row["_key_json"]),
            "value": None if row["_value_json"] is None else json.loads(row["_value_json"]),
            "headers": None if row["_headers_json"] is None else json.loads(row["_headers_json"]),
            "declared": None if row["_declared_types"] is None else json.loads(row["_declared_types"])}
    return out


def envelopes(records: list[dict], table: str = "customers") -> dict[int, dict | None]:
    return {r["offset"]: None if r["value"] is None else json.loads(r["value"])
            for r in records if r["topic"].endswith("." + table)}


ENVELOPES = {o: e and e["payload"] for o, e in envelopes(SCHEMAS).items()}
DELETES = [o for o, e in ENVELOPES.items() if e and e["op"] == "d"]
TOMBSTONES = [o for o, e in ENVELOPES.items() if e is None]
ROWS = [o for o, e in ENVELOPES.items() if e and e["op"] in "cru"]


def test_the_recording_has_every_kind_of_event():
    assert DELETES == [7, 10, 18] and TOMBSTONES == [8, 11, 19]
    assert {ENVELOPES[o]["op"] for o in ROWS} == {"r", "c", "u"}


def test_default_mode_tombstone_unwraps_rows_turns_deletes_into_tombstones_drops_tombstones():
    out = run(SCHEMAS, settings())
    for offset in ROWS:
        value = out[offset]["value"]
        after = ENVELOPES[offset]["after"]
        assert set(value) == set(after) and value["id"] == after["id"] and value["name"] == after["name"]
        assert out[offset]["key"] == {"id": after["id"]} and not out[offset]["dropped"]
    assert out[0]["value"]["born"] == "1990-03-01"  # Debezium's types, converted
    assert out[0]["value"]["updated_at"] == "2026-01-02T03:04:05.123456Z"
    assert out[0]["value"]["attrs"] == {"tags": ["a", "b"], "tier": "gold"}
    for offset in DELETES:  # the key with a null value: a delete for a sink
        assert out[offset]["value"] is None and not out[offset]["dropped"]
        assert out[offset]["key"] == {"id": ENVELOPES[offset]["before"]["id"]}
    for offset in TOMBSTONES:
        assert out[offset]["dropped"]


def test_delete_to_tombstone_is_the_default_for_values():
    assert run(SCHEMAS, settings(delete_tombstone_handling_mode="delete-to-tombstone")) == run(SCHEMAS, settings())


def test_drop_drops_deletes_and_tombstones():
    out = run(SCHEMAS, settings(delete_tombstone_handling_mode="drop"))
    assert [o for o, r in out.items() if r["dropped"]] == sorted(DELETES + TOMBSTONES)
    assert all(out[o]["value"]["id"] == ENVELOPES[o]["after"]["id"] for o in ROWS)


@pytest.mark.parametrize("mode, keeps_tombstones", [("rewrite", False), ("rewrite-with-tombstone", True)])
def test_rewrite_marks_rows_deleted_or_not(mode, keeps_tombstones):
    out = run(SCHEMAS, settings(delete_tombstone_handling_mode=mode))
    for offset in ROWS:
        assert out[offset]["value"]["__deleted"] == "false"
        assert list(out[offset]["value"])[-1] == "__deleted"
    for offset in DELETES:  # the before image (its key; defaults elsewhere) marked deleted
        value = out[offset]["value"]
        assert value["__deleted"] == "true" and value["id"] == ENVELOPES[offset]["before"]["id"]
        assert value["account"] == 0 and value["name"] == ""
    for offset in TOMBSTONES:
        assert out[offset]["dropped"] is not keeps_tombstones
        if keeps_tombstones:
            assert out[offset]["value"] is None and out[offset]["key"] is not None


def test_mode_names_are_read_in_any_case():
    assert run(SCHEMAS, settings(delete_tombstone_handling_mode="REWRITE"))[0]["value"]["__deleted"] == "false"


def test_add_fields_from_the_envelope_with_the_prefix():
    out = run(SCHEMAS, settings(add_fields="op,table,lsn,source.ts_ms,ts_ms,transaction.id,db:database",
                                delete_tombstone_handling_mode="rewrite"))
    for offset in ROWS + DELETES:
        env, value = ENVELOPES[offset], out[offset]["value"]
        assert value["__op"] == env["op"] and value["__table"] == "customers"
        assert value["__lsn"] == env["source"]["lsn"] and value["__source_ts_ms"] == env["source"]["ts_ms"]
        assert value["__ts_ms"] == env["ts_ms"] and value["__database"] == "postgres"
        assert value["__transaction_id"] is None  # no transaction metadata: a null struct
        assert list(value)[-8:] == ["__deleted", "__op", "__table", "__lsn", "__source_ts_ms", "__ts_ms",
                                    "__transaction_id", "__database"]
    assert out[7]["value"]["__op"] == "d" and out[0]["value"]["__op"] == "r"


def test_add_fields_prefix_and_new_names():
    out = run(SCHEMAS, settings(add_fields="op:OPERATION,source.ts_ms", add_fields_prefix="cdc_"))
    assert out[3]["value"]["cdc_OPERATION"] == "c"
    assert out[3]["value"]["cdc_source_ts_ms"] == ENVELOPES[3]["source"]["ts_ms"]
    assert out[7]["value"] is None  # a delete made a tombstone gets no fields


def test_add_fields_missing_from_the_envelope_are_left_out():
    out = run(SCHEMAS, settings(add_fields="op,nosuchfield,source.nosuch"))
    assert "__nosuchfield" not in out[0]["value"] and "__source_nosuch" not in out[0]["value"]
    assert out[0]["value"]["__op"] == "r"


def test_add_headers_and_the_delete_header_of_a_kept_tombstone():
    out = run(SCHEMAS, settings(add_headers="op,source.ts_ms,db", add_headers_prefix="dbz.",
                                delete_tombstone_handling_mode="rewrite-with-tombstone"))
    assert out[0]["headers"] == {"dbz.op": "r", "dbz.source_ts_ms": str(ENVELOPES[0]["source"]["ts_ms"]),
                                 "dbz.db": "postgres"}
    assert out[7]["headers"]["dbz.op"] == "d"
    assert out[8]["headers"] == {"dbz.op": "d"}  # a tombstone carries only op


def test_route_by_field_renames_the_topic():
    out = run(SCHEMAS, settings(route_by_field="name", delete_tombstone_handling_mode="rewrite"))
    assert out[0]["topic"] == "Ada" and out[5]["topic"] == "Ada L."
    assert out[7]["topic"] == "pg_schemas.public.customers"  # before.name is "": the topic is kept


def test_plain_json_envelopes_unwrap_the_same_without_types():
    plain = run(PLAIN, settings(schemas=False, add_fields="op,table"))
    typed = run(SCHEMAS, settings(add_fields="op,table"))
    assert [o for o, r in plain.items() if r["dropped"]] == TOMBSTONES
    for offset in ROWS:
        assert plain[offset]["value"]["__op"] == typed[offset]["value"]["__op"]
        assert plain[offset]["value"]["id"] == typed[offset]["value"]["id"]
    assert plain[0]["value"]["born"] == 7364  # no schema: Debezium's days since the epoch


def test_a_record_that_is_not_a_change_event_passes_unchanged():
    """What the SMT leaves is no change event: a second unwrap (records flattened before
    they reached floeline) passes its rows on as they are (and keeps its tombstones in
    rewrite-with-tombstone mode; any other mode drops them, as Debezium does)."""
    twice = dict(settings(add_fields="op"), transforms="unwrap,again",
                 **{"transforms.again.type": SMT, "transforms.again.add.fields": "op:SECOND",
                    "transforms.again.delete.tombstone.handling.mode": "rewrite-with-tombstone"})
    once = run(SCHEMAS, settings(add_fields="op"))
    assert run(SCHEMAS, twice) == once
    chain = transform_chain({"transforms": "u", "transforms.u.type": "ExtractNewRecordState"})
    from floeline.records.record import Record
    key = json.loads(SCHEMAS[0]["key"])["payload"]
    record = Record("t", 0, 0, None, -1, key=key, value=key)
    assert chain.apply(record) is record


# --- against Debezium's own ExtractNewRecordState ------------------------------------------


def debeziums_own(name: str) -> dict[str, list[dict]]:
    """table -> Debezium's SMT output of the same history (recorded at the source, with
    its Connect schema), in order: key, value (JsonConverter read), declared columns."""
    from floeline.records.connect_columns import connect_field_types, top_level
    from floeline.records.converters.connect_json import JsonConverter

    out: dict[str, list[dict]] = {}
    for r in recorded(name):
        doc = None if r["value"] is None else json.loads(r["value"])
        converted = JsonConverter(True).convert(None if r["value"] is None else r["value"].encode())
        out.setdefault(r["topic"].rsplit(".", 1)[-1], []).append({
            "key": json.loads(r["key"])["payload"],
            "value": None if doc is None else json.loads(_text(converted.value)),
            "declared": None if converted.value is None else top_level(connect_field_types(doc["schema"]))})
    return out


def _text(value) -> str:
    from floeline.records.json_text import to_json_text
    return to_json_text(value)


@pytest.mark.parametrize("fixture, options", [
    ("postgres_json_unwrapped.json", {}),
    ("postgres_json_unwrapped_rewrite.json",
     {"delete_tombstone_handling_mode": "rewrite", "add_fields": "op,table,lsn,source.ts_ms"}),
])
@pytest.mark.parametrize("table", ["customers", "order_lines"])
def test_the_same_records_as_debeziums_own_smt(fixture, options, table):
    """floeline's SMT on the raw events == Debezium's SMT run at the source on the same
    changes: the same records in the same order, keys, values (with Debezium's types read
    the same way) and the columns each one's schema declares."""
    ours = [{"key": r["key"]["payload"] if "payload" in r["key"] else r["key"], "value": r["value"],
             "declared": r["declared"]}
            for r in run(SCHEMAS, settings(**options), table).values() if not r["dropped"]]
    theirs = debeziums_own(fixture)[table]
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        if (reference["value"] or {}).get("__op") == "r":
            # each connector takes its own snapshot: where and when it read differ
            for record in (mine, reference):
                record["value"] = {k: v for k, v in record["value"].items()
                                   if k not in ("__lsn", "__source_ts_ms")}
        assert mine == reference
    if "add_fields" in options:  # streamed changes compared whole, their positions included
        assert sum(1 for r in theirs if (r["value"] or {}).get("__op") in ("c", "u", "d")) >= 3


# --- the columns the schema declares, through the SMT -----------------------------------

CUSTOMER_COLUMNS = {
    "id": "decimal(38,0)", "account": "decimal(38,0)", "name": "string", "nickname": "string",
    "balance": "string", "rating": "double", "born": "date", "wakes_at": "string",
    "updated_at": "timestamp_ntz", "created_at": "timestamp", "active": "boolean",
    "attrs": "variant", "ref": "string", "photo": "string"}


def test_the_after_image_columns_are_declared_for_the_row():
    out = run(SCHEMAS, settings())
    assert out[0]["declared"] == CUSTOMER_COLUMNS
    assert out[15]["declared"] == {**CUSTOMER_COLUMNS, "email": "string"}  # after ALTER TABLE
    assert out[7]["declared"] is None  # a tombstone declares nothing


def test_rewrite_and_added_fields_are_declared_too():
    out = run(SCHEMAS, settings(delete_tombstone_handling_mode="rewrite",
                                add_fields="op,source.ts_ms,lsn,transaction.id,ts_ms"))
    added = {"__deleted": "string", "__op": "string", "__source_ts_ms": "decimal(38,0)",
             "__lsn": "decimal(38,0)", "__transaction_id": "string", "__ts_ms": "decimal(38,0)"}
    assert out[0]["declared"] == {**CUSTOMER_COLUMNS, **added}
    assert out[7]["declared"] == {**CUSTOMER_COLUMNS, **added}  # the before image of a delete


def test_the_envelope_itself_declares_its_structs_without_the_smt():
    """The envelope's own fields, and its after image's as `after.<field>` (the columns
    an upsert writes, decode.declared_columns)."""
    config = settings()
    del config["transforms"], config["transforms.unwrap.type"]
    assert run(SCHEMAS, config)[0]["declared"] == {
        "before": "variant", "after": "variant", "source": "variant", "transaction": "variant",
        "op": "string", "ts_ms": "decimal(38,0)", "ts_us": "decimal(38,0)", "ts_ns": "decimal(38,0)",
        **{f"after.{name}": kind for name, kind in CUSTOMER_COLUMNS.items()}}


def test_a_transform_that_reshapes_the_row_drops_the_declarations_one_that_routes_keeps_them():
    reshaped = dict(settings(), transforms="unwrap,add", **{
        "transforms.add.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.add.static.field": "origin", "transforms.add.static.value": "pg"})
    assert run(SCHEMAS, reshaped)[0]["declared"] is None
    routed = dict(settings(), transforms="unwrap,route", **{
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": ".*\\.(.*)", "transforms.route.replacement": "$1"})
    out = run(SCHEMAS, routed)[0]
    assert out["topic"] == "customers" and out["declared"] == CUSTOMER_COLUMNS


def test_plain_json_declares_nothing():
    assert all(r["declared"] is None for r in run(PLAIN, settings(schemas=False)).values())


# --- configuration -----------------------------------------------------------------------


def problems(**options) -> str:
    with pytest.raises(ConfigError) as info:
        transform_chain({"transforms": "unwrap", "transforms.unwrap.type": SMT,
                         **{f"transforms.unwrap.{k.replace('_', '.')}": v for k, v in options.items()}})
    return str(info.value)


def test_unknown_setting_names_it_and_the_accepted_ones():
    text = problems(add_field="op")
    assert "unknown setting 'transforms.unwrap.add.field'" in text
    assert "did you mean 'transforms.unwrap.add.fields'?" in text
    for name in ("add.fields", "add.fields.prefix", "add.headers", "add.headers.prefix",
                 "delete.tombstone.handling.mode", "route.by.field", "replace.null.with.default"):
        assert name in text


def test_bad_mode_lists_the_modes():
    assert ("transforms.unwrap.delete.tombstone.handling.mode='keep' is not valid; accepted values: drop, "
            "tombstone, rewrite, rewrite-with-tombstone, delete-to-tombstone") in problems(
                delete_tombstone_handling_mode="keep")


@pytest.mark.parametrize("options, mode", [
    ({"delete_handling_mode": "rewrite", "drop_tombstones": "false"}, "rewrite-with-tombstone"),
    ({"delete_handling_mode": "rewrite"}, "rewrite"),
    ({"delete_handling_mode": "none"}, "tombstone"),
    ({"drop_tombstones": "false"}, "delete-to-tombstone"),  # 2.x's default: deletes dropped
])
def test_debezium_2_settings_are_refused_with_the_3_x_setting(options, mode):
    text = problems(**options)
    assert "1 problem)" in text and "removed in Debezium 3.0 (which ignores" in text
    assert f"set transforms.unwrap.delete.tombstone.handling.mode={mode} instead" in text
    assert "unknown setting" not in text


def test_drop_fields_settings_are_refused_with_the_reason():
    text = problems(drop_fields_header_name="dropped")
    assert "drop.fields.header.name='dropped' is not supported by floeline" in text


def test_add_fields_with_two_new_names_is_refused():
    assert "add.fields='op:a:b' is not valid: Unexpected field name: op:a:b" in problems(add_fields="op:a:b")


def test_short_class_name_and_describe():
    chain = transform_chain({"transforms": "unwrap", "transforms.unwrap.type": "ExtractNewRecordState"})
    assert chain.describe() == ["unwrap: ExtractNewRecordState"]


def test_unknown_class_message_names_the_debezium_transform_too():
    with pytest.raises(ConfigError, match=r"and io\.debezium\.transforms\.ExtractNewRecordState"):
        transform_chain({"transforms": "u", "transforms.u.type": "io.debezium.transforms.Nope"})
