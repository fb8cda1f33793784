"""RECORD_METADATA.headers as Snowflake's Kafka connector writes them.

Kafka Connect turns each header's bytes into a value with the worker's
`header.converter` before the connector sees the record:

  SimpleHeaderConverter (Connect's default)   infers a value from the text
                                              (simple_header_converter.py): `42` -> 42, `{}` -> []
  StringConverter                             the text as it is
  ByteArrayConverter                          the bytes (written as base64)
  JsonConverter                               the JSON value (`header.converter.schemas.enable`,
                                              default true: the {"schema", "payload"} envelope)

With `snowflake.feature.structured.headers=true` the connector (4.x) keeps the converted
value as it is, so numbers, booleans, objects and arrays land typed in the VARIANT (the
3.x connector's behaviour). By default (false) it writes each value as Java's
String.valueOf prints it: `42` stays "42", a JSON object {"a":1} becomes "{a=1}", an
array "[1, 2]". A header whose bytes the converter rejects (invalid JSON) makes the
record a bad record of the 'header converter' stage.

floeline writes headers in SQL as their UTF-8 text (the fast path) whenever that is what
these rules give (`plain_sql`); any other header is converted here, in Python."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from floeline.config.decoding import (
    BYTES_CONVERTER, SIMPLE_HEADER_CONVERTER, STRING_CONVERTER, HeaderSpec)
from floeline.records.converters.base import ConverterError
from floeline.records.converters.connect_json import JsonConverter
from floeline.records.converters.text_and_bytes import StringConverter
from floeline.records.json_text import to_json_text
from floeline.records.record import java_number_text
from floeline.records.simple_header_converter import parse_header_text

HEADER_STAGE = "header converter"

# Java regexes, as Spark SQL string literals. A header value SimpleHeaderConverter keeps
# as its text: no delimiter of its grammar, not a number, time or date (a digit, + or -
# first) and not a literal...
_SIMPLE_NOT_PLAIN = r"""'[:,{}\\[\\]"]|^[\\x00-\\x20]*([\\p{Nd}+-]|(true|false|null)[\\x00-\\x20]*$)'"""
# ... and, flattened to text, a boolean or an integer written as Java prints it.
_SIMPLE_PRINTED_AS_IS = r"""'^(true|false|0|-?[1-9][0-9]{0,17})$'"""


@dataclass(frozen=True)
class HeaderRules(HeaderSpec):
    """The header settings the config read (HeaderSpec), and what they mean: how each
    header's bytes convert, and how RECORD_METADATA.headers is written (SQL or Python)."""

    @property
    def text_is_exact(self) -> bool:
        """True when every header is written as its UTF-8 text (so SQL can write them)."""
        return self.converter == STRING_CONVERTER and self.encoding.upper() in ("UTF-8", "UTF8")

    def plain_sql(self, value: str) -> str:
        """SQL: TRUE when the header value `value` (binary) is written as its text."""
        if self.text_is_exact:
            return "true"
        if self.converter != SIMPLE_HEADER_CONVERTER:
            return f"{value} IS NULL"
        text = f"CAST({value} AS STRING)"
        plain = f"NOT {text} RLIKE {_SIMPLE_NOT_PLAIN}"
        if not self.structured:  # 42 and true are printed back as they were written
            plain = f"({plain} OR {text} RLIKE {_SIMPLE_PRINTED_AS_IS})"
        return f"({value} IS NULL OR (is_valid_utf8({text}) AND {plain}))"

    def headers_check_sql(self) -> str | None:
        """SQL: TRUE when a record has a header SQL cannot write (None: it writes all)."""
        if self.text_is_exact:
            return None
        return f"exists(headers, h -> NOT {self.plain_sql('h.value')})"

    def text_headers_json_sql(self) -> str:
        """SQL: the headers as a JSON object of their texts (for records whose headers
        are all plain), NULL without headers."""
        return ("CASE WHEN coalesce(size(headers), 0) > 0 THEN to_json(map_from_entries("
                "transform(headers, h -> struct(h.key, CAST(h.value AS STRING))))) END")

    def convert(self, name: str, data: Any) -> Any:
        """One header's value as the header converter gives it. `data` is its bytes, or
        a str for a header a transform (InsertHeader) added, which Connect parses as
        SimpleHeaderConverter does, whatever the converter."""
        if data is None:
            return None
        if isinstance(data, str):
            return parse_header_text(data)
        data = bytes(data)
        if self.converter == SIMPLE_HEADER_CONVERTER:
            return parse_header_text(data.decode("utf-8", errors="replace"))
        if self.converter == STRING_CONVERTER:
            return data.decode(StringConverter(self.encoding).encoding, errors="replace")
        if self.converter == BYTES_CONVERTER:
            return data
        try:
            return self._json.convert(data).value
        except ConverterError as exc:
            raise ConverterError(f"{exc.reason} (header {name!r})", HEADER_STAGE) from None

    @cached_property
    def _json(self) -> JsonConverter:
        converter = JsonConverter(self.json_schemas)
        converter.stage = HEADER_STAGE
        return converter

    def render(self, headers: list[tuple[str, Any]]) -> str | None:
        """RECORD_METADATA.headers as JSON text (None without headers) from converted
        headers; a name given twice keeps its last value, as the connector's map does."""
        if not headers:
            return None
        values = {name: value for name, value in headers}
        if not self.structured:
            values = {name: None if v is None else java_text(v) for name, v in values.items()}
        return to_json_text(values)


def header_rules(spec: HeaderSpec) -> HeaderRules:
    """The rules of the connector's header settings (checked when the config was read)."""
    return HeaderRules(spec.converter, spec.structured, spec.json_schemas, spec.encoding)


def headers_json(rules: HeaderRules, headers) -> tuple[str | None, str | None]:
    """(RECORD_METADATA.headers as JSON text, None) for a record's raw headers (name,
    bytes) pairs, or (None, why) when the header converter rejects one."""
    try:
        return rules.render([(name, rules.convert(name, value)) for name, value in headers or ()]), None
    except ConverterError as exc:
        return None, exc.reason


# ---- Java's String.valueOf ------------------------------------------------------------

def java_text(value: Any) -> str:
    """A converted header value as the 4.x connector flattens it (String.valueOf of the
    Java object): numbers as Java prints them, lists as [a, b], maps as {k=v}. Bytes are
    base64 (Java would print an object id such as [B@1b6d3586)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_float(value)
    if isinstance(value, decimal.Decimal):
        return str(value)  # BigDecimal.toString: the same scientific-notation rule
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(java_text(v) for v in value) + "]"
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return "{" + ", ".join(f"{k}={java_text(v)}" for k, v in value.items()) + "}"
        return java_text([[k, v] for k, v in value.items()])
    if isinstance(value, (dt.date, dt.time)):
        return to_json_text(value).strip('"')
    return str(value)


def _java_float(value: float) -> str:
    """Java's Double.toString / Float.toString; NaN and infinities as the connector's
    "NaN", "Inf", "-Inf"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return java_number_text(value)
