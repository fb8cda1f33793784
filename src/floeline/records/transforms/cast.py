"""Cast$Key / Cast$Value, with Java's number parsing and printing."""

from __future__ import annotations

import base64
import math
import re
import struct
from datetime import date, datetime
from typing import Any

from floeline.records.record import java_number_text
from floeline.records.transforms.base import KeyOrValueTransform, TransformFailure, brief, require_map
from floeline.records.transforms.options import java_split
from floeline.records.transforms.java_dates import EPOCH, JavaDateFormat, epoch_ms

class Cast(KeyOrValueTransform):
    """Cast map fields (`spec=field:type,...`) or the whole key/value (`spec=type`) to
    int8, int16, int32, int64, float32, float64, boolean or string, with Java's rules:
    narrowing wraps around (300 -> int8 44), floats truncate, strings parse strictly,
    "true" (any case) is the only true string, numbers cast to boolean by != 0 after
    truncation, bytes cast only to string (base64). A null value stays null; a missing
    field is set to null."""

    TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.casts: dict[str, str] = {}
        self.whole: str | None = None
        spec = opts.list("spec") or []
        opts.boolean("replace.null.with.default", True)
        if not spec and "spec" in opts.values:
            opts.bad("spec", opts.values["spec"], "must name at least one field to cast, e.g. age:int32")
        for entry in spec:
            parts = java_split(entry, ":")
            if len(parts) > 2 or not parts:
                opts.bad("spec", entry, "is not a valid cast; use field:type pairs or a single type")
                continue
            target = parts[-1].strip().lower()
            if target not in self.TYPES:
                opts.bad("spec", entry, f"names an unknown type {parts[-1].strip()!r}; "
                                        f"supported types: {', '.join(self.TYPES)}")
                continue
            if len(parts) == 1:
                self.whole = target
            else:
                self.casts[parts[0].strip()] = target
        if self.whole is not None and len(spec) > 1:
            opts.bad("spec", ",".join(spec), "mixes a whole-value type with other casts; a cast of the "
                                            "entire value must be the only entry")

    def transform(self, data, record):
        if data is None:
            return None
        if self.whole is not None:
            return _cast_or_fail(data, self.whole, None)
        updated = dict(require_map(data, "cast types"))
        for field, target in self.casts.items():
            updated[field] = _cast_or_fail(updated.get(field), target, field)
        return updated


def _cast_or_fail(value: Any, target: str, field: str | None) -> Any:
    try:
        return cast_to(value, target)
    except (ValueError, ArithmeticError) as exc:
        what = f"field {field!r} value" if field is not None else "value"
        raise TransformFailure(f"cannot cast {what} {brief(value)} to {target}: {exc}") from None


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")


def cast_to(value: Any, target: str) -> Any:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise ValueError(f"Cast does not support casting from {'a map' if isinstance(value, dict) else 'an array'}")
    if target == "string":
        return java_string(value)
    if isinstance(value, datetime):  # a Timestamp casts as its epoch milliseconds
        value = epoch_ms(value)
    elif isinstance(value, date):  # a Date as its epoch days
        value = (value - EPOCH.date()).days
    if isinstance(value, (bytes, bytearray)):
        raise ValueError("binary values can only be cast to string")
    if target in _INT_BITS:
        return _to_int(value, _INT_BITS[target])
    if target == "boolean":
        if isinstance(value, str):
            return value.lower() == "true"
        return _to_int(value, 64) != 0
    number = _to_float(value)
    return _float32(number) if target == "float32" else number


def _to_int(value: Any, bits: int) -> int:
    if isinstance(value, str):
        if not _JAVA_INT.fullmatch(value):
            raise ValueError("not a whole number")
        number = int(value)
        if not -(1 << bits - 1) <= number < (1 << bits - 1):
            raise ValueError(f"out of range for int{bits}")
        return number
    if isinstance(value, float):  # Java's (int)/(long) cast: NaN -> 0, saturating
        if math.isnan(value):
            return 0
        wide = 64 if bits == 64 else 32
        value = max(-(1 << wide - 1), min((1 << wide - 1) - 1, int(value))) if math.isfinite(value) \
            else (-(1 << wide - 1) if value < 0 else (1 << wide - 1) - 1)
    number = int(value)  # bool, int, and Decimal (truncated)
    number &= (1 << bits) - 1  # two's complement wrap-around, as Java's narrowing
    return number - (1 << bits) if number >= 1 << bits - 1 else number


def _to_float(value: Any) -> float:
    if isinstance(value, str):
        return parse_java_double(value)
    return float(value)


def parse_java_double(text: str) -> float:
    """Double.parseDouble: surrounding blanks ignored, NaN/Infinity, an f/d suffix."""
    match = _JAVA_DOUBLE.fullmatch(text.strip())
    if not match:
        raise ValueError("not a number")
    body = text.strip().rstrip("fFdD") if match.group(1) not in ("NaN", "Infinity") else text.strip()
    return float(body.replace("Infinity", "inf"))


def _float32(number: float) -> float:
    """Round to a 32-bit float, as the shortest decimal that is the same float32 (what
    Java's Float.toString and JSON output show): 0.1 stays 0.1, 1/3 becomes 0.33333334."""
    if not math.isfinite(number):
        return number
    try:
        single = struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError:
        return math.copysign(math.inf, number)
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == single:
            return candidate
    return single


def java_string(value: Any) -> str:
    """Object.toString as Kafka's Cast uses it (base64 for bytes, ISO for dates)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double_str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return JavaDateFormat("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").format(epoch_ms(value))
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _java_double_str(number: float) -> str:
    """Double.toString, NaN and infinities included."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return java_number_text(number)
