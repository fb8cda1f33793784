"""The SMTs on a record's headers: DropHeaders, InsertHeader."""

from __future__ import annotations

class DropHeaders:
    """Remove every header with one of the listed names."""

    def __init__(self, opts):
        self.names = frozenset(opts.list("headers", non_empty=True) or ())

    def apply(self, record):
        return record.with_(headers=[h for h in record.headers if h[0] not in self.names])


class InsertHeader:
    """Add a header with a literal value: the text, which Kafka Connect parses as its
    SimpleHeaderConverter does whatever the header converter (header_rules.py)."""

    def __init__(self, opts):
        self.name = opts.string("header")
        self.value = opts.string("value.literal")

    def apply(self, record):
        return record.with_(headers=[*record.headers, (self.name, self.value)])
