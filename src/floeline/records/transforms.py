"""Kafka Connect's Single Message Transforms (SMTs) and predicates, in plain Python.

A connector config's `transforms=a,b` / `transforms.<alias>.type=...` /
`predicates=p` / `predicates.<p>.type=...` settings become one TransformChain, built
and validated once (`transform_chain`), then applied to every record on the Spark
executors (`TransformChain.apply`). Everything here is plain picklable Python.

Records are schemaless, as with Kafka Connect's JsonConverter and
`schemas.enable=false`: a struct is a dict. The semantics follow Apache Kafka 3.9's
transforms in schemaless mode (connect/transforms), including their quirks:

- tombstones (a null value, or null key for the $Key variants) pass through
  ExtractField, InsertField, ReplaceField, Cast, Flatten and TimestampConverter;
  HoistField wraps them ({field: null}); MaskField and ValueToKey refuse them, as
  Kafka does (use a RecordIsTombstone predicate with negate=true to skip them);
- MaskField, Cast and TimestampConverter set a named field that is missing to null;
- InsertField's timestamp.field is the record timestamp as epoch milliseconds (an int),
  which is what Kafka inserts in schemaless mode.

Where floeline's Python values have no schemaless Kafka counterpart, they behave as
Kafka's schema'd values would: decimal.Decimal is a number, datetime.datetime a
Timestamp and datetime.date a Date (Cast, TimestampConverter, Flatten, MaskField).
"""

from __future__ import annotations

import base64
import difflib
import math
import re
import struct
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from floeline.errors import ConfigError, TransformError
from floeline.records.record import Record, java_number_text

__all__ = ["TransformChain", "transform_chain", "SUPPORTED_TRANSFORMS", "SUPPORTED_PREDICATES"]

PACKAGE = "org.apache.kafka.connect.transforms."
PREDICATES_PACKAGE = PACKAGE + "predicates."
_REQUIRED = object()  # marks an option without a default


class _Fail(Exception):
    """A transform cannot handle a record; TransformChain turns it into a TransformError."""


# --- the chain -----------------------------------------------------------------------


class _Stage:
    """One transforms.<alias>: the transform, and the predicate gating it (if any).
    As in Kafka's TransformationStage, the transform runs when predicate XOR negate."""

    def __init__(self, alias: str, class_name: str, transform, predicate=None,
                 predicate_alias: str | None = None, negate: bool = False):
        self.alias, self.class_name, self.transform = alias, class_name, transform
        self.predicate, self.predicate_alias, self.negate = predicate, predicate_alias, negate

    def apply(self, record: Record) -> Record | None:
        if self.predicate is not None and self.predicate.test(record) == self.negate:
            return record
        return self.transform.apply(record)

    def describe(self) -> str:
        text = f"{self.alias}: {self.class_name}"
        if self.predicate_alias is not None:
            text += f" (when {'not ' if self.negate else ''}{self.predicate_alias})"
        return text


class TransformChain:
    """The configured transforms in order. `apply` returns the transformed record, or
    None when a transform (Filter) dropped it; later transforms then do not run."""

    def __init__(self, stages: tuple[_Stage, ...] = ()):
        self.stages = tuple(stages)

    @property
    def empty(self) -> bool:
        return not self.stages

    def describe(self) -> list[str]:
        """One "alias: ClassName" line per transform, for `floeline validate`."""
        return [stage.describe() for stage in self.stages]

    def apply(self, record: Record) -> Record | None:
        current: Record | None = record
        for stage in self.stages:
            try:
                current = stage.apply(current)
            except _Fail as exc:
                raise self._error(record, stage, str(exc)) from None
            except Exception as exc:  # a bug or an unforeseen value: still name the record
                raise self._error(record, stage, f"unexpected {type(exc).__name__}: {exc}") from exc
            if current is None:
                return None
        return current

    @staticmethod
    def _error(record: Record, stage: _Stage, reason: str) -> TransformError:
        return TransformError(f"transform {stage.alias!r} ({stage.class_name}): {reason}",
                              record.topic, record.partition, record.offset,
                              alias=stage.alias, transform=stage.class_name)


def transform_chain(settings: Mapping[str, str]) -> TransformChain:
    """Build the chain from raw connector settings (`transforms`, `transforms.<alias>.*`,
    `predicates`, `predicates.<p>.*`); raise one ConfigError listing every problem."""
    problems: list[str] = []
    predicate_aliases = _aliases(settings, "predicates", problems)
    predicates = {}
    for alias in predicate_aliases:
        built = _build_plugin(settings, "predicates", alias, problems)
        if built is not None:
            predicates[alias] = built[1]
    stages = []
    for alias in _aliases(settings, "transforms", problems):
        built = _build_plugin(settings, "transforms", alias, problems)
        gate = _predicate_of(settings, alias, predicate_aliases, predicates, problems)
        if built is not None and gate is not None:
            class_name, transform = built
            stages.append(_Stage(alias, class_name, transform, *gate))
    if problems:
        count = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid transforms config ({count} problem{'s' * (count > 1)}):\n{lines}")
    return TransformChain(tuple(stages))


def _aliases(settings: Mapping[str, str], family: str, problems: list[str]) -> list[str]:
    listed = [a.strip() for a in (settings.get(family) or "").split(",") if a.strip()]
    for alias in sorted({a for a in listed if listed.count(a) > 1}):
        problems.append(f"{family} lists the alias {alias!r} more than once")
    return list(dict.fromkeys(listed))


def _build_plugin(settings, family: str, alias: str, problems: list[str]):
    """(short class name, configured object) for one alias, or None after a problem."""
    type_key = f"{family}.{alias}.type"
    class_name = (settings.get(type_key) or "").strip()
    registry = _TRANSFORMS if family == "transforms" else _PREDICATES
    kind = "transform" if family == "transforms" else "predicate"
    if not class_name:
        problems.append(f"missing setting {type_key!r} for the {kind} alias {alias!r} listed in {family}")
        return None
    entry = registry.get(class_name) or registry.get(_SHORT_NAMES.get(class_name, ""))
    if entry is None:
        problems.append(_unknown_class(type_key, alias, class_name, registry, kind))
        return None
    full_name, (cls, side) = _full_name(class_name), entry
    short = full_name.rsplit(".", 1)[-1]
    reserved = ("type", "predicate", "negate") if family == "transforms" else ("type",)
    opts = _Options(f"{family}.{alias}.", f"{kind} {alias!r} ({short})", settings, reserved)
    plugin = cls(opts, side) if side is not None else cls(opts)
    opts.check_unknown()
    problems.extend(opts.problems)
    return (short, plugin) if not opts.problems else None


def _predicate_of(settings, alias, listed, predicates, problems):
    """(predicate, predicate alias, negate) for transforms.<alias>, or None after a problem."""
    prefix = f"transforms.{alias}."
    name = settings.get(prefix + "predicate")
    negate_text = settings.get(prefix + "negate")
    negate = False
    if negate_text is not None:
        if negate_text.strip().lower() not in ("true", "false"):
            problems.append(f"{prefix}negate={negate_text!r} is not a boolean; accepted values: true, false")
            return None
        negate = negate_text.strip().lower() == "true"
    if name is None:
        if negate_text is not None:
            problems.append(f"{prefix}negate is set but there is no {prefix}predicate defining a "
                            "predicate to be negated")
            return None
        return (None, None, False)
    name = name.strip()
    if name not in listed:
        problems.append(f"{prefix}predicate={name!r} names a predicate that is not listed in predicates "
                        f"(it lists: {', '.join(listed) or 'nothing'}); add it to predicates and set "
                        f"predicates.{name}.type")
        return None
    if name not in predicates:
        return None  # its own problem is reported already
    return (predicates[name], name, negate)


def _full_name(class_name: str) -> str:
    return _SHORT_NAMES.get(class_name, class_name)


def _unknown_class(type_key, alias, class_name, registry, kind) -> str:
    base = class_name.rsplit("$", 1)[0]
    if _full_name(f"{base}$Value") in registry:
        return (f"{type_key}={class_name}: {kind} {alias!r} must name the $Key or $Value variant, "
                f"e.g. {_full_name(base + '$Value')}")
    names = sorted(registry)
    shorts = sorted(name.rsplit(".", 1)[-1] for name in names)
    close = difflib.get_close_matches(class_name.rsplit(".", 1)[-1], shorts, n=1, cutoff=0.8)
    hint = f" (did you mean {_full_name(close[0])}?)" if close else ""
    other = _PREDICATES if kind == "transform" else _TRANSFORMS
    if _full_name(class_name) in other:
        hint = f" (it is a {'predicate' if kind == 'transform' else 'transform'})"
    bases = sorted({n.rsplit(".", 1)[-1].split("$")[0] + ("$Key/$Value" if "$" in n else "")
                    for n in names})
    package = PACKAGE if kind == "transform" else PREDICATES_PACKAGE
    return (f"{type_key}={class_name}: unknown {kind} class for alias {alias!r}{hint}; floeline "
            f"supports {package}{{{', '.join(bases)}}}")


class _Options:
    """The settings of one alias, read the way Kafka's ConfigDef reads them (values
    trimmed, lists comma-separated), collecting problems instead of raising."""

    def __init__(self, prefix: str, label: str, settings: Mapping[str, str], reserved=()):
        self.prefix, self.label = prefix, label
        self.values = {k[len(prefix):]: v for k, v in settings.items() if k.startswith(prefix)}
        self.known = set(reserved)
        self.problems: list[str] = []

    def string(self, name: str, default: Any = _REQUIRED) -> str | None:
        self.known.add(name)
        value = self.values.get(name)
        if value is None:
            if default is _REQUIRED:
                self.problems.append(f"missing required setting '{self.prefix}{name}' for {self.label}")
                return None
            return default
        return value.strip()

    def non_empty(self, name: str, default: Any = _REQUIRED) -> str | None:
        value = self.string(name, default)
        if value == "":
            self.bad(name, value, "must not be empty")
            return None
        return value

    def list(self, name: str, default: Any = _REQUIRED, non_empty: bool = False) -> list[str] | None:
        value = self.string(name, default)
        if value is None or isinstance(value, list):
            return value
        items = [item.strip() for item in value.split(",")] if value else []
        if non_empty and not items:
            self.bad(name, value, "must list at least one entry")
            return None
        return items

    def boolean(self, name: str, default: bool) -> bool:
        value = self.string(name, None)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            self.bad(name, value, "is not a boolean; accepted values: true, false")
            return default
        return value.lower() == "true"

    def choice(self, name: str, default: Any, accepted: tuple[str, ...]) -> str | None:
        """One of `accepted`, case-sensitive as in Kafka's ValidString."""
        value = self.string(name, default)
        if value is not None and value not in accepted:
            self.bad(name, value, f"is not valid; accepted values: {', '.join(accepted)}")
            return None
        return value

    def bad(self, name: str, value: Any, reason: str) -> None:
        self.problems.append(f"{self.prefix}{name}={value!r} {reason} ({self.label})")

    def check_unknown(self) -> None:
        for name in sorted(set(self.values) - self.known):
            close = difflib.get_close_matches(name, sorted(self.known - {"type"}), n=1)
            hint = f"did you mean '{self.prefix}{close[0]}'? " if close else ""
            options = ", ".join(sorted(self.known)) or "none"
            self.problems.append(f"unknown setting '{self.prefix}{name}' for {self.label}; {hint}"
                                 f"its settings are: {options}")


# --- helpers shared by transforms ----------------------------------------------------


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _require_map(value: Any, purpose: str) -> dict:
    """Kafka's Requirements.requireMap, with its message."""
    if not isinstance(value, dict):
        raise _Fail(f"Only Map objects supported in absence of schema for [{purpose}], "
                    f"found: {_type_name(value)}")
    return value


class _Side:
    """Base of the $Key/$Value transforms: `data` is the key or the value."""

    def __init__(self, opts: _Options, side: str):
        self.side = side

    def apply(self, record: Record) -> Record | None:
        data = record.value if self.side == "value" else record.key
        new = self.transform(data, record)
        return record.with_(value=new) if self.side == "value" else record.with_(key=new)

    def transform(self, data: Any, record: Record) -> Any:
        raise NotImplementedError


# --- the transforms ------------------------------------------------------------------


class HoistField(_Side):
    """Wrap the whole key/value in a map {field: data}; a null becomes {field: null}."""

    def __init__(self, opts, side):
        super().__init__(opts, side)
        self.field = opts.string("field")

    def transform(self, data, record):
        return {self.field: data}


class ExtractField(_Side):
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
        current = _require_map(data, "field extraction") if data is not None else None
        for step in self.path[:-1]:
            if current is None:
                return None
            current = _require_map(current.get(step), "nested field access") \
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


class InsertField(_Side):
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
        updated = dict(_require_map(data, "field insertion"))
        values = {"topic.field": record.topic, "partition.field": record.partition,
                  "offset.field": record.offset, "timestamp.field": record.timestamp_ms,
                  "static.field": self.static_value}
        for name, field in self.fields.items():
            if values[name] is not None:
                updated[field] = values[name]
        return updated


class ReplaceField(_Side):
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
            parts = _java_split(mapping, ":")
            if len(parts) != 2:
                opts.bad("renames", mapping, "is not a valid rename; use old:new pairs, e.g. foo:bar,abc:xyz")
                continue
            self.renames[parts[0]] = parts[1]
        opts.boolean("replace.null.with.default", True)

    def transform(self, data, record):
        if data is None:
            return None
        return {self.renames.get(name, name): value
                for name, value in _require_map(data, "field replacement").items()
                if name not in self.exclude and (not self.include or name in self.include)}


def _java_split(text: str, sep: str) -> list[str]:
    """String.split as Java does it: trailing empty strings removed."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class MaskField(_Side):
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
            raise _Fail("Only Map objects supported in absence of schema for [mask fields], found: null "
                        "(a tombstone: use a RecordIsTombstone predicate with negate=true to skip them)")
        updated = dict(_require_map(data, "mask fields"))
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
                raise _Fail(f"cannot mask field {field!r} of type {_type_name(value)} with a custom "
                            "replacement (only numbers and strings can be)")
            if isinstance(value, str):
                return text
            if isinstance(value, int):
                return int(Decimal(text))
            if isinstance(value, float):
                return _parse_java_double(text)
            return Decimal(text)
        except (ValueError, InvalidOperation):
            raise _Fail(f"cannot mask field {field!r}: replacement {text!r} is not a number") from None


def _empty_like(field: str, value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, datetime):
        return _EPOCH
    if isinstance(value, date):
        return _EPOCH.date()
    for kind, empty in ((int, 0), (float, 0.0), (Decimal, Decimal(0)), (str, ""), (bytes, b""),
                        (list, []), (dict, {})):
        if isinstance(value, kind):
            return type(empty)(empty) if kind in (list, dict) else empty
    raise _Fail(f"cannot mask field {field!r} of type {_type_name(value)}")


class Cast(_Side):
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
            parts = _java_split(entry, ":")
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
        updated = dict(_require_map(data, "cast types"))
        for field, target in self.casts.items():
            updated[field] = _cast_or_fail(updated.get(field), target, field)
        return updated


def _cast_or_fail(value: Any, target: str, field: str | None) -> Any:
    try:
        return _cast(value, target)
    except (ValueError, ArithmeticError) as exc:
        what = f"field {field!r} value" if field is not None else "value"
        raise _Fail(f"cannot cast {what} {_brief(value)} to {target}: {exc}") from None


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")


def _cast(value: Any, target: str) -> Any:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise ValueError(f"Cast does not support casting from {'a map' if isinstance(value, dict) else 'an array'}")
    if target == "string":
        return _java_string(value)
    if isinstance(value, datetime):  # a Timestamp casts as its epoch milliseconds
        value = _epoch_ms(value)
    elif isinstance(value, date):  # a Date as its epoch days
        value = (value - _EPOCH.date()).days
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
        return _parse_java_double(value)
    return float(value)


def _parse_java_double(text: str) -> float:
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


def _java_string(value: Any) -> str:
    """Object.toString as Kafka's Cast uses it (base64 for bytes, ISO for dates)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double_str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return _DateFormat("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").format(_epoch_ms(value))
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


class Flatten(_Side):
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
        self.flatten(_require_map(data, "flattening"), "", flat)
        return flat

    def flatten(self, source: dict, prefix: str, out: dict) -> None:
        for key, value in source.items():
            name = f"{prefix}{self.delimiter}{key}" if prefix else str(key)
            if isinstance(value, dict):
                self.flatten(value, name, out)
            else:
                out[name] = value


class TimestampConverter(_Side):
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
        self.target = opts.choice("target.type", _REQUIRED, self.TARGETS)
        self.precision = opts.choice("unix.precision", "milliseconds", self.PRECISIONS)
        pattern = opts.string("format", "")
        opts.boolean("replace.null.with.default", True)
        self.format: _DateFormat | None = None
        if pattern:
            try:
                self.format = _DateFormat(pattern)
            except ValueError as exc:
                opts.bad("format", pattern, f"is not a usable SimpleDateFormat pattern: {exc}")
        elif self.target == "string":
            opts.problems.append(f"missing setting '{opts.prefix}format' ({opts.label}): target.type=string "
                                 "needs a SimpleDateFormat pattern, e.g. yyyy-MM-dd'T'HH:mm:ss.SSSX")

    def transform(self, data, record):
        if data is None or not self.field:
            return self.convert(data)
        updated = dict(_require_map(data, "converting timestamp formats"))
        try:
            updated[self.field] = self.convert(updated.get(self.field))
        except _Fail as exc:
            raise _Fail(f"field {self.field!r}: {exc}") from None
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
            instant = _EPOCH + timedelta(milliseconds=ms)
        except OverflowError:
            raise _Fail(f"timestamp {ms} ms is out of range") from None
        if self.target == "Date":
            return instant.date()
        if self.target == "Time":
            return datetime.combine(_EPOCH.date(), instant.timetz())
        return instant

    def to_millis(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str, date)):
            raise _Fail(f"TimestampConverter does not support {_type_name(value)} values as timestamps "
                        "(it takes epoch integers, strings, dates and datetimes)")
        if isinstance(value, int):
            divisor = {"seconds": None, "milliseconds": 1, "microseconds": 1000, "nanoseconds": 1_000_000}
            return value * 1000 if self.precision == "seconds" else _div_trunc(value, divisor[self.precision])
        if isinstance(value, str):
            if self.format is None:
                raise _Fail(f"cannot parse the string timestamp {_brief(value)}: set format to its "
                            "SimpleDateFormat pattern")
            try:
                return self.format.parse(value)
            except ValueError:
                raise _Fail(f"Could not parse timestamp: value ({value}) does not match pattern "
                            f"({self.format.pattern})") from None
        if isinstance(value, datetime):
            return _epoch_ms(value)
        return (value - _EPOCH.date()).days * 86_400_000


def _div_trunc(a: int, b: int) -> int:
    """Integer division rounding toward zero, as Java's."""
    q = abs(a) // b
    return q if a >= 0 else -q


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _epoch_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // timedelta(milliseconds=1)


class ValueToKey:
    """Replace the key by a map of the named value fields (null for missing ones). The
    value must be a map: a tombstone is an error, as in Kafka."""

    def __init__(self, opts):
        self.fields = opts.list("fields", non_empty=True) or []
        opts.boolean("replace.null.with.default", True)

    def apply(self, record):
        value = _require_map(record.value, "copying fields from value to key")
        return record.with_(key={field: value.get(field) for field in self.fields})


class RegexRouter:
    """Rename the topic when the whole topic matches `regex`: the first match is replaced
    by `replacement`, where $1 / ${name} are groups and a backslash escapes (Java's
    Matcher.replaceFirst)."""

    def __init__(self, opts):
        regex, replacement = opts.string("regex"), opts.string("replacement")
        self.regex = _compile_java_regex(opts, "regex", regex)
        self.replacement: tuple = ()
        if self.regex is not None and replacement is not None:
            try:
                self.replacement = _java_replacement(replacement, self.regex)
            except ValueError as exc:
                opts.bad("replacement", replacement, str(exc))

    def apply(self, record):
        if not self.regex.fullmatch(record.topic):
            return record
        match = self.regex.search(record.topic)  # replaceFirst finds again from the start
        new = "".join(part if isinstance(part, str) else (match.group(part[0]) or "")
                      for part in self.replacement)
        return record.with_(topic=record.topic[:match.start()] + new + record.topic[match.end():])


def _compile_java_regex(opts: _Options, name: str, pattern: str | None) -> re.Pattern | None:
    """A Java regex as a Python one: named groups (?<n>...) and \\k<n> are translated;
    other Java-only syntax (\\p{Alpha}, ...) is reported."""
    if pattern is None:
        return None
    text = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern)
    text = re.sub(r"\\k<([A-Za-z][A-Za-z0-9]*)>", r"(?P=\1)", text)
    try:
        return re.compile(text)
    except re.error as exc:
        opts.bad(name, pattern, f"is not a valid regular expression ({exc})")
        return None


def _java_replacement(text: str, regex: re.Pattern) -> tuple:
    """Parse a Matcher replacement into literal strings and (group,) references."""
    parts: list = []
    literal, i = "", 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 == len(text):
                raise ValueError("ends with a lone backslash")
            literal += text[i + 1]
            i += 2
        elif ch == "$":
            if text[i + 1:i + 2] == "{":
                end = text.find("}", i)
                name = text[i + 2:end] if end > 0 else ""
                if not name or name not in regex.groupindex:
                    raise ValueError(f"refers to a group ${{{name}}} the regex does not have")
                group, i = name, end + 1
            elif text[i + 1:i + 2].isdigit():
                group, i = int(text[i + 1]), i + 2
                if group > regex.groups:
                    raise ValueError(f"refers to group ${group} but the regex has {regex.groups} group(s)")
                while i < len(text) and text[i].isdigit() and group * 10 + int(text[i]) <= regex.groups:
                    group, i = group * 10 + int(text[i]), i + 1
            else:
                raise ValueError("has a $ that is not a group reference ($1, ${name}); write \\$ for a dollar")
            parts += [literal, (group,)]
            literal = ""
        else:
            literal += ch
            i += 1
    parts.append(literal)
    return tuple(p for p in parts if p != "")


class TimestampRouter:
    """Set the topic to topic.format (default ${topic}-${timestamp}) with the record
    timestamp formatted by timestamp.format (SimpleDateFormat, default yyyyMMdd, UTC)."""

    def __init__(self, opts):
        self.topic_format = opts.string("topic.format", "${topic}-${timestamp}")
        pattern = opts.string("timestamp.format", "yyyyMMdd")
        self.format = None
        try:
            self.format = _DateFormat(pattern)
        except ValueError as exc:
            opts.bad("timestamp.format", pattern, f"is not a usable SimpleDateFormat pattern: {exc}")

    def apply(self, record):
        if record.timestamp_ms is None:
            raise _Fail("the record has no timestamp to route by")
        stamp = self.format.format(record.timestamp_ms)
        topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", stamp)
        return record.with_(topic=topic)


class Filter:
    """Drop the record (meant to be gated by a predicate)."""

    def __init__(self, opts):
        pass

    def apply(self, record):
        return None


class DropHeaders:
    """Remove every header with one of the listed names."""

    def __init__(self, opts):
        self.names = frozenset(opts.list("headers", non_empty=True) or ())

    def apply(self, record):
        return record.with_(headers=[h for h in record.headers if h[0] not in self.names])


class InsertHeader:
    """Add a header with a literal value: the text, which Kafka Connect parses as its
    SimpleHeaderConverter does whatever the header converter (headers.py)."""

    def __init__(self, opts):
        self.name = opts.string("header")
        self.value = opts.string("value.literal")

    def apply(self, record):
        return record.with_(headers=[*record.headers, (self.name, self.value)])


# --- predicates ----------------------------------------------------------------------


class TopicNameMatches:
    """True when the whole topic name matches `pattern`."""

    def __init__(self, opts):
        self.pattern = _compile_java_regex(opts, "pattern", opts.non_empty("pattern"))

    def test(self, record) -> bool:
        return record.topic is not None and self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey:
    """True when the record has at least one header called `name`."""

    def __init__(self, opts):
        self.name = opts.non_empty("name")

    def test(self, record) -> bool:
        return any(header[0] == self.name for header in record.headers)


class RecordIsTombstone:
    """True when the record's value is null."""

    def __init__(self, opts):
        pass

    def test(self, record) -> bool:
        return record.value is None


# --- registry ------------------------------------------------------------------------

_TRANSFORMS: dict[str, tuple[type, str | None]] = {}
for _cls in (Cast, ExtractField, Flatten, HoistField, InsertField, MaskField, ReplaceField,
             TimestampConverter):
    for _side in ("Key", "Value"):
        _TRANSFORMS[f"{PACKAGE}{_cls.__name__}${_side}"] = (_cls, _side.lower())
for _cls in (DropHeaders, Filter, InsertHeader, RegexRouter, TimestampRouter, ValueToKey):
    _TRANSFORMS[PACKAGE + _cls.__name__] = (_cls, None)
_PREDICATES: dict[str, tuple[type, None]] = {
    PREDICATES_PACKAGE + _cls.__name__: (_cls, None)
    for _cls in (HasHeaderKey, RecordIsTombstone, TopicNameMatches)}

# Short names: Kafka Connect's own plugin aliases (the simple class names that are
# unique, e.g. RegexRouter, TopicNameMatches) plus floeline's HoistField$Value style.
_SHORT_NAMES = {name.rsplit(".", 1)[-1]: name for name in [*_TRANSFORMS, *_PREDICATES]}

SUPPORTED_TRANSFORMS = tuple(sorted(_TRANSFORMS))
SUPPORTED_PREDICATES = tuple(sorted(_PREDICATES))
del _cls, _side


# --- java.text.SimpleDateFormat, in UTC ------------------------------------------------

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_JAVA_LETTERS = set("GyMdkHmsSEDFwWahKzZYuXL")
_UNSUPPORTED_LETTERS = {"F": "day of week in month", "w": "week in year", "W": "week in month",
                        "Y": "week year (did you mean y, the year?)"}
_NUMERIC = set("yMLdHkKhmsSDu")
_ZONE = r"(?i:Z|[+-]\d{2}(?::?\d{2})?|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2})?)?)"


class _DateFormat:
    """The parts of SimpleDateFormat Kafka's TimestampConverter relies on, always in UTC:
    letters G y M L d H k K h m s S E u D a z Z X, quoted 'literals' and ''. Parsing is
    lenient like Java's (fields overflow into the next unit, text after the pattern is
    ignored); English month and day names; zones Z, +hh[:mm], UTC/GMT[+hh:mm]."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.tokens = tuple(self._tokenize(pattern))
        self.regex = re.compile(self._parse_regex())

    @staticmethod
    def _tokenize(pattern: str):
        literal, i = "", 0
        while i < len(pattern):
            ch = pattern[i]
            if ch == "'":
                if pattern[i + 1:i + 2] == "'":
                    literal, i = literal + "'", i + 2
                    continue
                i += 1
                while True:
                    if i >= len(pattern):
                        raise ValueError("unterminated quote")
                    if pattern[i] == "'":
                        if pattern[i + 1:i + 2] != "'":
                            break
                        i += 1
                    literal, i = literal + pattern[i], i + 1
                i += 1
            elif ch.isascii() and ch.isalpha():
                if ch not in _JAVA_LETTERS:
                    raise ValueError(f"illegal pattern character {ch!r}")
                if ch in _UNSUPPORTED_LETTERS:
                    raise ValueError(f"pattern letter {ch!r} ({_UNSUPPORTED_LETTERS[ch]}) is not supported")
                end = i
                while end < len(pattern) and pattern[end] == ch:
                    end += 1
                if literal:
                    yield literal
                    literal = ""
                yield (ch, end - i)
                i = end
            else:
                literal, i = literal + ch, i + 1
        if literal:
            yield literal

    @staticmethod
    def _numeric(token) -> bool:
        return isinstance(token, tuple) and token[0] in _NUMERIC and not (token[0] in "ML" and token[1] >= 3)

    def _parse_regex(self) -> str:
        parts = []
        for index, token in enumerate(self.tokens):
            if isinstance(token, str):
                parts.append(re.escape(token))
                continue
            letter, count = token
            following = self.tokens[index + 1] if index + 1 < len(self.tokens) else None
            if self._numeric(token):
                body = rf"\d{{{count}}}" if self._numeric(following) else r"\d+"
            elif letter in "ML":
                body = "(?i:" + "|".join(_MONTHS + tuple(m[:3] for m in _MONTHS)) + ")"
            elif letter == "E":
                body = "(?i:" + "|".join(_DAYS + tuple(d[:3] for d in _DAYS)) + ")"
            elif letter == "a":
                body = "(?i:AM|PM)"
            elif letter == "G":
                body = "(?i:AD)"
            else:  # z Z X
                body = _ZONE
            parts.append(f"(?P<f{index}>{body})")
        return "".join(parts)

    def format(self, ms: int) -> str:
        try:
            t = _EPOCH + timedelta(milliseconds=ms)
        except OverflowError:
            raise _Fail(f"timestamp {ms} ms is out of range") from None
        out = []
        for token in self.tokens:
            if isinstance(token, str):
                out.append(token)
                continue
            letter, n = token
            if letter == "y":
                out.append(f"{t.year % 100:02d}" if n == 2 else f"{t.year:0{n}d}")
            elif letter in "ML":
                out.append(_MONTHS[t.month - 1] if n >= 4 else _MONTHS[t.month - 1][:3] if n == 3
                           else f"{t.month:0{n}d}")
            elif letter == "E":
                out.append(_DAYS[t.weekday()] if n >= 4 else _DAYS[t.weekday()][:3])
            elif letter == "G":
                out.append("AD")
            elif letter == "a":
                out.append("AM" if t.hour < 12 else "PM")
            elif letter == "z":
                out.append("Coordinated Universal Time" if n >= 4 else "UTC")
            elif letter == "Z":
                out.append("+0000")
            elif letter == "X":
                out.append("Z")
            else:
                number = {"d": t.day, "H": t.hour, "k": t.hour or 24, "K": t.hour % 12,
                          "h": t.hour % 12 or 12, "m": t.minute, "s": t.second,
                          "S": t.microsecond // 1000, "D": t.timetuple().tm_yday,
                          "u": t.isoweekday()}[letter]
                out.append(f"{number:0{n}d}")
        return "".join(out)

    def parse(self, text: str) -> int:
        """Epoch milliseconds; ValueError when the text does not match."""
        match = self.regex.match(text)
        if match is None:
            raise ValueError(text)
        year, month, day, day_of_year = 1970, 1, 1, None
        hour = hour12 = pm = None
        minute = second = millis = offset = 0
        for index, token in enumerate(self.tokens):
            if isinstance(token, str):
                continue
            letter, count = token
            value = match.group(f"f{index}")
            if letter == "y":
                year = _two_digit_year(int(value)) if count <= 2 and len(value) == 2 else int(value)
            elif letter in "ML":
                month = int(value) if count <= 2 else _month_number(value)
            elif letter == "d":
                day = int(value)
            elif letter == "D":
                day_of_year = int(value)
            elif letter == "H":
                hour = int(value)
            elif letter == "k":
                hour = int(value) % 24
            elif letter in "hK":
                hour12 = int(value) % 12
            elif letter == "a":
                pm = value.upper() == "PM"
            elif letter == "m":
                minute = int(value)
            elif letter == "s":
                second = int(value)
            elif letter == "S":
                millis = int(value)
            elif letter in "zZX":
                offset = _zone_offset_minutes(value)
        if hour is None:
            hour = (hour12 or 0) + (12 if pm else 0)
        year += (month - 1) // 12
        month = (month - 1) % 12 + 1
        if day_of_year is not None and not any(isinstance(t, tuple) and t[0] in "MLd" for t in self.tokens):
            month, day = 1, day_of_year
        try:
            moment = (datetime(year, month, 1, tzinfo=timezone.utc)
                      + timedelta(days=day - 1, hours=hour, minutes=minute - offset, seconds=second,
                                  milliseconds=millis))
        except (ValueError, OverflowError):
            raise ValueError(text) from None
        return _epoch_ms(moment)


def _month_number(name: str) -> int:
    name = name.lower()
    return next(i + 1 for i, m in enumerate(_MONTHS) if m.lower() == name or m[:3].lower() == name)


def _two_digit_year(yy: int) -> int:
    """SimpleDateFormat's rule for yy: within 80 years before and 20 after today."""
    start = datetime.now(timezone.utc).year - 80
    year = start // 100 * 100 + yy
    return year + 100 if year < start else year


def _zone_offset_minutes(text: str) -> int:
    upper = text.upper()
    for name in ("UTC", "GMT", "UT"):
        if upper.startswith(name):
            upper = upper[len(name):]
            break
    if upper in ("", "Z"):
        return 0
    sign = -1 if upper[0] == "-" else 1
    digits = upper[1:].replace(":", "")
    if len(digits) <= 2:
        hours, minutes = int(digits), 0
    else:
        hours, minutes = int(digits[:-2]), int(digits[-2:])
    return sign * (hours * 60 + minutes)


def routed_topic(chain: TransformChain | None, topic: str) -> str:
    """The topic a source topic's records are routed as when transforms rename topics
    (RegexRouter, TimestampRouter): the chain run on an empty record of `topic`.
    Routing that depends on a record's content shows only per record."""
    if chain is None or chain.empty:
        return topic
    from floeline.records.record import Record

    try:
        routed = chain.apply(Record(topic, 0, 0, None, -1, None, {}))
    except Exception:  # a transform that needs real content: route as the topic
        return topic
    return routed.topic if routed is not None else topic
