"""RECORD_METADATA.headers rules (header_rules.py) and SimpleHeaderConverter's parse
(simple_header_converter.py), without Spark. The expected values were checked against Kafka
Connect 4.1.2's SimpleHeaderConverter."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from floeline.errors import ConfigError
from floeline.records.converters.base import ConverterError
from floeline.config.decoding import (
    BYTES_CONVERTER, JSON_CONVERTER, SIMPLE_HEADER_CONVERTER, STRING_CONVERTER, header_spec)
from floeline.records.json_text import to_json_text
from floeline.records.simple_header_converter import parse_header_text
from floeline.records.header_rules import (
    HeaderRules, header_rules, headers_json, java_text)
from floeline.records.record import Float32

UTC = dt.timezone.utc


@pytest.mark.parametrize("text, value", [
    ("value1", "value1"), ("42", 42), (" true ", True), ("null", None), ("", ""), ("  ", "  "),
    ("1.50", Float32(1.5)), ("1.0", 1), ("007", 7), ("+5", 5), ("1e3", 1000),
    ("12345678901234567890", Decimal("12345678901234567890")),
    ("[1, 2.5]", [Float32(1.0), Float32(2.5)]), ("[1,\"a\",2]", [1, "a", 2]), ("[null]", [None]),
    ('{"a":1,"b":"x"}', {"a": 1, "b": "x"}), ('{"a":[1,2],"b":[3]}', {"a": [1, 2], "b": [3]}),
    ("{}", []), ("{1:2}", [[1, 2]]), ('{"k":1,"k":2}', {"k": 2}),
    ("2024-01-02", dt.date(2024, 1, 2)), ("10:11:12.123Z", dt.time(10, 11, 12, 123000)),
    ("2024-01-02T10:11:12.123Z", dt.datetime(2024, 1, 2, 10, 11, 12, 123000, tzinfo=UTC)),
    # what does not parse is the text as it was
    ("[1,null,2.5]", "[1,null,2.5]"), ('{"a":}', '{"a":}'), ("[", "["), ("x:y", "x:y"),
    ("a,b", "a,b"), ("-abc", "-abc"), ("1abc", "1abc"), ('"quoted"', '"quoted"'), ("{a:1}", "{a:1}"),
])
def test_simple_header_converter_values(text, value):
    got = parse_header_text(text)
    assert got == value and type(got) is type(value)
    if isinstance(value, list):
        assert [type(v) for v in got] == [type(v) for v in value]


def test_simple_header_converter_numbers_take_the_narrowest_type():
    assert isinstance(parse_header_text("3.14159265358979"), Float32)
    assert to_json_text(parse_header_text("3.14159265358979")) == "3.1415927"
    assert not isinstance(parse_header_text("3.4e39"), Float32)  # beyond float32: a double
    assert parse_header_text("[127,128]") == [127, 128]


SCENARIOS = [  # Snowflake's end-to-end header scenarios (structured), and our flattening
    (SIMPLE_HEADER_CONVERTER, [("h_string", b"value1"), ("h_number", b"42"), ("h_object", b"{}")],
     {"h_string": "value1", "h_number": 42, "h_object": []},
     {"h_string": "value1", "h_number": "42", "h_object": "[]"}),
    (JSON_CONVERTER, [("h_string", b'"hello"'), ("h_number", b"42"), ("h_bool", b"true"),
                      ("h_object", b'{"a":1,"b":"x"}'), ("h_array", b"[1,2,3]")],
     {"h_string": "hello", "h_number": 42, "h_bool": True, "h_object": {"a": 1, "b": "x"},
      "h_array": [1, 2, 3]},
     {"h_string": "hello", "h_number": "42", "h_bool": "true", "h_object": "{a=1, b=x}",
      "h_array": "[1, 2, 3]"}),
    (STRING_CONVERTER, [("h_string", b"hello"), ("h_json_text", b'{"a":1}')],
     {"h_string": "hello", "h_json_text": '{"a":1}'}, {"h_string": "hello", "h_json_text": '{"a":1}'}),
    (BYTES_CONVERTER, [("h_bytes", b"hello")], {"h_bytes": "aGVsbG8="}, {"h_bytes": "aGVsbG8="}),
]


@pytest.mark.parametrize("converter, headers, structured, flattened", SCENARIOS)
def test_headers_by_converter_structured_or_flattened(converter, headers, structured, flattened):
    settings = {"header.converter": converter, "header.converter.schemas.enable": "false"}
    on = header_rules(header_spec({**settings, "snowflake.feature.structured.headers": "true"}))
    off = header_rules(header_spec(settings))
    assert json.loads(headers_json(on, headers)[0]) == structured
    assert json.loads(headers_json(off, headers)[0]) == flattened


def test_headers_null_values_repeated_names_and_none():
    rules = header_rules(header_spec({}))
    assert headers_json(rules, []) == (None, None)
    assert json.loads(headers_json(rules, [("a", b"1"), ("n", None), ("a", b"2")])[0]) == \
        {"a": "2", "n": None}


def test_a_json_header_that_is_not_json_is_a_header_converter_error():
    rules = header_rules(header_spec({"header.converter": JSON_CONVERTER}))  # schemas.enable: true
    json_text, error = headers_json(rules, [("h", b"{}")])
    assert json_text is None and 'requires "schema" and "payload"' in error
    assert "header.converter.schemas.enable=false" in error and "(header 'h')" in error
    with pytest.raises(ConverterError) as err:
        header_rules(header_spec({"header.converter": JSON_CONVERTER,
                      "header.converter.schemas.enable": "false"})).convert("h", b"{oops")
    assert err.value.stage == "header converter"
    assert "header is not valid JSON at byte 1" in err.value.reason


def test_inserted_headers_are_parsed_whatever_the_converter():
    rules = header_rules(header_spec({"header.converter": BYTES_CONVERTER}))
    assert rules.convert("ins", "42") == 42 and rules.convert("raw", b"42") == b"42"


def test_java_text_prints_as_java_string_value_of():
    assert [java_text(v) for v in (1.0, 1e10, 1.5e-5, 0.001, Float32(0.1), -0.0, 1e7, 9999999.0)] == \
        ["1.0", "1.0E10", "1.5E-5", "0.001", "0.1", "-0.0", "1.0E7", "9999999.0"]
    assert java_text({"a": [1, {"b": None}], "c": True}) == "{a=[1, {b=null}], c=true}"
    assert java_text({1: "x"}) == "[[1, x]]"
    assert java_text(Decimal("1E+3")) == "1E+3" and java_text(float("nan")) == "NaN"


def test_header_settings_are_checked():
    assert header_rules(header_spec({})) == HeaderRules(SIMPLE_HEADER_CONVERTER, False)
    assert header_rules(header_spec({"header.converter": STRING_CONVERTER})).text_is_exact
    with pytest.raises(ConfigError, match="header.converter=com.example.X is not a header converter"):
        header_rules(header_spec({"header.converter": "com.example.X"}))
    with pytest.raises(ConfigError, match="snowflake.feature.structured.headers='yes' is not a boolean"):
        header_rules(header_spec({"snowflake.feature.structured.headers": "yes"}))
