"""Snowpipe Streaming channels as a source: rows an application appended to a channel
over the worker's REST API (worker/channels.py), handed to the shared pipeline one
micro-batch at a time by ingest/channel_batches.py.

A channel is a source channel as a Kafka partition is: its id is the channel's name,
its route the table's name (so the table's pipe, evolution, error table and commit
apply as to a connector's rows). Snowpipe Streaming gives an offset token per appended
batch of rows, not per row; floeline's positions are per row and compared as numbers
(sources/base.py), so an offset token must be a non-negative integer and row `i` (from
0) of the batch ending at token `T` has position `T * TOKEN_SHIFT + i`. The position a
table holds for a channel therefore says the offset token it committed
(`token_of(position)`), in the same Delta commit as the rows, and a batch sent again
after a crash has the same positions: what the table holds is dropped as any replay is.
A batch is never split across micro-batches, so a committed position is always the
last row of its batch."""

from __future__ import annotations

import json

from floeline.records.metadata import null_metadata_sql, object_sql
from floeline.sources.base import BatchEnd, Channel, Committed, InProcessSource

# Rows in one appended batch are numbered below this; a 16 MB body holds far fewer.
TOKEN_SHIFT = 10 ** 8
MAX_ROWS_PER_APPEND = TOKEN_SHIFT
# The frame the batcher builds from the buffered rows.
SCHEMA = ("channel STRING, position STRING, route STRING, key BINARY, value BINARY, "
          "timestamp TIMESTAMP")
_TOKEN_SQL = "CASE WHEN length(position) <= 8 THEN '0' ELSE substr(position, 1, length(position) - 8) END"
NORMALIZED_CHANNELS = (
    "channel", "position", "route", "key", "value",
    "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers", "timestamp",
    f"named_struct('channel', channel, 'offset_token', {_TOKEN_SQL}) AS source",
)


class BadOffsetToken(ValueError):
    """An offset token that is not a non-negative integer."""


def parse_offset_token(text: str | None) -> int:
    """The offset token `text` as an integer; BadOffsetToken says why not and the fix."""
    if text is None or not text.strip():
        raise BadOffsetToken("the append has no offset token: give each batch the offset token of its "
                             "last row (?offsetToken=N, a non-negative integer that grows batch by batch)")
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 60:
        raise BadOffsetToken(f"offset token {text[:80]!r} is not a non-negative integer (at most 60 digits); "
                             f"floeline's channels compare offset tokens as numbers, so use a sequence "
                             f"number, a Kafka-style offset or a timestamp in ms")
    return int(text)


def row_position(token: int, index: int) -> str:
    """The position of row `index` of the batch whose offset token is `token`."""
    return str(token * TOKEN_SHIFT + index)


def token_of(position: str | None) -> str | None:
    """The offset token a committed position says (None: nothing committed)."""
    return None if position is None else str(int(position) // TOKEN_SHIFT)


class ChannelSource(InProcessSource):
    """The Source (sources/base.py) of one table's channels. Its batches are built by
    the batcher, which sets `first` (where the first batch starts) and writes each
    batch's start and end where `batch_end` reads them."""

    kind = "channel"
    has_headers = False
    has_standby = False
    bounded_read_tasks = False

    def __init__(self, config, table: str):
        self.config, self.table = config, table
        self.first: BatchEnd | None = BatchEnd({})
        self.open_channels: set[str] = set()

    def channels(self) -> list[Channel]:
        return [Channel(c, self.table) for c in sorted(self.open_channels)]

    def table_name(self, route: str) -> str:
        return route  # the route is the table's stored name

    def route_of(self, channel: str) -> str:
        return self.table

    def open(self, spark, committed: Committed, has_checkpoint: bool):
        raise NotImplementedError("a channel's rows are handed to the pipeline by the batcher, not streamed")

    def normalize(self, batch):
        return batch.selectExpr(*NORMALIZED_CHANNELS)

    @staticmethod
    def offsets_json(positions: dict[str, str]) -> str:
        return json.dumps({"channels": dict(sorted(positions.items()))})

    def batch_end(self, offset_json: str) -> BatchEnd | None:
        try:
            return BatchEnd({str(c): str(p) for c, p in json.loads(offset_json)["channels"].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def start_of_first_batch(self) -> BatchEnd | None:
        return self.first

    def metadata_sql(self, flags, push_time_sql, key_json=None, headers_json=None, extra=(),
                     function=None, as_json=False) -> str:
        if not flags.all_:
            return null_metadata_sql(as_json)
        return object_sql([[("'channel', channel, 'offset_token', source.offset_token", "true")], *extra],
                          as_json)

    def describe(self, fields: dict) -> str:
        return f"channel={fields.get('channel')} offset_token={fields.get('offset_token')}"
