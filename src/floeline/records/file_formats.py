"""File formats of staged files (CREATE FILE FORMAT / FILE_FORMAT=(...)): how the
bytes of one file become records, each the JSON text of `$1` with its row number
(METADATA$FILE_ROW_NUMBER) and the line it starts on, or the error that made it
unreadable.

- JSON: a sequence of JSON values separated by whitespace or by nothing at all
  (newline-delimited JSON, and the concatenated objects Kinesis Firehose writes);
  STRIP_OUTER_ARRAY=TRUE makes the elements of an outer array the records.
- CSV: `$1` is a JSON array of the row's fields (strings, NULL_IF values as null), so
  `$1`, `$2`, ... of a COPY select are its elements (beyond the spec).
- PARQUET: `$1` is an object per row, `{"column": value}` (beyond the spec).

COMPRESSION=AUTO reads gzip by its magic bytes (whatever the file's name), NONE reads
the bytes as they are, GZIP insists. A file that cannot be read at all (a truncated
gzip, binary data: not UTF-8 and with NUL bytes, as gzip bytes under COMPRESSION=NONE
or UTF-16 text) raises FileFormatError: the whole file fails. A record holding bytes
that are not UTF-8 (a Latin-1 line in a UTF-8 file) is a row error with its line, as
Snowflake treats invalid UTF-8 under ON_ERROR; the file's other records load. Pure
Python, no Spark: the stage reader calls it inside the Python workers."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

from floeline.errors import FloelineError

TYPES = ("JSON", "CSV", "PARQUET")
COMPRESSIONS = ("AUTO", "GZIP", "NONE")
_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = " \t\n\r"


class FileFormatError(FloelineError):
    """A file that cannot be read as its format says (every record of it fails)."""


@dataclass(frozen=True)
class FileFormat:
    """A file format's options, named as in Snowflake (defaults as Snowflake's)."""

    type: str = "CSV"
    compression: str = "AUTO"
    strip_outer_array: bool = False  # JSON
    field_delimiter: str = ","  # CSV
    skip_header: int = 0  # CSV
    field_optionally_enclosed_by: str | None = None  # CSV: '"' or None
    null_if: tuple[str, ...] = ("\\N",)  # CSV
    empty_field_as_null: bool = True  # CSV
    trim_space: bool = False  # CSV

    def with_options(self, options: dict[str, object]) -> "FileFormat":
        """This format with Snowflake-named options (TYPE, COMPRESSION, ...) applied;
        unknown names and bad values raise FileFormatError naming them."""
        changes: dict[str, object] = {}
        for name, value in options.items():
            key = name.lower()
            if key == "format_name":
                continue
            if key not in _OPTION_TYPES:
                raise FileFormatError(
                    f"file format option {name} is not supported (supported: "
                    f"{', '.join(sorted(k.upper() for k in _OPTION_TYPES))})")
            changes[key] = _convert(name, value, _OPTION_TYPES[key])
        new = replace(self, **changes)
        if new.type not in TYPES:
            raise FileFormatError(f"file format TYPE={new.type} is not supported (JSON, CSV, PARQUET)")
        if new.compression not in COMPRESSIONS:
            raise FileFormatError(f"COMPRESSION={new.compression} is not supported (AUTO, GZIP, NONE)")
        if len(new.field_delimiter) != 1:
            raise FileFormatError("FIELD_DELIMITER must be one character")
        return new

    def options(self) -> dict[str, object]:
        """The options that apply to this type, Snowflake-named (for DESCRIBE)."""
        shown = {"TYPE": self.type, "COMPRESSION": self.compression}
        names = {"JSON": ("strip_outer_array",), "PARQUET": (),
                 "CSV": ("field_delimiter", "skip_header", "field_optionally_enclosed_by",
                         "null_if", "empty_field_as_null", "trim_space")}[self.type]
        for name in names:
            shown[name.upper()] = getattr(self, name)
        return shown


_OPTION_TYPES = {
    "type": "upper", "compression": "upper", "strip_outer_array": "bool",
    "field_delimiter": "char", "skip_header": "int", "field_optionally_enclosed_by": "quote",
    "null_if": "strings", "empty_field_as_null": "bool", "trim_space": "bool",
}


def _convert(name: str, value, kind: str):
    if kind == "upper":
        return str(value).upper()
    if kind == "bool":
        text = str(value).upper()
        if text not in ("TRUE", "FALSE"):
            raise FileFormatError(f"{name} must be TRUE or FALSE, not {value!r}")
        return text == "TRUE"
    if kind == "int":
        try:
            return int(str(value))
        except ValueError:
            raise FileFormatError(f"{name} must be a number, not {value!r}") from None
    if kind == "char":
        text = str(value)
        return {"\\t": "\t", "\\\\t": "\t"}.get(text, text)
    if kind == "quote":
        text = str(value)
        return None if text.upper() == "NONE" or text == "" else text
    if kind == "strings":
        return tuple(str(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    raise AssertionError(kind)


class FileRecord(NamedTuple):
    """One record of a file: `value` is the JSON text of `$1`, or None with `error`."""

    row: int  # METADATA$FILE_ROW_NUMBER, from 1
    line: int  # the line the record starts on, from 1
    value: str | None
    error: str | None = None


def decompress(data: bytes, name: str, compression: str) -> bytes:
    """The file's bytes after COMPRESSION (AUTO: gzip when it starts like gzip)."""
    gzipped = data[:2] == _GZIP_MAGIC
    if compression == "GZIP" or (compression == "AUTO" and gzipped):
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise FileFormatError(f"{name} is not a complete gzip file ({exc})") from None
    return data


def read_records(data: bytes, name: str, fmt: FileFormat) -> Iterator[FileRecord]:
    """The records of one file (see the module docstring)."""
    return records_of(decompress(data, name, fmt.compression), name, fmt)


class RecordColumns(NamedTuple):
    """The records of one file as Arrow arrays, column by column (FileRecord's fields)."""

    row: object  # pa.Array of int64
    line: object  # int64
    value: object  # string
    error: object  # string


def record_columns(data: bytes, name: str, fmt: FileFormat) -> RecordColumns:
    """read_records(data) as Arrow arrays. A file of newline-delimited JSON objects (the
    common case) is split with Arrow's string kernels, about 10x faster than record by
    record; any other file goes through read_records."""
    import pyarrow as pa

    data = decompress(data, name, fmt.compression)
    lines = _object_lines(data) if fmt.type == "JSON" and not fmt.strip_outer_array else None
    if lines is not None:
        import numpy

        numbers, values = lines
        return RecordColumns(pa.array(numpy.arange(1, len(values) + 1, dtype=numpy.int64)), numbers, values,
                             pa.nulls(len(values), pa.string()))
    records = list(records_of(data, name, fmt))
    rows, line_numbers, values, errors = zip(*records) if records else ((), (), (), ())
    return RecordColumns(pa.array(rows, pa.int64()), pa.array(line_numbers, pa.int64()),
                         pa.array(values, pa.string()), pa.array(errors, pa.string()))


def _object_lines(data: bytes):
    """(line numbers, values) when every line of the UTF-8 text that is not blank is, by
    its first and last characters, one JSON object and no bracket is followed by a
    second value or garbage ("}{", "} {", "}xx{"); else None. Such a line is one record (Spark's parse_json checks
    it: one that is not valid JSON is a row error with its line). Lines starting with
    "{" and ending with "}" cannot be parts of one multi-line value: inside a value "}"
    is never followed by "{"."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = pa.array([data], pa.large_binary()).cast(pa.large_string())
    except pa.ArrowInvalid:  # not UTF-8: read_records says which records are bad
        return None
    lines = pc.utf8_trim(pc.list_flatten(pc.split_pattern(text, "\n")), _WHITESPACE)
    numbers = pc.indices_nonzero(pc.greater(pc.binary_length(lines), 0))
    values = lines.take(numbers)
    if len(values) and not (pc.all(pc.starts_with(values, "{")).as_py()
                            and pc.all(pc.ends_with(values, "}")).as_py()
                            and not pc.any(pc.match_substring_regex(values, _AFTER_A_VALUE.pattern)).as_py()):
        return None
    return pc.add(numbers.cast(pa.int64()), 1), values.cast(pa.string())


def records_of(data: bytes, name: str, fmt: FileFormat) -> Iterator[FileRecord]:
    """The records of a file's decompressed bytes."""
    if fmt.type == "PARQUET":
        yield from _parquet_records(data, name)
        return
    invalid = False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if b"\0" in data:  # binary data, not text with a few bad bytes
            raise FileFormatError(f"{name} is not UTF-8 text (byte {exc.start}): check the file's "
                                  f"encoding and COMPRESSION") from None
        # Each bad byte becomes one lone surrogate (U+DC80..U+DCFF); the records holding
        # one are row errors (_utf8_checked), the others load.
        text, invalid = data.decode("utf-8", "surrogateescape"), True
    if text.startswith("\ufeff"):
        text = text[1:]
    if fmt.type == "CSV":
        records = _csv_records(text, fmt)
    elif fmt.strip_outer_array:
        records = _outer_array_records(text, name)
    else:
        records = _json_records(text)
    yield from _utf8_checked(records) if invalid else records


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _utf8_checked(records: Iterator[FileRecord]) -> Iterator[FileRecord]:
    """The records of a text decoded with surrogateescape: one holding an escaped byte
    is a row error naming the byte."""
    for record in records:
        bad = _ESCAPED_BYTE.search(record.value) if record.value is not None else None
        if bad is None:
            yield record
        else:
            yield FileRecord(record.row, record.line, None,
                             f"invalid UTF-8: byte 0x{ord(bad.group()) - 0xDC00:02X} is not part of "
                             f"a UTF-8 character (the file's text must be UTF-8)")


_DECODER = json.JSONDecoder()


# A closing bracket followed by anything but blanks, ",", "}" or "]": outside a string
# that is a second value on the line ("}{", "} {", "][": Firehose's concatenated
# records) or garbage after a value ("}xx{"). Spark's parse_json reads the first value
# of a text and ignores what follows, so such a line must be split value by value (a
# string holding "}x" only sends its line down that slower, exact road).
_AFTER_A_VALUE = re.compile(r"[}\]]\s*[^\s,}\]]")


def _one_object_line(line: str) -> bool:
    """True when a line is, by its brackets, one whole JSON object: the common case of
    newline-delimited JSON, passed on without decoding (Spark's parse_json checks it, and
    a line it cannot parse is a row error with this line's number). Anything else is
    decoded value by value, so concatenated and multi-line values split exactly."""
    if line[0] != "{" or line[-1] != "}" or line.count("{") != line.count("}") or \
            line.count("[") != line.count("]"):
        return False
    return _AFTER_A_VALUE.search(line) is None


def _json_records(text: str) -> Iterator[FileRecord]:
    lines = text.split("\n")
    n, row, index, offset = len(text), 0, 0, 0  # `offset`: where line `index` starts
    while index < len(lines):
        raw = lines[index]
        stripped = raw.strip(_WHITESPACE)
        if not stripped or _one_object_line(stripped):
            if stripped:
                row += 1
                yield FileRecord(row, index + 1, stripped)
            offset += len(raw) + 1
            index += 1
            continue
        # Decode values from this line on, until one ends its line (or the text ends).
        i = offset + len(raw) - len(raw.lstrip(_WHITESPACE))
        while True:
            row += 1
            line = index + 1 + text.count("\n", offset, i)
            try:
                _, end = _DECODER.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                # Resume at the next line: one bad line is one bad record.
                yield FileRecord(row, line, None, f"invalid JSON at line {exc.lineno}, column "
                                                  f"{exc.colno}: {exc.msg}")
                i = text.find("\n", max(i, exc.pos))
                i = n if i < 0 else i
                break
            yield FileRecord(row, line, text[i:end])
            i = end
            while i < n and text[i] in " \t\r":
                i += 1
            if i >= n or text[i] == "\n":
                break
        index += text.count("\n", offset, i) + 1  # `i` is at a line's end
        offset = i + 1


def _outer_array_records(text: str, name: str) -> Iterator[FileRecord]:
    stripped = text.strip(_WHITESPACE)
    if not stripped:
        return
    try:
        document = json.loads(stripped)
    except json.JSONDecodeError as exc:
        yield FileRecord(1, exc.lineno, None, f"invalid JSON at line {exc.lineno}, column "
                                              f"{exc.colno}: {exc.msg}")
        return
    if not isinstance(document, list):
        raise FileFormatError(f"{name}: STRIP_OUTER_ARRAY=TRUE but the file is not a JSON array")
    for row, element in enumerate(document, 1):
        yield FileRecord(row, 1, json.dumps(element, ensure_ascii=False, separators=(",", ":")))


def _csv_records(text: str, fmt: FileFormat) -> Iterator[FileRecord]:
    quote = fmt.field_optionally_enclosed_by
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=fmt.field_delimiter,
                        quotechar=quote or '"', quoting=csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE,
                        strict=True)
    row = 0
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            row += 1
            yield FileRecord(row, start, None, f"invalid CSV at line {reader.line_num}: {exc}")
            continue
        if start <= fmt.skip_header or not fields:  # a header line, an empty line
            continue
        row += 1
        values = []
        for value in fields:
            if fmt.trim_space:
                value = value.strip()
            if value in fmt.null_if or (fmt.empty_field_as_null and value == ""):
                values.append(None)
            else:
                values.append(value)
        yield FileRecord(row, start, json.dumps(values, ensure_ascii=False))


def _parquet_records(data: bytes, name: str) -> Iterator[FileRecord]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise FileFormatError(f"{name} is not a readable Parquet file ({exc})") from None
    row = 0
    for batch in table.to_batches():
        for record in batch.to_pylist():
            row += 1
            yield FileRecord(row, row, json.dumps(record, ensure_ascii=False, default=str,
                                                  separators=(",", ":")))

