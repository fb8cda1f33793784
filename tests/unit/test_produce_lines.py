"""`floeline kafka produce` / `floeline kinesis produce`: JSON lines read into records,
keys and headers (no broker: the sending is in tests/integration/test_quick_starts.py)."""

from __future__ import annotations

import pytest

from floeline.dev.produce import Line, parse_headers, read_lines
from floeline.errors import FloelineError


def test_each_non_blank_line_is_one_record_sent_as_written():
    lines = ['{"order_id": 1, "customer_name": "John"}\n', "\n", "  [1, 2]  \n", '"text"']
    assert read_lines(lines, "orders.jsonl") == [
        Line('{"order_id": 1, "customer_name": "John"}', None), Line("[1, 2]", None),
        Line('"text"', None)]


def test_the_key_field_gives_each_record_its_key_as_text():
    lines = ['{"order_id": 7, "c": "a"}', '{"order_id": "x-1"}', '{"order_id": {"a": 1}}']
    assert [r.key for r in read_lines(lines, "f", key_field="order_id")] == ["7", "x-1", '{"a": 1}']


def test_a_line_that_is_not_json_names_the_file_line_and_form():
    with pytest.raises(FloelineError, match=r"orders.jsonl line 3 is not JSON .*each line must be one JSON value"):
        read_lines(['{"a": 1}', "", "{oops"], "orders.jsonl")


def test_a_line_without_the_key_field_names_the_option_and_the_fix():
    with pytest.raises(FloelineError, match=r"stdin line 2 has no field 'id' \(--key-field\).*leave --key-field out"):
        read_lines(['{"id": 1}', '{"other": 2}'], "stdin", key_field="id")
    with pytest.raises(FloelineError, match="line 1 has no field"):
        read_lines(["[1]"], "stdin", key_field="id")


def test_headers_are_name_value_pairs_in_order():
    assert parse_headers(["source=cli", "trace=a=b", "empty="]) == [
        ("source", "cli"), ("trace", "a=b"), ("empty", "")]
    assert parse_headers(None) == []
    with pytest.raises(FloelineError, match=r"--header 'nope' is not NAME=VALUE; write it as e.g. --header source=cli"):
        parse_headers(["nope"])
