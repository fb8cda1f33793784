"""What every source gives the shared pipeline: its channels, a Spark streaming
DataFrame of their records in one normalized layout, starting each channel right
after the position its table holds, and what to do after a commit.

A channel is the unit of order and of exactly-once (a Kafka topic partition, a
Kinesis shard, a staged file); its id is a string (`orders/0`, `events/shardId-0001`).
A position is a record's place in its channel as a digit string, compared as a number
of any length (Kafka offsets; Kinesis sequence numbers, which run past 64 bits), so
`"10" > "9"`. Positions are never compared as text or cast to 64-bit integers.

The normalized layout (NORMALIZED_COLUMNS) is what every source's `normalize` makes of
each micro-batch of the stream `open` returns. (Per batch, not in the stream: a
foreachBatch DataFrame is the stream's rows as an existing RDD, so a column computed
in the stream's own projection is computed for every row even when the batch never
reads it; measured: the one-pass Kafka batch 1.5-2.4 s slower per 340k records.)

  channel    string   the channel id
  position   string   the record's position in its channel (digits)
  route      string   what routing maps to a table: the topic / stream name
  key        binary   Kafka key; Kinesis partition key (UTF-8)
  value      binary   the record's bytes (NULL: a tombstone)
  headers    array<struct<key: string, value: binary>>   (NULL where a record has none)
  timestamp  timestamp  Kafka's record timestamp; Kinesis ApproximateArrivalTimestamp
  source     struct   the source's own fields, for RECORD_METADATA (source.metadata_sql)
                      and for the transforms' Kafka coordinates (`partition`, `offset`,
                      `timestampType` when the source has them)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

NORMALIZED_COLUMNS = ("channel", "position", "route", "key", "value", "headers", "timestamp",
                      "source")


def position_key(position: str) -> tuple[int, str]:
    """Sort key of a position: numeric order for digit strings of any length."""
    return len(position), position


def position_after(a: str, b: str) -> bool:
    """True when position `a` comes after `b`."""
    return position_key(a) > position_key(b)


def later_position(a: str | None, b: str | None) -> str | None:
    """The later of two positions (None: no position)."""
    if a is None or b is None:
        return a if b is None else b
    return a if position_after(a, b) else b


def earlier_position(a: str | None, b: str | None) -> str | None:
    """The earlier of two positions (None: no position)."""
    if a is None or b is None:
        return a if b is None else b
    return b if position_after(a, b) else a


def position_after_sql(column: str, other: str) -> str:
    """SQL: TRUE when the position in `column` comes after the one in `other` (both
    SQL expressions of canonical digit strings)."""
    return (f"(length({column}) > length({other}) OR "
            f"(length({column}) = length({other}) AND {column} > {other}))")


def max_position_sql(column: str) -> str:
    """SQL aggregate: the latest position in `column`."""
    return f"max(named_struct('n', length({column}), 'p', {column})).p"


def min_position_sql(column: str) -> str:
    """SQL aggregate: the earliest position in `column`."""
    return f"min(named_struct('n', length({column}), 'p', {column})).p"


@dataclass(frozen=True)
class Channel:
    """One channel a source reads, and the route (topic / stream) its records take."""

    id: str
    route: str


@dataclass
class Committed:
    """What the tables hold for a connector: the last committed position per channel
    and the channels that are finished (a closed shard, a loaded file).

    An offsets change (the worker's offsets API) may also leave `earliest`: channels
    reset to their earliest record that have committed nothing since, which start at
    the source's earliest record, not at its own fallback (consumer group, lease table,
    initial position); and `change`: the id of the latest offsets change these positions
    follow from, which a Spark checkpoint made before it must not override.

    `epochs`: per route, the identity of the route the positions were read from (a
    Kafka topic's id, 32 hex digits), so that a topic deleted and created again under
    the same name is told apart from the one the positions belong to."""

    positions: dict[str, str] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    earliest: set[str] = field(default_factory=set)
    change: str | None = None
    epochs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChannelChange:
    """A channel that changed under the connector so that reading on from where it is
    would skip or misread records (Source.changed): its route deleted and created again,
    the channel gone, its end now before the committed position, or records deleted
    before they were read. `what` says which and why, `committed` is the last committed
    position (None: nothing committed; the run had started at its start), `available`
    what the channel holds now, in the source's words. Under
    floeline.kafka.fail.on.data.loss=false the connector records an offsets change that
    resumes the channel after `resume_after` (None: at its earliest record), with the
    route's `epoch` as it is now."""

    channel: str
    route: str
    what: str
    committed: str | None
    available: str
    resume_after: str | None = None
    epoch: str | None = None


@dataclass(frozen=True)
class BatchEnd:
    """Where a micro-batch ends, from the source's own entry in Spark's offset log:
    the last position read per channel (channels with nothing read yet are absent)
    and the channels finished by the end of it."""

    positions: dict[str, str]
    finished: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Lag:
    """How far the committed positions are behind the source's head."""

    value: int
    unit: str = ""  # "" for records, "ms" for time behind

    def __str__(self) -> str:
        return f"{self.value}{self.unit}"


@dataclass(frozen=True)
class Head:
    """A channel's head in the source: the position of its newest record (None when
    unknown or the channel is empty) and how far a position is behind it."""

    latest: str | None
    lag: Lag | None


def total_lag(heads: dict[str, Head]) -> Lag | None:
    """The channels' lags together: records added up, time behind (ms) the largest;
    None when a channel's lag is unknown."""
    lags = [h.lag for h in heads.values()]
    if not lags or any(lag is None for lag in lags) or len({lag.unit for lag in lags}) > 1:
        return None
    values = [lag.value for lag in lags]
    return Lag(max(values) if lags[0].unit else sum(values), lags[0].unit)


class MirrorError(Exception):
    """Mirroring committed positions to the source's own tools (consumer group, lease
    table) failed: logged and counted by the connector, never fatal (the tables hold
    the truth)."""


class FixedRoutes:
    """A source whose routes cannot change under it unseen (no topic deleted and created
    again): no route epochs, no named routes to check, nothing changed, nothing to check
    before a batch (Kinesis, the memory source, channels)."""

    def epochs_of(self, channels) -> dict[str, str]:
        return {}

    def named_routes(self) -> list[str]:
        return []

    def changed(self, committed: Committed):
        return None

    def before_batch(self) -> None:
        pass


class InProcessSource(FixedRoutes):
    """What a source owes nothing to anyone for: no lease to claim or hold, no mirror
    of positions, no heads, no route epochs or changes (the memory source, channels)."""

    def claim(self) -> None:
        pass

    def first_records_sql(self, start: BatchEnd, count: int) -> str | None:
        """None: every record is the sample (positions may start anywhere)."""
        return None

    def before_commit(self) -> None:
        pass

    def after_commit(self, positions: dict[str, str], finished: set[str]) -> None:
        pass

    def heads(self, committed: dict[str, str] | None = None) -> dict[str, Head]:
        return {}

    def close(self) -> None:
        pass


class Source(Protocol):
    """A source of records for the shared pipeline (see the module docstring)."""

    kind: str  # "kafka", "kinesis", ...
    has_headers: bool  # whether records carry headers (the header converter applies)
    # Whether a second run of the same connector waits as a standby until the first
    # stops (Kinesis: its lease table): on S3 it then also waits for the tables' owner
    # records (warehouse/owners.py) instead of being refused.
    has_standby: bool
    # Whether every micro-batch of the stream `open` returned already comes in at most
    # twice Spark's default parallelism of tasks (floeline's Kafka reader plans its tasks
    # so), and the connector need not ask Spark for a batch's partitions: asking plans
    # the batch once more, 25 ms a batch at 5,000 records/s (ingest/read_tasks.py).
    bounded_read_tasks: bool

    def channels(self) -> list[Channel]:
        """The channels the source reads now (Kafka: every partition of the topics)."""

    def named_routes(self) -> list[str]:
        """Routes the config names whether or not they exist now (Kafka: `topics`): their
        tables' positions are read at start too, so that one deleted meanwhile is seen."""

    def changed(self, committed: Committed):
        """A SourceChanged (errors.py, not raised) naming the channels that changed under
        the connector since `committed` (and since this run started: the routes' epochs
        it read), with its ChannelChanges; None when nothing did. Asks the source."""

    def before_batch(self) -> None:
        """Raise SourceChanged when a route changed since the run started (a Kafka topic
        deleted, or deleted and created again); at the start of each micro-batch, before
        its records are read or committed."""

    def table_name(self, route: str) -> str:
        """The table name records of `route` go to (before a transform renames routes)."""

    def route_of(self, channel: str) -> str:
        """The route (topic / stream) of a channel id."""

    def claim(self) -> None:
        """Before the tables' positions are read: become the only reader of the
        channels (Kinesis: take the shards' leases, waiting as a standby while another
        live run holds them). Positions read before a wait could be stale by its end."""

    def open(self, spark, committed: Committed, has_checkpoint: bool):
        """The source's streaming DataFrame (its own columns). Without a Spark
        checkpoint, each channel starts right after its committed position (else where
        the source's own fallback says: consumer group, lease table, initial position)."""

    def normalize(self, batch):
        """A micro-batch of the stream `open` returned, in the normalized layout."""

    def batch_end(self, offset_json: str) -> BatchEnd | None:
        """The BatchEnd described by this source's JSON in Spark's offset log."""

    def start_of_first_batch(self) -> BatchEnd | None:
        """Where the query's first batch starts (the resolved start positions)."""

    def metadata_sql(self, flags, push_time_sql: str, key_json: str | None = None,
                     headers_json: str | None = None, extra=(), function: str | None = None,
                     as_json: bool = False) -> str:
        """SQL over the normalized columns: RECORD_METADATA as a VARIANT (its JSON text
        with `as_json`: records/metadata.py). `key_json` /
        `headers_json`: columns holding the converted key / headers as JSON text;
        `extra`: more fields (records/metadata.py's `field`, `field_unless_null`);
        `function`: floeline's JVM builder of a Kafka record's metadata, registered in
        the batch's session (jvm.kafka_metadata_function; other sources ignore it)."""

    def describe(self, source_fields: dict) -> str:
        """A record's coordinates for messages: `topic=orders partition=0 offset=5`."""

    def first_records_sql(self, start: BatchEnd, count: int) -> str | None:
        """SQL over the normalized columns: TRUE for a record among the first `count`
        of its channel after `start` (a sample of a batch that holds every channel);
        None when the source cannot tell without reading the records (then every
        record is the sample)."""

    def before_commit(self) -> None:
        """Raise when this connector may no longer commit (a Kinesis lease taken over)."""

    def epochs_of(self, channels) -> dict[str, str]:
        """The epochs (Committed.epochs) of the routes of `channels` as this run reads
        them, committed with their positions; {} for a source whose routes have none."""

    def after_commit(self, positions: dict[str, str], finished: set[str]) -> None:
        """Mirror committed positions where the source's tools look (Kafka consumer
        group, Kinesis lease table). Never the truth: the tables are. Raises
        MirrorError when that failed."""

    def heads(self, committed: dict[str, str] | None = None) -> dict[str, Head]:
        """Each channel's head and lag behind it: from `committed` (channel -> last
        committed position) or, when None, from what this connector committed while
        running. Empty when the source cannot tell; raises when asking it failed."""

    def close(self) -> None:
        """Release clients, leases and threads."""
