"""Connector config files: Java .properties text (as java.util.Properties.load reads
it) and the Kafka Connect REST JSON, both turned into a flat dict of string settings."""

from __future__ import annotations

import json
import re

from floeline.errors import ConfigError



def parse_properties(text: str) -> dict[str, str]:
    """Parse Java .properties text as java.util.Properties.load does.

    `key=value`, `key: value` and `key value`; `#` / `!` comment lines; a line ending in
    an odd number of backslashes continues on the next (whose leading whitespace is
    dropped); escapes \\t \\n \\r \\f \\uXXXX, and a backslash before any other character
    keeps that character (`\\:`, `\\=`, `\\\\`). `$` is an ordinary character. Leading
    whitespace of keys and values is skipped, trailing whitespace of a value is kept.
    The last of repeated keys wins. Text is Unicode (Java reads a stream as ISO-8859-1;
    \\uXXXX escapes work either way)."""
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_key_value(line)
        try:
            result[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ConfigError(f"line {lineno}: {exc}") from None
    return result


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANKS = " \t\f"


def _logical_lines(text: str):
    """Yield (first physical line number, logical line) with continuations joined."""
    lines = _LINE_BREAK.split(text)
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment line never continues, even when it ends with a backslash
        while _ends_with_odd_backslashes(line):
            line = line[:-1]
            if i == len(lines):
                break
            line += lines[i].lstrip(_BLANKS)
            i += 1
        yield lineno, line


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped `=`, `:` or blank (still escaped)."""
    key_end, value_start, has_sep, escaped = len(line), len(line), False, False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "=:" or ch in _BLANKS:
            key_end, value_start, has_sep = i, i + 1, ch in "=:"
            break
    j = value_start
    while j < len(line) and (line[j] in _BLANKS or (not has_sep and line[j] in "=:")):
        has_sep = has_sep or line[j] in "=:"
        j += 1
    return line[:key_end], line[j:]


_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        ch = s[i]
        if ch != "\\" or i + 1 == len(s):
            out.append(ch if ch != "\\" else "")
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ValueError(f"malformed \\uXXXX escape {s[i:i + 6]!r} (four hex digits expected)")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2
    # \uD83D\uDE80 written as two escapes: join the surrogate pair into one character
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


_REST_FIELDS = {"name", "config", "tasks", "type"}  # POST /connectors body, GET /connectors/<name> reply


def settings_from_json(text: str) -> dict[str, str]:
    """Settings from Kafka Connect REST JSON ({"name", "config"}) or a flat JSON object."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ConfigError('a JSON connector config must be an object: {"name": ..., "config": {...}}')
    if isinstance(doc.get("config"), dict):
        extra = sorted(set(doc) - _REST_FIELDS)
        if extra:
            raise ConfigError(f"unexpected top-level field(s) {', '.join(extra)}: settings go inside \"config\"")
        settings = _json_values(doc["config"])
        outer = doc.get("name")
        if outer is not None:
            if settings.get("name", outer) != outer:
                raise ConfigError(f"connector name {outer!r} differs from config.name {settings['name']!r}")
            settings["name"] = str(outer)
        return settings
    return _json_values(doc)


def _json_values(obj: dict) -> dict[str, str]:
    """JSON values as the strings Kafka Connect would see; null means not set."""
    out: dict[str, str] = {}
    for key, value in obj.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            out[key] = str(value)
        else:
            raise ConfigError(f"setting {key!r} must be a string, number or boolean, not {type(value).__name__}")
    return out
