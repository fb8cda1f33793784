"""The SMTs that reshape a key or value's fields: HoistField, ExtractField, InsertField,
ReplaceField, MaskField, Flatten, ValueToKey."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from floeline.records.transforms.base import (
    KeyOrValueTransform, TransformFailure, require_map, type_name)
from floeline.records.transforms.cast import parse_java_double
from floeline.records.transforms.java_dates import EPOCH
from floeline.records.transforms.options import java_split

class HoistField(KeyOrValueTransform):
    """Wrap the whole key/value in a map {field: data}; a null becomes {field: null}."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.field = opts.string("field")

    def transform(self, data, record):
        return {self.field: data}


class ExtractField(KeyOrValueTransform):
    """Replace a map by one of its fields (null when missing; a null map stays null).
    field.syntax.version=V2 reads dotted paths into nested maps (`a.b`, with backticks
    around names holding dots: `` `a.b`.c ``)."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        field = opts.string("field")
        version = opts.string("field.syntax.version", "V1")
        opts.boolean("replace.null.with.default", True)  # schema defaults only: no effect here
        self.path: tuple[str, ...] = ()
        if version is not None and version.upper() not in ("V1", "V2"):
            opts.bad("field.syntax.version", version, "is not valid; accepted values: V1, V2")
        elif field is not None:
            try:
                self.path = _field_path(field) if version.upper() == "V2" else (field,)
            except ValueError as exc:
                opts.bad("field", field, str(exc))

    def transform(self, data, record):
        current = require_map(data, "field extraction") if data is not None else None
        for step in self.path[:-1]:
            if current is None:
                return None
            current = require_map(current.get(step), "nested field access") \
                if current.get(step) is not None else None
        return None if current is None else current.get(self.path[-1])


def _field_path(path: str) -> tuple[str, ...]:
    """Kafka's SingleFieldPath V2 syntax: steps split at dots; a step starting with a
    backtick runs to the next backtick followed by a dot (or the end), and a backslash
    before that backtick keeps it in the name."""
    steps, i = [], 0
    while i < len(path):
        if path[i] != "`":
            end = path.find(".", i)
            steps.append(path[i:] if end < 0 else path[i:end])
            if end < 0:
                break
            i = end + 1
            continue
        opened, i, start, name = i, i + 1, i + 1, ""
        while True:
            close = path.find("`", i)
            if close < 0:
                raise ValueError(f"has an incomplete backtick pair (position {opened}); "
                                 "put a backslash before a backtick that is part of a name")
            escaped = path[close - 1] == "\\"
            if close == len(path) - 1:
                if escaped:
                    raise ValueError(f"has an incomplete backtick pair (position {opened}); "
                                     "put a backslash before a backtick that is part of a name")
                steps.append(name + path[start:close])
                i = close + 1
                break
            if path[close + 1] != ".":
                i = close + 1
                continue
            if escaped:
                name += path[start:close - 1] + "`"
                i = start = close + 1
                continue
            steps.append(name + path[start:close])
            i = close + 2
            break
    if path.endswith("."):
        steps.append("")
    return tuple(steps) or ("",)


class InsertField(KeyOrValueTransform):
    """Add fields from the record's coordinates or a static string to a map (a null map
    stays null). A trailing `!` or `?` on a field name (required/optional in Kafka's
    schema mode) is dropped. timestamp.field gets epoch milliseconds, as Kafka inserts in
    schemaless mode, and is skipped when the record has no timestamp."""

    NAMES = ("topic.field", "partition.field", "offset.field", "timestamp.field", "static.field")

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.fields = {}
        for name in self.NAMES:
            spec = opts.string(name, None)
            if spec is not None:
                self.fields[name] = spec[:-1] if spec.endswith(("!", "?")) else spec
        self.static_value = opts.string("static.value", None)
        opts.boolean("replace.null.with.default", True)
        if not self.fields:
            opts.problems.append(f"{opts.label} inserts nothing: set at least one of "
                                 + ", ".join(opts.prefix + n for n in self.NAMES))
        if "static.field" in self.fields and self.static_value is None:
            opts.problems.append(f"missing setting '{opts.prefix}static.value' for "
                                 f"{opts.prefix}static.field ({opts.label})")

    def transform(self, data, record):
        if data is None:
            return None
        updated = dict(require_map(data, "field insertion"))
        values = {"topic.field": record.topic, "partition.field": record.partition,
                  "offset.field": record.offset, "timestamp.field": record.timestamp_ms,
                  "static.field": self.static_value}
        for name, field in self.fields.items():
            if values[name] is not None:
                updated[field] = values[name]
        return updated


class ReplaceField(KeyOrValueTransform):
    """Keep (include), drop (exclude, which wins) and rename (`old:new,...`) map fields;
    a null map stays null. whitelist/blacklist are the pre-Kafka-4 names of
    include/exclude, used only when the new name is not set."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        include = opts.list("include", None)
        exclude = opts.list("exclude", None)
        whitelist = opts.list("whitelist", None)
        blacklist = opts.list("blacklist", None)
        self.include = frozenset(include if include is not None else whitelist or ())
        self.exclude = frozenset(exclude if exclude is not None else blacklist or ())
        self.renames: dict[str, str] = {}
        for mapping in opts.list("renames", []) or []:
            parts = java_split(mapping, ":")
            if len(parts) != 2:
                opts.bad("renames", mapping, "is not a valid rename; use old:new pairs, e.g. foo:bar,abc:xyz")
                continue
            self.renames[parts[0]] = parts[1]
        opts.boolean("replace.null.with.default", True)

    def transform(self, data, record):
        if data is None:
            return None
        return {self.renames.get(name, name): value
                for name, value in require_map(data, "field replacement").items()
                if name not in self.exclude and (not self.include or name in self.include)}


class MaskField(KeyOrValueTransform):
    """Replace the named fields by an empty value of their type (0, 0.0, false, "", [],
    {}, epoch for dates), or by `replacement` converted to the field's type (numbers and
    strings only). A null field stays null; a missing field is set to null (as Kafka
    does). A null map is an error, as in Kafka."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.fields = opts.list("fields", non_empty=True) or []
        self.replacement = opts.non_empty("replacement", None)
        opts.boolean("replace.null.with.default", True)

    def transform(self, data, record):
        if data is None:
            raise TransformFailure("Only Map objects supported in absence of schema for [mask fields], found: null "
                        "(a tombstone: use a RecordIsTombstone predicate with negate=true to skip them)")
        updated = dict(require_map(data, "mask fields"))
        for field in self.fields:
            updated[field] = self.masked(field, updated.get(field))
        return updated

    def masked(self, field: str, value: Any) -> Any:
        if value is None:
            return None
        if self.replacement is None:
            return _empty_like(field, value)
        text = self.replacement
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
                raise TransformFailure(f"cannot mask field {field!r} of type {type_name(value)} with a custom "
                            "replacement (only numbers and strings can be)")
            if isinstance(value, str):
                return text
            if isinstance(value, int):
                return int(Decimal(text))
            if isinstance(value, float):
                return parse_java_double(text)
            return Decimal(text)
        except (ValueError, InvalidOperation):
            raise TransformFailure(f"cannot mask field {field!r}: replacement {text!r} is not a number") from None


def _empty_like(field: str, value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, datetime):
        return EPOCH
    if isinstance(value, date):
        return EPOCH.date()
    for kind, empty in ((int, 0), (float, 0.0), (Decimal, Decimal(0)), (str, ""), (bytes, b""),
                        (list, []), (dict, {})):
        if isinstance(value, kind):
            return type(empty)(empty) if kind in (list, dict) else empty
    raise TransformFailure(f"cannot mask field {field!r} of type {type_name(value)}")



class Flatten(KeyOrValueTransform):
    """Flatten nested maps into one level, joining names with `delimiter` (default
    "."); lists are kept as they are, an empty nested map disappears, a null map stays
    null."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.delimiter = opts.string("delimiter", ".")

    def transform(self, data, record):
        if data is None:
            return None
        flat: dict = {}
        self.flatten(require_map(data, "flattening"), "", flat)
        return flat

    def flatten(self, source: dict, prefix: str, out: dict) -> None:
        for key, value in source.items():
            name = f"{prefix}{self.delimiter}{key}" if prefix else str(key)
            if isinstance(value, dict):
                self.flatten(value, name, out)
            else:
                out[name] = value



class ValueToKey:
    """Replace the key by a map of the named value fields (null for missing ones). The
    value must be a map: a tombstone is an error, as in Kafka."""

    def __init__(self, opts):
        self.fields = opts.list("fields", non_empty=True) or []
        opts.boolean("replace.null.with.default", True)

    def apply(self, record):
        value = require_map(record.value, "copying fields from value to key")
        return record.with_(key={field: value.get(field) for field in self.fields})
