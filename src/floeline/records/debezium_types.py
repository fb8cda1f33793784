"""Debezium's semantic types: Connect schemas named io.debezium.time.* / io.debezium.data.*
whose base value (an int of days, micros since the epoch, an ISO string, a {scale, value}
struct) stands for a date, a timestamp, a decimal, JSON... Each converter that sees the
schema name (JsonConverter's envelope: "name"; Avro: "connect.name") turns the base
value into record.py's Python value here, and declares the column it makes.

  name                                 base value              Python value       column
  io.debezium.time.Date                int32 days              date               DATE
  io.debezium.time.Time                int32 ms of the day     time               TIME (text)
  io.debezium.time.MicroTime           int64 us of the day     time               TIME (text)
  io.debezium.time.NanoTime            int64 ns of the day     time (us)          TIME (text)
  io.debezium.time.Timestamp           int64 ms, local time    datetime           TIMESTAMP_NTZ
  io.debezium.time.MicroTimestamp      int64 us, local time    datetime           TIMESTAMP_NTZ
  io.debezium.time.NanoTimestamp       int64 ns, local time    datetime (us)      TIMESTAMP_NTZ
  io.debezium.time.ZonedTimestamp      ISO text with offset    aware datetime     TIMESTAMP_TZ
  io.debezium.data.VariableScaleDecimal {scale, value bytes}   Decimal            VARCHAR
  io.debezium.data.Json                JSON text               the parsed value   VARIANT

Local times (Timestamp, MicroTimestamp, NanoTimestamp) are held as UTC datetimes, as
Kafka Connect's own Timestamp is: their wall-clock digits land unchanged in a
TIMESTAMP_NTZ column. ZonedTime, Year, MicroDuration, Interval, Uuid, Enum, EnumSet,
Xml, Bits and the geometry structs need nothing: their base value (text, a number, a
struct) is already the value. VariableScaleDecimal is VARCHAR as Connect's Decimal is
(what Snowflake's connector makes of a Decimal): its scale changes row by row, so no
NUMBER(p,s) holds it exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any, Callable

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MIDNIGHT = dt.datetime(1970, 1, 1)

DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
JSON = "io.debezium.data.Json"


class DebeziumValueError(ValueError):
    """A base value that is not what its Debezium type says (the converter names the field)."""


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DebeziumValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _time_of_day(micros: int) -> dt.time | str:
    """A time of day; 24:00:00 (PostgreSQL allows it, Python's time does not) as its text,
    which is how a TIME column holds it anyway."""
    if micros == 86_400_000_000:
        return "24:00:00"
    if not 0 <= micros < 86_400_000_000:
        raise DebeziumValueError(f"{micros} microseconds is not a time of day")
    return (MIDNIGHT + dt.timedelta(microseconds=micros)).time()


def _instant(micros: int) -> dt.datetime:
    try:
        return EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise DebeziumValueError(f"{micros} microseconds since the epoch is beyond the years "
                                 "1-9999 (PostgreSQL's infinity?)") from None


def _date(days: Any) -> dt.date:
    try:
        return (EPOCH + dt.timedelta(days=_integer(days))).date()
    except OverflowError:
        raise DebeziumValueError(f"{days} days since the epoch is beyond the years 1-9999") from None


def _zoned(text: Any) -> dt.datetime:
    if not isinstance(text, str):
        raise DebeziumValueError(f"expected ISO-8601 text, got {type(text).__name__}")
    head, dot, rest = text.partition(".")
    if dot:  # Debezium writes up to 9 fraction digits; Python reads up to 6
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)]}{rest[digits:]}"
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise DebeziumValueError(f"{text!r} is not an ISO-8601 timestamp with an offset") from None
    if value.tzinfo is None:
        raise DebeziumValueError(f"{text!r} has no offset")
    return value


def _variable_scale_decimal(value: Any) -> decimal.Decimal:
    """{"scale": int, "value": bytes} (the struct already read): the unscaled value is
    big-endian two's complement, as in Connect's Decimal."""
    if not isinstance(value, dict) or not isinstance(value.get("value"), (bytes, bytearray)):
        raise DebeziumValueError("expected a struct {scale, value} with the unscaled value as bytes")
    unscaled = int.from_bytes(value["value"], "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-_integer(value.get("scale")))


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        raise DebeziumValueError(f"expected JSON text, got {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DebeziumValueError(f"is not JSON text: {exc}") from None


# Debezium name -> (the Python value of its base value, the Spark column type it declares)
_TYPES: dict[str, tuple[Callable[[Any], Any], str]] = {
    DATE: (_date, "date"),
    TIME: (lambda v: _time_of_day(_integer(v) * 1000), "string"),
    MICRO_TIME: (lambda v: _time_of_day(_integer(v)), "string"),
    NANO_TIME: (lambda v: _time_of_day(_integer(v) // 1000), "string"),
    TIMESTAMP: (lambda v: _instant(_integer(v) * 1000), "timestamp_ntz"),
    MICRO_TIMESTAMP: (lambda v: _instant(_integer(v)), "timestamp_ntz"),
    NANO_TIMESTAMP: (lambda v: _instant(_integer(v) // 1000), "timestamp_ntz"),
    ZONED_TIMESTAMP: (_zoned, "timestamp"),
    VARIABLE_SCALE_DECIMAL: (_variable_scale_decimal, "string"),
    JSON: (_json, "variant"),
}


def is_debezium_type(name: Any) -> bool:
    return name in _TYPES


def debezium_value(name: str, base_value: Any) -> Any:
    """The Python value of a non-null base value of Debezium type `name`; raises
    DebeziumValueError when the base value does not fit the type."""
    return _TYPES[name][0](base_value)


def debezium_column_type(name: Any) -> str | None:
    """The Spark column type a field of Debezium type `name` declares (None: not one
    that declares a column of its own)."""
    entry = _TYPES.get(name)
    return entry[1] if entry else None
