"""Where a record goes: RegexRouter and TimestampRouter rename its topic, Filter drops it."""

from __future__ import annotations

import re

from floeline.records.transforms.base import TransformFailure
from floeline.records.transforms.java_dates import JavaDateFormat
from floeline.records.transforms.options import PluginOptions

class RegexRouter:
    """Rename the topic when the whole topic matches `regex`: the first match is replaced
    by `replacement`, where $1 / ${name} are groups and a backslash escapes (Java's
    Matcher.replaceFirst)."""

    def __init__(self, opts):
        regex, replacement = opts.string("regex"), opts.string("replacement")
        self.regex = compile_java_regex(opts, "regex", regex)
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


def compile_java_regex(opts: PluginOptions, name: str, pattern: str | None) -> re.Pattern | None:
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
            self.format = JavaDateFormat(pattern)
        except ValueError as exc:
            opts.bad("timestamp.format", pattern, f"is not a usable SimpleDateFormat pattern: {exc}")

    def apply(self, record):
        if record.timestamp_ms is None:
            raise TransformFailure("the record has no timestamp to route by")
        stamp = self.format.format(record.timestamp_ms)
        topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", stamp)
        return record.with_(topic=topic)


class Filter:
    """Drop the record (meant to be gated by a predicate)."""

    def __init__(self, opts):
        pass

    def apply(self, record):
        return None
