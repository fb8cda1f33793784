"""Where floeline follows Snowflake's Kafka connector in the details: empty values are
tombstones, RECORD_METADATA.key is the converted key, RECORD_METADATA.headers follow
`header.converter` and `snowflake.feature.structured.headers`. Records go to the real
broker, the connector runs until caught up, the tables are queried."""

from __future__ import annotations

import json

import pytest

from floeline.config.decoding import JSON_CONVERTER, SIMPLE_HEADER_CONVERTER
from floeline.dev import kafka as devkafka
from floeline.records.header_rules import HeaderRules, java_text
from floeline.records.json_text import to_json_text
from floeline.records.simple_header_converter import parse_header_text
from floeline.sources.kafka import produce
from floeline.sql.script import run_script
from floeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.integration


def meta(row) -> dict:
    return json.loads(row["RECORD_METADATA"].toJson())


def by_offset(rows) -> dict:
    return {meta(r)["offset"]: r for r in rows}


def test_default_converters_empty_values_and_simple_headers(kafka, topic_name, make_config,
                                                             run_connector, read_table):
    """The Spark SQL path (one pass once the table exists): an empty value is a tombstone
    kept as a metadata-only row (behavior.on.null.values=DEFAULT); headers by Kafka
    Connect's default SimpleHeaderConverter, flattened to text (the 4.x default)."""
    topic = topic_name("fid_sql")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [
        {"value": {"a": 1}, "key": "k1", "headers": [("h", b"value1")]},
        {"value": {"a": 2}, "headers": [("h", b"plain text"), ("n", b"42")]},
        {"value": {"a": 3}, "headers": [("h", b"x")]},
        {"value": {"a": 4}},
        # second batch: headers SimpleHeaderConverter parses take the general path
        {"value": {"a": 5}, "headers": [("num", b"1.50"), ("obj", b"{}"),
                                        ("json", b'{"x":1,"y":[1,2]}'), ("t", b"true")]},
        {"value": b""},  # empty: a tombstone
        {"value": b" \n", "key": "k7"},  # blank: a tombstone too
        {"value": {"a": 8}, "headers": [("h", b"last")]},
    ], partition=0)
    connector = run_connector(make_config(topics=topic, buffer__count__records=4))

    rows = by_offset(read_table(topic.upper()).collect())
    assert sorted(rows) == list(range(8)) and sum(r.skipped for r in connector.reports) == 0
    assert any("one pass" in r.phases for r in connector.reports)  # plain headers stayed fast
    assert [rows[o]["A"] for o in range(8)] == [1, 2, 3, 4, 5, None, None, 8]
    assert meta(rows[0])["key"] == "k1" and meta(rows[6])["key"] == "k7"
    assert meta(rows[0])["headers"] == {"h": "value1"}
    assert meta(rows[1])["headers"] == {"h": "plain text", "n": "42"}
    assert meta(rows[4])["headers"] == {"num": "1.5", "obj": "[]", "json": "{x=1, y=[1, 2]}",
                                        "t": "true"}
    assert "headers" not in meta(rows[3]) and "headers" not in meta(rows[5])


def test_json_key_structured_json_headers_and_ignored_tombstones(
        kafka, topic_name, make_config, run_connector, read_table, spark, warehouse):
    """The Python decode path: a JsonConverter key lands as its object, so
    record_metadata:key.number works; JsonConverter headers keep their types with
    structured headers; an empty value is skipped with behavior.on.null.values=IGNORE;
    a header that is not JSON is a bad record of the header converter stage. A second
    topic fills a table made with AUTOINCREMENT and DEFAULT columns."""
    topic, to_ids = topic_name("fid_py"), topic_name("fid_ids")
    devkafka.create_topic(kafka, topic)
    devkafka.create_topic(kafka, to_ids)
    wh = Warehouse(warehouse)
    run_script(spark, "CREATE TABLE IDS (id NUMBER AUTOINCREMENT START 100 INCREMENT 10, "
                      "name VARCHAR DEFAULT 'anon', n NUMBER, "
                      "at TIMESTAMP_LTZ DEFAULT CURRENT_TIMESTAMP(), record_metadata VARIANT)", wh)
    produce(kafka, to_ids, [{"value": {"n": 1, "name": "a"}}, {"value": {"n": 2}},
                            {"value": {"n": 3, "name": None}}], partition=0)
    produced = [
        {"key": b'{"number":"0"}', "value": {"v": 1},
         "headers": [("h_string", b'"hello"'), ("h_number", b"42"), ("h_bool", b"true"),
                     ("h_object", b'{"a":1,"b":"x"}'), ("h_array", b"[1,2,3]")]},
        {"key": b'"plain"', "value": b""},
        {"key": b"7", "value": {"v": 2}, "headers": [("h", b"{oops")]},
        {"value": {"v": 3}},
        {"key": b"", "value": {"v": 4}},  # an empty JSON key is no key
    ]
    produce(kafka, topic, produced, partition=0)
    connector = run_connector(make_config(**{
        "topics": f"{topic},{to_ids}", "snowflake.topic2table.map": f"{to_ids}:IDS",
        "errors.tolerance": "all", "behavior.on.null.values": "IGNORE",
        "key.converter": JSON_CONVERTER, "key.converter.schemas.enable": "false",
        "value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false",
        "header.converter": JSON_CONVERTER, "header.converter.schemas.enable": "false",
        "snowflake.feature.structured.headers": "true"}))

    rows = by_offset(read_table(topic.upper()).collect())
    errors = read_table(topic.upper() + "_ERRORS").collect()
    skipped = sum(r.skipped for r in connector.reports)
    assert sorted(rows) == [0, 3, 4] and skipped == 1 and len(produced) == len(rows) + len(errors) + skipped
    assert meta(rows[0])["key"] == {"number": "0"}
    assert meta(rows[0])["headers"] == {"h_string": "hello", "h_number": 42, "h_bool": True,
                                        "h_object": {"a": 1, "b": "x"}, "h_array": [1, 2, 3]}
    assert "key" not in meta(rows[3]) and "headers" not in meta(rows[3]) and "key" not in meta(rows[4])
    (error,) = errors
    assert int(error["RECORD_POSITION"]) == 2 and error["STAGE"] == "header converter"
    assert "header is not valid JSON" in error["ERROR"] and "'h'" in error["ERROR"]
    results = run_script(spark, f"SELECT record_metadata:key.number::string AS n FROM {topic} "
                                f"WHERE record_metadata:offset = 0", wh)
    assert [r["n"] for r in results[-1][1].collect()] == ["0"]

    # Delta fills what the records leave out: AUTOINCREMENT values, DEFAULTs
    ids = sorted(read_table("IDS").collect(), key=lambda r: r["N"])
    assert [(r["N"], r["NAME"]) for r in ids] == [(1, "a"), (2, "anon"), (3, None)]  # null stays
    assert len({r["ID"] for r in ids}) == 3 and all(r["ID"] >= 100 and r["ID"] % 10 == 0 for r in ids)
    assert all(r["AT"] is not None for r in ids)
    described = {r["name"]: r for r in run_script(spark, "DESCRIBE TABLE IDS", wh)[-1][1].collect()}
    assert described["NAME"]["default"] == "'anon'" and described["ID"]["type"] == "NUMBER(19,0)"


TEXTS = ["value1", "", "  ", "a b", "42", "-7", "0", "-0", "007", "1.5", "true", " true", "null",
         "x:y", "[1]", "{}", "2024-01-02", "-abc", "+1", "é", "12345678901234567890", "9" * 18]


@pytest.mark.parametrize("structured", [False, True])
def test_headers_sql_writes_as_text_only_what_the_rules_keep_as_text(spark, structured):
    """The SQL predicate that lets the fast path write a header as its text agrees with
    the Python rules: every header it calls plain is written exactly as its text."""
    rules = HeaderRules(SIMPLE_HEADER_CONVERTER, structured)
    df = spark.createDataFrame([(t.encode(),) for t in TEXTS], "value binary")
    plain = {bytes(r["value"]).decode(): r["plain"]
             for r in df.selectExpr("value", f"{rules.plain_sql('value')} AS plain").collect()}
    for text in TEXTS:
        value = parse_header_text(text)
        written = to_json_text(value) if structured else to_json_text(java_text(value))
        if plain[text]:
            assert written == to_json_text(text), text
    assert plain["value1"] and plain["a b"] and not plain["x:y"] and not plain["1.5"]
    assert plain["42"] is (not structured)  # flattened, 42 is printed back as "42"


def test_conversion_rules_on_records_from_the_broker(kafka, topic_name, make_config, run_connector,
                                                     read_table, spark, warehouse):
    """Snowflake's conversion rules (tests/pipeline/test_conversion_rules.py has the full
    matrix over the memory source) on records through the real broker and Spark's Kafka
    source: values that fit land converted, one that does not goes to the error table
    naming its column, none is cast silently."""
    topic = topic_name("conv")
    devkafka.create_topic(kafka, topic)
    run_script(spark, f"CREATE TABLE {topic.upper()} (RECORD_METADATA VARIANT, C VARCHAR(5), B BOOLEAN, "
                      f"BIN BINARY, T TIME, A ARRAY, TS TIMESTAMP_NTZ)", Warehouse(warehouse))
    produce(kafka, topic, [
        {"C": "abc", "B": "on", "BIN": "SGVsbG8=", "T": "13:45:30+05:00", "A": "42", "TS": 1705312800},
        {"C": 12, "B": "OFF", "BIN": "", "T": "00:00", "A": [1, 2], "TS": "2024-01-15T10:00:00Z"},
        {"C": "toolong", "B": True},  # VARCHAR(5) exceeded
        {"B": 42},  # not a boolean by Snowflake's rules
    ], partition=0)
    run_connector(make_config(topics=topic, errors__tolerance="all"))
    rows = {meta(r)["offset"]: r for r in read_table(topic.upper()).collect()}
    assert sorted(rows) == [0, 1]
    first, second = rows[0], rows[1]
    assert (first["C"], first["B"], bytes(first["BIN"]), first["T"], json.loads(first["A"].toJson())) == (
        "abc", True, b"Hello", "13:45:30", [42])
    assert str(first["TS"]) == "2024-01-15 10:00:00"
    assert (second["C"], second["B"], bytes(second["BIN"]), second["T"], json.loads(second["A"].toJson())) == (
        "12", False, b"", "00:00:00", [1, 2])
    errors = {r["RECORD_POSITION"]: r["ERROR"] for r in read_table(topic.upper() + "_ERRORS").collect()}
    assert sorted(errors) == ["2", "3"]
    assert "column C" in errors["2"] and "VARCHAR(5)" in errors["2"]
    assert "column B" in errors["3"]
