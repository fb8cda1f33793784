"""Kafka Connect's predicates, which gate a transform (transforms.<alias>.predicate)."""

from __future__ import annotations

from floeline.records.transforms.routing import compile_java_regex

class TopicNameMatches:
    """True when the whole topic name matches `pattern`."""

    def __init__(self, opts):
        self.pattern = compile_java_regex(opts, "pattern", opts.non_empty("pattern"))

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
