"""Kafka Connect's SimpleHeaderConverter (the worker's default `header.converter`) on
header text: it infers a typed value from the text, as Connect's `Values.parseString`
does, so `42` is a number, `true` a boolean, `[1,2]` an array, `{"a":1}` a map,
`2024-01-02` a date, and anything else stays the text it was.

The grammar, as Connect's: the text is cut into tokens at unescaped `: , { } [ ] "`
(a backslash escapes the next character); a whole text that is exactly `null`, `true`
or `false` (blanks around allowed) is that literal; `[...]` and `{...}` hold values
separated by `,` (map entries `key:value`), whose strings are quoted; a number takes the
narrowest type that holds it (int8 ... int64, then a float32 or float64 when it has a
fraction, else a decimal); `yyyy-MM-dd`, `HH:mm:ss.SSSZ` and `yyyy-MM-ddTHH:mm:ss.SSSZ`
are a date, time and timestamp. The elements of an array (the keys, the values of a
map) get one schema: numbers widen to the widest of them (`[1, 2.5]` is two floats),
elements of other mixed kinds stay as they are, and a null among typed elements fails
the collection. When an array or map does not parse, the whole text is a string.

Values come back in record.py's types. A top-level map whose keys are not all strings
(or an empty `{}`, whose key type Connect cannot tell) is written by Snowflake's
connector as key-value pairs, so `{}` is `[]`. Checked against Kafka Connect 4.1.2's
SimpleHeaderConverter on a few hundred generated texts; it differs in Connect's oddities
only (a lenient date such as 2024-13-45 is a string here, not 2025-02-14)."""

from __future__ import annotations

import datetime as dt
import decimal
import re

from floeline.records.record import Float32, round_to_float32

_DELIMITERS = frozenset(':,{}[]"')
_LITERALS = {"null": None, "true": True, "false": False}
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INT_RANGES = (("int8", 7), ("int16", 15), ("int32", 31), ("int64", 63))
_NUMERIC_ORDER = ("int8", "int16", "int32", "int64", "float32", "float64")


class _Failed(Exception):
    """An embedded value or a collection does not parse: the caller falls back."""


def _java_trim(text: str) -> str:
    """Java's String.trim: every character up to U+0020 at either end."""
    return text.strip("".join(chr(c) for c in range(0x21)))


def _tokens(text: str) -> list[str]:
    """The text cut at unescaped delimiters; each delimiter is a token of its own."""
    out, start, escaped = [], 0, False
    for i, c in enumerate(text):
        if c == "\\":
            escaped = not escaped
            continue
        if c in _DELIMITERS and not escaped:
            if start < i:
                out.append(text[start:i])
            out.append(c)
            start = i + 1
        escaped = False
    if start < len(text):
        out.append(text[start:])
    return out


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, _tokens(text), 0

    def has_next(self) -> bool:
        return self.i < len(self.tokens)

    def peek(self) -> str | None:
        """The next token that is not blank (blank ones are passed over, as Connect's
        parser does when it looks for a delimiter)."""
        while self.i < len(self.tokens) - 1 and not _java_trim(self.tokens[self.i]):
            self.i += 1
        return _java_trim(self.tokens[self.i]) if self.has_next() else None

    def take(self, expected: str) -> bool:
        if self.peek() == expected:
            self.i += 1
            return True
        return False


def parse_header_text(text: str):
    """SimpleHeaderConverter's value for a header's (UTF-8 decoded) text."""
    if text == "":
        return ""
    parser = _Parser(text)
    try:
        value, schema = _parse(parser, embedded=False)
    except _Failed:  # (never at the top level: a text that fails is a string)
        return text
    if isinstance(schema, tuple) and schema[0] == "map" and schema[1] != "string":
        # Connect gives no string key type (`{}`, other keys): Snowflake writes pairs
        return [[k, v] for k, v in value.items()]
    return value


def _parse(p: _Parser, embedded: bool):
    """(value, schema) of the next value; the schema is a type name, ('decimal', scale)
    or ('array', item) / ('map', key, value), None for a null."""
    if not p.has_next():
        return None, None
    if embedded and p.take('"'):
        parts = []
        while p.has_next() and not p.take('"'):
            parts.append(p.tokens[p.i])
            p.i += 1
        content = "".join(parts)
        temporal = _temporal(content)
        return temporal if temporal is not None else (content, "string")
    start = p.i
    word = p.peek()
    if word in _LITERALS:
        p.i += 1
        if embedded or not p.has_next():
            return _LITERALS[word], (None if word == "null" else "boolean")
        p.i = start
    for opener, parse in (("[", _parse_array), ("{", _parse_map)):
        if p.take(opener):
            try:
                return parse(p)
            except _Failed:
                p.i = start
                break
    p.peek()
    token = p.tokens[p.i]
    p.i += 1
    if not _java_trim(token):
        return token, "string"
    token = _java_trim(token)
    if token[0].isdecimal():
        # a time or timestamp is cut at its colons: try it with the 4 tokens after it
        if p.i + 4 <= len(p.tokens):
            temporal = _temporal(token + "".join(p.tokens[p.i:p.i + 4]))
            if temporal is not None:
                p.i += 4
                return temporal
        temporal = _temporal(token)
        if temporal is not None:
            return temporal
    if token[0].isdecimal() or token[0] in "+-":
        number = _number(token)
        if number is not None:
            return number
    if embedded:
        raise _Failed()
    return p.text, "string"


def _parse_array(p: _Parser):
    items, schema = [], _UNSET
    while p.has_next():
        if p.take("]"):
            if schema in (_UNSET, _MIXED):
                return items, ("array", None)
            return [_align(schema, v) for v in items], ("array", schema)
        if p.take(","):
            raise _Failed()
        value, item_schema = _parse(p, embedded=True)
        schema = _common(schema, item_schema)
        items.append(value)
        if p.peek() != "]" and not p.take(","):
            raise _Failed()
    raise _Failed()


def _parse_map(p: _Parser):
    entries: dict = {}  # a key given twice keeps its first place and its last value
    key_schema, value_schema = _UNSET, _UNSET
    while p.has_next():
        if p.take("}"):
            if key_schema in (_UNSET, _MIXED):
                return entries, ("map", None, None)
            entries = {_align(key_schema, k): v for k, v in entries.items()}
            if value_schema not in (_UNSET, _MIXED):
                entries = {k: _align(value_schema, v) for k, v in entries.items()}
            return entries, ("map", key_schema, value_schema)
        if p.take(","):
            raise _Failed()
        key, this_key = _parse(p, embedded=True)
        if key is None or not p.take(":"):
            raise _Failed()
        value, this_value = _parse(p, embedded=True)
        try:
            entries[key] = value
        except TypeError:  # a list or map as a key
            raise _Failed() from None
        p.take(",")
        key_schema = _common(key_schema, this_key)
        value_schema = _common(value_schema, this_value)
    raise _Failed()


_UNSET = object()  # no element seen yet
_MIXED = object()  # elements of kinds no one schema holds: they stay as they are


def _common(previous, latest):
    """The schema that holds both, as Connect's: the same Connect type takes the latest
    schema; numbers widen along int8 < ... < float64 (dates and times count as the
    int32 and timestamps as the int64 they are in Connect); any other mix has none
    (_MIXED). A null element (schema None) changes nothing."""
    if latest is None or previous is _MIXED:
        return previous
    if previous is _UNSET:
        return latest
    old, new = _connect_type(previous), _connect_type(latest)
    if old == new:
        return latest
    if old in _NUMERIC_ORDER and new in _NUMERIC_ORDER:  # the wider one
        return latest if _NUMERIC_ORDER.index(new) > _NUMERIC_ORDER.index(old) else previous
    return _MIXED


def _connect_type(schema) -> str:
    kind = schema[0] if isinstance(schema, tuple) else schema
    return {"date": "int32", "time": "int32", "timestamp": "int64", "decimal": "bytes"}.get(kind, kind)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _align(schema, value):
    """An element converted to the collection's common schema, as Connect's convertTo:
    numbers widened, an integer into a date / time / timestamp counted in days / ms
    from the epoch; an element that does not convert (a null among typed elements, too)
    fails the collection."""
    if value is None or (isinstance(value, bool) and schema != "boolean"):
        raise _Failed()
    if schema in ("float32", "float64"):
        if not isinstance(value, (int, float, decimal.Decimal)):
            raise _Failed()
        return Float32(float(value)) if schema == "float32" else float(value)
    if schema in _NUMERIC_ORDER:
        if not isinstance(value, int):
            raise _Failed()
        return value
    if schema in ("date", "time", "timestamp"):
        if isinstance(value, (dt.date, dt.time)):
            return value  # a temporal value is kept as it is
        if not isinstance(value, int):
            raise _Failed()
        if schema == "date":
            return (_EPOCH + dt.timedelta(days=value)).date()
        moment = _EPOCH + dt.timedelta(milliseconds=value)
        return moment.time() if schema == "time" else moment
    kind = schema[0] if isinstance(schema, tuple) else schema
    expected = {"string": str, "boolean": bool, "array": list, "map": dict,
                "decimal": decimal.Decimal}.get(kind)
    if expected is not None and not isinstance(value, expected):
        raise _Failed()
    return value


def _number(token: str):
    if not _NUMBER.fullmatch(token):
        return None
    number = decimal.Decimal(token)
    if number == number.to_integral_value():
        whole = int(number)
        for name, bits in _INT_RANGES:
            if -(1 << bits) <= whole < (1 << bits):
                return whole, name
    scale = -number.as_tuple().exponent
    if scale != 0:
        as_float = float(number)
        if abs(round_to_float32(as_float)) != float("inf"):
            return Float32(as_float), "float32"
        if abs(as_float) != float("inf"):
            return as_float, "float64"
    return number, ("decimal", scale)


def _temporal(token: str):
    """A date, time or timestamp in Connect's ISO-8601 forms (UTC), or None."""
    token = token.replace("\\:", ":")
    forms = {10: ("%Y-%m-%d", "date"), 13: ("%H:%M:%S.%fZ", "time"),
             24: ("%Y-%m-%dT%H:%M:%S.%fZ", "timestamp")}
    if len(token) not in forms:
        return None
    pattern, kind = forms[len(token)]
    try:
        parsed = dt.datetime.strptime(token, pattern)
    except ValueError:
        return None
    if kind == "date":
        return parsed.date(), "date"
    if kind == "time":
        return parsed.time(), "time"
    return parsed.replace(tzinfo=dt.timezone.utc), "timestamp"
