"""File formats: how one staged file's bytes become records (no Spark)."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from floeline.records.file_formats import FileFormat, FileFormatError, read_records, record_columns

JSON = FileFormat(type="JSON")


def records(data: bytes, fmt: FileFormat = JSON, name: str = "f.json"):
    return [(r.row, r.line, json.loads(r.value) if r.value is not None else None, r.error)
            for r in read_records(data, name, fmt)]


def test_newline_delimited_json():
    assert records(b'{"a":1}\n{"a":2}\n\n{"a":3}\n') == [
        (1, 1, {"a": 1}, None), (2, 2, {"a": 2}, None), (3, 4, {"a": 3}, None)]


def test_concatenated_objects_as_firehose_writes_them():
    got = records(b'{"a":1}{"a":2}{"b":[1,2]}')
    assert [v for _, _, v, _ in got] == [{"a": 1}, {"a": 2}, {"b": [1, 2]}]


def test_values_that_are_not_objects_are_records_too():
    assert [v for _, _, v, _ in records(b'42 "x" [1] null true')] == [42, "x", [1], None, True]


def test_a_bad_line_is_one_row_error_with_its_line_and_the_rest_loads():
    got = records(b'{"a":1}\n{"a": [1}\n{"a":3}\n')
    assert got[0] == (1, 1, {"a": 1}, None)
    assert got[1][:3] == (2, 2, None) and "invalid JSON at line 2" in got[1][3]
    assert got[2] == (3, 3, {"a": 3}, None)


def test_a_line_that_looks_like_one_object_is_passed_on_as_it_is():
    # Not decoded here: Spark's parse_json checks it (a row error with this line number).
    assert [(r.row, r.line, r.value) for r in read_records(b'{"a": oops}\n', "f", JSON)] == [
        (1, 1, '{"a": oops}')]


def test_values_over_several_lines():
    data = b'{\n  "a": {"b": 1}\n}\n{"c": [1,\n 2]}\n{"d": "x} {y"}\n'
    assert [(line, v) for _, line, v, _ in records(data)] == [
        (1, {"a": {"b": 1}}), (4, {"c": [1, 2]}), (6, {"d": "x} {y"})]


def test_strip_outer_array():
    fmt = JSON.with_options({"STRIP_OUTER_ARRAY": "TRUE"})
    assert [v for _, _, v, _ in records(b' [{"a":1}, 2, [3]] ', fmt)] == [{"a": 1}, 2, [3]]
    with pytest.raises(FileFormatError, match="not a JSON array"):
        records(b'{"a":1}', fmt)


def test_gzip_is_detected_by_its_bytes_and_a_truncated_one_fails_the_file():
    data = gzip.compress(b'{"a":1}\n{"a":2}\n')
    assert len(records(data, name="no-suffix")) == 2
    with pytest.raises(FileFormatError, match="not a complete gzip file"):
        records(data[:-8])
    with pytest.raises(FileFormatError, match="not a complete gzip file"):
        records(b'{"a":1}', JSON.with_options({"COMPRESSION": "GZIP"}))
    # NONE reads the bytes as they are: gzip bytes are not UTF-8 text.
    with pytest.raises(FileFormatError, match="not UTF-8"):
        records(data, JSON.with_options({"COMPRESSION": "NONE"}))


def test_empty_file_has_no_records():
    assert records(b"") == [] and records(b"\n \n") == []


def test_csv_rows_are_arrays_of_fields():
    fmt = FileFormat().with_options({"SKIP_HEADER": 1, "FIELD_OPTIONALLY_ENCLOSED_BY": '"',
                                     "NULL_IF": ["NULL", "\\N"]})
    data = b'id,name,note\n1,"a, b",NULL\n2,,"x\ny"\n'
    assert records(data, fmt) == [(1, 2, ["1", "a, b", None], None), (2, 3, ["2", None, "x\ny"], None)]


def test_csv_delimiter_and_trim():
    fmt = FileFormat().with_options({"FIELD_DELIMITER": "|", "TRIM_SPACE": True,
                                     "EMPTY_FIELD_AS_NULL": False})
    assert records(b" a | b ||\n", fmt) == [(1, 1, ["a", "b", "", ""], None)]


def test_parquet_rows_are_objects():
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", None]}), out)
    assert [v for _, _, v, _ in records(out.getvalue(), FileFormat(type="PARQUET"))] == [
        {"id": 1, "name": "a"}, {"id": 2, "name": None}]
    with pytest.raises(FileFormatError, match="not a readable Parquet file"):
        records(b"not parquet", FileFormat(type="PARQUET"))


def test_options_are_checked_by_name_and_value():
    with pytest.raises(FileFormatError, match="option DATE_FORMATX is not supported"):
        FileFormat().with_options({"DATE_FORMATX": "auto"})
    with pytest.raises(FileFormatError, match="TYPE=XML is not supported"):
        FileFormat().with_options({"TYPE": "xml"})
    with pytest.raises(FileFormatError, match="SKIP_HEADER must be a number"):
        FileFormat().with_options({"SKIP_HEADER": "one"})
    assert FileFormat().with_options({"type": "json"}).options() == {
        "TYPE": "JSON", "COMPRESSION": "AUTO", "STRIP_OUTER_ARRAY": False}


@pytest.mark.parametrize("data", [
    b'{"a":1}\n{"b":2}\n', b'\n\n{"a":1}\r\n  {"b":2}  \n\n', b'\xef\xbb\xbf{"a":"\xc3\xa9"}\n',
    b'', b'   \n', b'{bad}\n{"a":1}',  # newline-delimited objects: Arrow's split
    b'{"a":1}{"b":2}\n', b'{"a":1} {"b":2}', b'[1,2]\n42\n', b'{"a":\n1}\n', b'{"a":"}{"}\n',
    b'{"a":1}\n\xff\n', gzip.compress(b'{"a":1}\n{"b":[2]}\n'),  # the others: read_records
])
def test_record_columns_are_read_records_as_arrow_arrays(data):
    columns = record_columns(data, "f.json", JSON)
    assert list(zip(*(c.to_pylist() for c in columns))) == [tuple(r) for r in read_records(data, "f.json", JSON)]


def test_record_columns_split_lines_that_touch_as_separate_records():
    """Two bad lines that read_records decodes as one broken value ("}" then "{" is
    never inside a value) are two records by lines: each a row error of its own line."""
    columns = record_columns(b'{"a":{"b":1}\n{"c":2}}\n', "f.json", JSON)
    assert columns.line.to_pylist() == [1, 2] and columns.value.to_pylist() == ['{"a":{"b":1}', '{"c":2}}']


def test_garbage_between_two_objects_on_a_line_is_a_row_error_on_both_splitters():
    """Spark's parse_json reads the first value of a text and ignores the rest, so a
    line "{..}xx{..}" taken whole would load its first object and drop the second
    without an error. Both splitters decode such a line value by value instead."""
    data = b'{"n":8}xx{"n":9}\n{"n":10}\n'
    records = list(read_records(data, "f.json", JSON))
    assert [(r.line, r.value) for r in records] == [(1, '{"n":8}'), (1, None), (2, '{"n":10}')]
    assert records[1].error.startswith("invalid JSON at line 1, column 8")
    columns = record_columns(data, "f.json", JSON)
    assert columns.value.to_pylist() == ['{"n":8}', None, '{"n":10}']
    # A "}" followed by text inside a string is still one record (on the exact road).
    assert [r.value for r in read_records(b'{"s":"a}b"}\n', "f.json", JSON)] == ['{"s":"a}b"}']
