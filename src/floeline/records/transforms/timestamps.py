"""TimestampConverter$Key / $Value: epoch numbers, SimpleDateFormat strings, dates."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from floeline.records.transforms.base import (
    KeyOrValueTransform, TransformFailure, brief, require_map, type_name)
from floeline.records.transforms.java_dates import EPOCH, JavaDateFormat, epoch_ms
from floeline.records.transforms.options import REQUIRED

class TimestampConverter(KeyOrValueTransform):
    """Convert a timestamp (the whole key/value, or one map field) between epoch numbers
    (unix, with unix.precision), strings (format: a Java SimpleDateFormat pattern, UTC)
    and date/time values (Timestamp -> datetime, Date -> date, Time -> datetime on
    1970-01-01). Input types: int (unix), str (parsed with format), datetime
    (Timestamp), date (Date). Precision is milliseconds, as in Kafka. A null stays null;
    a missing field is set to null."""

    TARGETS = ("string", "unix", "Date", "Time", "Timestamp")
    PRECISIONS = ("seconds", "milliseconds", "microseconds", "nanoseconds")

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.field = opts.string("field", "")
        self.target = opts.choice("target.type", REQUIRED, self.TARGETS)
        self.precision = opts.choice("unix.precision", "milliseconds", self.PRECISIONS)
        pattern = opts.string("format", "")
        opts.boolean("replace.null.with.default", True)
        self.format: JavaDateFormat | None = None
        if pattern:
            try:
                self.format = JavaDateFormat(pattern)
            except ValueError as exc:
                opts.bad("format", pattern, f"is not a usable SimpleDateFormat pattern: {exc}")
        elif self.target == "string":
            opts.problems.append(f"missing setting '{opts.prefix}format' ({opts.label}): target.type=string "
                                 "needs a SimpleDateFormat pattern, e.g. yyyy-MM-dd'T'HH:mm:ss.SSSX")

    def transform(self, data, record):
        if data is None or not self.field:
            return self.convert(data)
        updated = dict(require_map(data, "converting timestamp formats"))
        try:
            updated[self.field] = self.convert(updated.get(self.field))
        except TransformFailure as exc:
            raise TransformFailure(f"field {self.field!r}: {exc}") from None
        return updated

    def convert(self, value: Any) -> Any:
        if value is None:
            return None
        ms = self.to_millis(value)
        if self.target == "unix":
            factor = {"seconds": None, "milliseconds": 1, "microseconds": 1000, "nanoseconds": 1_000_000}
            return _div_trunc(ms, 1000) if self.precision == "seconds" else ms * factor[self.precision]
        if self.target == "string":
            return self.format.format(ms)
        try:
            instant = EPOCH + timedelta(milliseconds=ms)
        except OverflowError:
            raise TransformFailure(f"timestamp {ms} ms is out of range") from None
        if self.target == "Date":
            return instant.date()
        if self.target == "Time":
            return datetime.combine(EPOCH.date(), instant.timetz())
        return instant

    def to_millis(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str, date)):
            raise TransformFailure(f"TimestampConverter does not support {type_name(value)} values as timestamps "
                        "(it takes epoch integers, strings, dates and datetimes)")
        if isinstance(value, int):
            divisor = {"seconds": None, "milliseconds": 1, "microseconds": 1000, "nanoseconds": 1_000_000}
            return value * 1000 if self.precision == "seconds" else _div_trunc(value, divisor[self.precision])
        if isinstance(value, str):
            if self.format is None:
                raise TransformFailure(f"cannot parse the string timestamp {brief(value)}: set format to its "
                            "SimpleDateFormat pattern")
            try:
                return self.format.parse(value)
            except ValueError:
                raise TransformFailure(f"Could not parse timestamp: value ({value}) does not match pattern "
                            f"({self.format.pattern})") from None
        if isinstance(value, datetime):
            return epoch_ms(value)
        return (value - EPOCH.date()).days * 86_400_000


def _div_trunc(a: int, b: int) -> int:
    """Integer division rounding toward zero, as Java's."""
    q = abs(a) // b
    return q if a >= 0 else -q
