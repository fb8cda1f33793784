"""One Kafka record as Python sees it between the converters and the table: the
shape Kafka Connect's converters produce and its transforms (SMTs) consume.

Values are schemaless Python objects: dict (struct or map), list, str, int, float,
bool, None, bytes, decimal.Decimal, datetime.date/datetime.datetime (UTC), and
Float32 for a 32-bit float (Connect FLOAT32) whose value is a double. The
spec's conversion rules turn them into JSON text only at the end (converters.py),
so transforms see the same types Kafka Connect's would."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass
class Record:
    topic: str  # the topic routing uses; RegexRouter may rename it
    partition: int
    offset: int
    timestamp_ms: int | None
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none
    key: Any = None
    value: Any = None
    # (name, value) in order; each value as the header converter gave it (simple_header_converter.py)
    headers: list[tuple[str, Any]] = field(default_factory=list)
    schema_id: int | None = None  # the value's schema registry id, when it had one
    # the columns the value's schema declares (connect_columns.FieldTypes): set by the
    # converter, kept by transforms that know what they do to it, else dropped (None)
    field_types: dict | None = None

    def with_(self, **changes) -> "Record":
        """A copy with some fields changed (transforms never mutate their input)."""
        return replace(self, **changes)


class Float32(float):
    """A 32-bit float (Avro `float`, Protobuf `float`, Connect FLOAT32). Kafka Connect
    hands these on as Java floats, which print with float32 precision (4321.432, not
    the double 4321.43212890625 of the same bits); to_json_text does the same."""

    def __new__(cls, value: float) -> "Float32":
        return super().__new__(cls, round_to_float32(value))


def round_to_float32(value: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # beyond float32's range: Java's (float) gives an infinity
        return math.copysign(math.inf, value)


def shortest_float32(value: float) -> float:
    """The double with the fewest digits that reads back as the float32 `value`: what
    Java's Float.toString prints."""
    for digits in range(1, 10):
        shortest = float(f"{value:.{digits}g}")
        if round_to_float32(shortest) == value:
            return shortest
    return value


def java_number_text(number: float) -> str:
    """Java's Double.toString of a finite number (Float.toString of a Float32: its
    shortest single-precision digits), as Kafka Connect prints one: plain for
    1e-3 <= |x| < 1e7, else like 1.0E10. NaN and infinities are each caller's: Java
    and the connector spell them differently."""
    from decimal import Decimal

    if number == 0:
        return "-0.0" if math.copysign(1, number) < 0 else "0.0"
    shortest = shortest_float32(number) if isinstance(number, Float32) else float(number)
    sign, digits, exponent = Decimal(repr(shortest)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    exponent += len(digits) - len(text)
    magnitude = len(text) - 1 + exponent  # power of ten of the first digit
    prefix = "-" if sign else ""
    if -3 <= magnitude < 7:
        plain = f"{Decimal((0, tuple(map(int, text)), exponent)):f}"
        return prefix + (plain if "." in plain else plain + ".0")
    return f"{prefix}{text[0]}.{text[1:] or '0'}E{magnitude}"
