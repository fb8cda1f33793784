"""A decoded value -> JSON text, by the spec's conversion rules."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import uuid
from typing import Any

from floeline.records.record import Float32, shortest_float32


_MAX_PRECISION = 38
_ENCODE_STRING = json.encoder.encode_basestring  # type: ignore[attr-defined]


def to_json_text(value: Any) -> str:
    """The spec's conversion rules, as compact JSON text: numbers and booleans as they
    are; a Decimal with precision > 38 as a string; bytes as base64 strings; arrays stay
    arrays and structs/maps nested objects; maps with non-string keys as
    [[key, value], ...]; date/time/datetime as ISO-8601 (UTC, `Z`); float NaN and
    infinities as "NaN", "Inf", "-Inf" (JSON has no literals for them)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_ENCODE_STRING(value))
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float_text(value))
    elif isinstance(value, decimal.Decimal):
        out.append(_decimal_text(value))
    elif isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            out.append("{")
            for i, (k, v) in enumerate(value.items()):
                out.append("," if i else "")
                out.append(_ENCODE_STRING(k))
                out.append(":")
                _write(v, out)
            out.append("}")
        else:
            _write([[k, v] for k, v in value.items()], out)
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            out.append("," if i else "")
            _write(v, out)
        out.append("]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    elif isinstance(value, dt.datetime):
        out.append('"' + _datetime_text(value) + '"')
    elif isinstance(value, dt.date):
        out.append('"' + value.isoformat() + '"')
    elif isinstance(value, dt.time):
        out.append('"' + value.isoformat(timespec="milliseconds" if value.microsecond % 1000 == 0
                                         else "microseconds") + '"')
    elif isinstance(value, uuid.UUID):
        out.append('"' + str(value) + '"')
    else:
        raise TypeError(f"cannot convert a {type(value).__name__} to JSON")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Inf"' if value > 0 else '"-Inf"'
    if isinstance(value, Float32):  # the fewest digits, as Java's Float.toString
        return float.__repr__(shortest_float32(value))
    return float.__repr__(value)


def _decimal_text(value: decimal.Decimal) -> str:
    if not value.is_finite():
        return '"NaN"' if value.is_nan() else ('"-Inf"' if value.is_signed() else '"Inf"')
    sign, digits, exponent = value.as_tuple()
    # digits needed to write the number out in full (Snowflake NUMBER's precision)
    precision = len(digits) + max(exponent, 0)
    text = format(value, "f")
    return '"' + text + '"' if precision > _MAX_PRECISION else text


def _datetime_text(value: dt.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
    return value.isoformat(timespec=spec) + "Z"
