"""Spark's Kinesis source: a PySpark Python streaming data source on boto3.

There is no Kinesis source for Spark 4 on Maven, so floeline reads Kinesis itself:

    spark.dataSource.register(KinesisDataSource)
    spark.readStream.format("floeline_kinesis").option("spec", json.dumps(spec)).load()

Design. The reader is a SimpleDataSourceStreamReader: `read(start)` runs in Spark's
long-lived Python process on the driver, fetches each readable shard concurrently (a
thread per shard, capped), de-aggregates KPL records and returns the batch as Arrow
record batches together with its end offset. Spark's wrapper caches that data until
the batch commits, so in the normal path every record is fetched from Kinesis once.
Between calls the reader keeps each shard's NextShardIterator and any records it
fetched past the batch's end, and reuses them when the next read starts where this
one ended. After a failure Spark re-runs a batch it logged with
`readBetweenOffsets(start, end)` in a fresh worker: for each shard whose position
moved it reads from start's position up to and including end's, which are exactly
the records read() handed out, because a batch ends only on a Kinesis record boundary
(an aggregated record is never split) and the rows of a record are a pure function
of its bytes.

The offset (in Spark's offset log; the connector parses it) holds, per channel
(`stream/shardId`), the last sequence number read (`p`; null with `from` saying where
reading starts), and `done` once a closed shard has been read to its end:

    {"shards": {"orders/shardId-000000000000": {"done": false, "p": "4959..."},
                "orders/shardId-000000000001": {"done": false, "from": "TRIM_HORIZON", "p": null}},
     "v": 1}

A child shard is read only once all its listed parents are done (per partition key,
records keep their order across splits and merges), and never in the batch that
finishes its parent."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterator, NamedTuple

import pyarrow as pa
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (BinaryType, LongType, StringType, StructField, StructType,
                               TimestampType)

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError, RetriesExhausted, ServiceUnavailable
from floeline.sources import aws
from floeline.sources.base import position_after
from floeline.sources.kinesis.kpl import UserRecord, deaggregate

log = logging.getLogger("floeline")

FORMAT = "floeline_kinesis"
SCHEMA = StructType([
    StructField("channel", StringType()),
    StructField("position", StringType()),
    StructField("stream", StringType()),
    StructField("shardId", StringType()),
    StructField("sequenceNumber", StringType()),
    StructField("subSequenceNumber", LongType()),
    StructField("partitionKey", StringType()),
    StructField("data", BinaryType()),
    StructField("approximateArrivalTimestamp", TimestampType()),
])
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

OFFSET_VERSION = 1
TRIM_HORIZON = "TRIM_HORIZON"
GET_RECORDS_LIMIT = 10000  # Kinesis's maximum
FIRST_FETCH = 50  # a shard's first GetRecords, before its records' aggregation is known
MAX_THREADS = 16
LIST_REFRESH_S = 30.0
# Without Trigger.AvailableNow a read stops walking a shard's empty stretch (GetRecords
# answers no records but MillisBehindLatest > 0) after this long; the iterator is kept,
# so the next read goes on from there.
READ_BUDGET_S = 20.0
EMPTY_FETCH_PAUSE_S = 0.2  # between empty GetRecords of one shard: Kinesis allows 5/s
RETRY_BOUND_S = aws.DEFAULT_RETRY_BOUND_S


# --- the spec option ----------------------------------------------------------------------

@dataclass
class Spec:
    """The `spec` option, built by the connector."""

    streams: tuple[str, ...]
    aws: AwsSettings
    committed: dict[str, str] = field(default_factory=dict)
    finished: frozenset[str] = frozenset()
    initial: str = TRIM_HORIZON  # a shard's `from`: TRIM_HORIZON or AT_TIMESTAMP:<ms>
    max_records: int = 10000
    max_bytes: int = 20_000_000
    prefetch: bool = True  # read a shard's next batch while Spark processes this one

    @classmethod
    def parse(cls, text: str) -> "Spec":
        try:
            raw = json.loads(text)
            streams = tuple(raw["streams"])
            settings = AwsSettings(**raw.get("aws", {}))
            committed = {str(k): str(v) for k, v in raw.get("committed", {}).items()}
            spec = cls(streams, settings, committed, frozenset(raw.get("finished", ())),
                       initial_from(raw.get("initial", {"type": TRIM_HORIZON})),
                       int(raw.get("max_records_per_shard", 10000)),
                       int(raw.get("max_bytes_per_shard", 20_000_000)),
                       bool(raw.get("prefetch", True)))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"the {FORMAT} source's spec option is invalid ({exc}): {text[:200]}") from exc
        if not spec.streams or spec.max_records < 1 or spec.max_bytes < 1:
            raise ConfigError(f"the {FORMAT} source's spec needs streams and positive limits: {text[:200]}")
        bad = [p for p in spec.committed.values() if not p.isdigit()]
        if bad:
            raise ConfigError(f"the {FORMAT} source's spec has committed positions that are not "
                              f"sequence numbers: {bad[:3]}")
        return spec


def initial_from(initial: dict) -> str:
    """The `from` of a shard that starts at the spec's initial position."""
    kind = initial.get("type")
    if kind == TRIM_HORIZON:
        return TRIM_HORIZON
    if kind == "AT_TIMESTAMP":
        return f"AT_TIMESTAMP:{int(initial['timestamp_ms'])}"
    raise ValueError(f"initial position {kind!r}: the reader takes TRIM_HORIZON or AT_TIMESTAMP "
                     "(the connector turns LATEST into AT_TIMESTAMP)")


# --- offsets and the shard rules (pure) ----------------------------------------------------

class ShardState(NamedTuple):
    """A shard's place in an offset: the last sequence number read (None: nothing yet,
    then `start` says where reading starts), and whether it is read to its end."""

    p: str | None
    start: str | None = TRIM_HORIZON
    done: bool = False


class Shard(NamedTuple):
    """A shard as ListShards shows it: its channel id and its parents' channel ids."""

    channel: str
    parents: tuple[str, ...] = ()


def channel_id(stream: str, shard_id: str) -> str:
    return f"{stream}/{shard_id}"


def split_channel(channel: str) -> tuple[str, str]:
    """(stream, shardId) of a channel id (stream names cannot hold '/')."""
    stream, _, shard_id = channel.partition("/")
    return stream, shard_id


def encode_offset(states: dict[str, ShardState]) -> dict:
    """The offset dict: sorted keys (Spark's wrapper compares offsets as JSON text) and
    `from` only while nothing is read."""
    shards = {}
    for channel in sorted(states):
        p, start, done = states[channel]
        shards[channel] = {"done": done, "p": p} if p is not None else \
            {"done": done, "from": start or TRIM_HORIZON, "p": None}
    return {"shards": shards, "v": OFFSET_VERSION}


def decode_offset(offset: dict | str) -> dict[str, ShardState]:
    """The shard states of an offset (dict or its JSON)."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    if not isinstance(offset, dict) or offset.get("v") != OFFSET_VERSION:
        raise FloelineError(f"not a {FORMAT} offset of version {OFFSET_VERSION}: {str(offset)[:200]}")
    states = {}
    for channel, entry in offset["shards"].items():
        p = entry.get("p")
        states[channel] = ShardState(p, None if p is not None else entry.get("from", TRIM_HORIZON),
                                     bool(entry.get("done", False)))
    return states


def ancestors(channel: str, parents: dict[str, tuple[str, ...]]) -> set[str]:
    """Every shard `channel` descends from, as far as the listing knows."""
    seen: set[str] = set()
    todo = list(parents.get(channel, ()))
    while todo:
        parent = todo.pop()
        if parent not in seen:
            seen.add(parent)
            todo.extend(parents.get(parent, ()))
    return seen


def start_states(shards: list[Shard], committed: dict[str, str], finished: frozenset[str] | set[str],
                 initial: str) -> dict[str, ShardState]:
    """Where each shard starts when the query starts without a Spark checkpoint.

    A committed shard goes on right after its position; a finished one is done. A
    shard descending from a committed or finished one starts at TRIM_HORIZON (we were
    reading its lineage, so all of it is new to us); any other at the initial
    position. A shard that a committed or finished shard descends from was read
    before it, so it is done."""
    parents = {s.channel: s.parents for s in shards}
    consumed = set(committed) | set(finished)
    read_before = set().union(*(ancestors(c, parents) for c in consumed)) if consumed else set()
    states = {}
    for shard in shards:
        ch = shard.channel
        if ch in finished:
            states[ch] = ShardState(committed.get(ch), None if ch in committed else TRIM_HORIZON, True)
        elif ch in committed:
            states[ch] = ShardState(committed[ch], None, False)
        elif ch in read_before:
            states[ch] = ShardState(None, TRIM_HORIZON, True)
        elif ancestors(ch, parents) & consumed:
            states[ch] = ShardState(None, TRIM_HORIZON, False)
        else:
            states[ch] = ShardState(None, initial, False)
    return states


def merge_listing(states: dict[str, ShardState], shards: list[Shard], spec: Spec
                  ) -> dict[str, ShardState]:
    """The offset's shards after a fresh listing: shards that appeared while running
    start at TRIM_HORIZON (a stream new to the offset starts as initialOffset would);
    shards no longer listed (expired) are dropped."""
    merged = {ch: s for ch, s in states.items() if ch in {sh.channel for sh in shards}}
    for ch in sorted(set(states) - set(merged)):
        if not states[ch].done and split_channel(ch)[0] in spec.streams:
            log.warning("Kinesis shard %s is no longer listed (expired after the stream's "
                        "retention period) before it was read to its end", ch)
    known_streams = {split_channel(ch)[0] for ch in states}
    new_streams = [s for s in shards if split_channel(s.channel)[0] not in known_streams]
    fresh = start_states(new_streams, spec.committed, spec.finished, spec.initial)
    for shard in shards:
        if shard.channel not in merged:
            merged[shard.channel] = fresh.get(shard.channel, ShardState(None, TRIM_HORIZON, False))
    return merged


def readable(states: dict[str, ShardState], shards: list[Shard]) -> list[str]:
    """The channels that may be read now: not done, and every parent that is still
    listed is done (a parent no longer listed has expired: it counts as done)."""
    listed = {s.channel for s in shards}
    out = []
    for shard in shards:
        state = states.get(shard.channel)
        if state is None or state.done:
            continue
        if all(states.get(p, ShardState(None)).done for p in shard.parents if p in listed):
            out.append(shard.channel)
    return sorted(out)


def replay_ranges(start: dict[str, ShardState], end: dict[str, ShardState]
                  ) -> list[tuple[str, ShardState, str]]:
    """(channel, where it starts, last sequence number) for each shard a batch read
    records from: those whose position moved between `start` and `end`."""
    ranges = []
    for channel in sorted(end):
        last = end[channel].p
        first = start.get(channel, ShardState(None, TRIM_HORIZON, False))
        if last is None or last == first.p:
            continue
        if first.p is not None and not position_after(last, first.p):
            raise FloelineError(f"offsets of {channel} go backwards: {first.p} -> {last}")
        ranges.append((channel, first, last))
    return ranges


def resume_point(state: ShardState) -> tuple[str, str | None]:
    """(ShardIteratorType, its argument) to read what follows `state`."""
    if state.p is not None:
        return "AFTER_SEQUENCE_NUMBER", state.p
    start = state.start or TRIM_HORIZON
    if start.startswith("AT_TIMESTAMP:"):
        return "AT_TIMESTAMP", start.partition(":")[2]
    if start != TRIM_HORIZON:
        raise FloelineError(f"unknown start {start!r} in a {FORMAT} offset")
    return TRIM_HORIZON, None


# --- records --------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


class KRecord(NamedTuple):
    """A Kinesis record as read: `users` holds its user records when it is a KPL
    aggregate (None for a plain record); `count` and `size` are what it adds to a
    batch's limits (user records, bytes of data)."""

    seq: str
    arrival_us: int
    partition_key: str
    data: bytes
    users: list[UserRecord] | None
    count: int
    size: int


def to_krecord(record: dict) -> KRecord:
    data = record["Data"]
    users = deaggregate(data)
    stamp = record["ApproximateArrivalTimestamp"]
    arrival_us = (stamp - _EPOCH) // _MICROSECOND if isinstance(stamp, datetime) else int(stamp * 1e6)
    if users is None:
        return KRecord(record["SequenceNumber"], arrival_us, record["PartitionKey"], data, None, 1, len(data))
    return KRecord(record["SequenceNumber"], arrival_us, record["PartitionKey"], data, users,
                   len(users), sum(len(u.data) for u in users))


@dataclass
class Budget:
    """What one shard may still add to a batch. The first record is always taken, so
    a batch always moves on even when one record exceeds a limit."""

    max_records: int
    max_bytes: int
    records: int = 0
    bytes: int = 0
    taken: int = 0

    def full(self) -> bool:
        return self.records >= self.max_records or self.bytes >= self.max_bytes

    def admits(self, record: KRecord) -> bool:
        return self.taken == 0 or (self.records + record.count <= self.max_records
                                   and self.bytes + record.size <= self.max_bytes)

    def add(self, record: KRecord) -> None:
        self.records += record.count
        self.bytes += record.size
        self.taken += 1

    def fetch_limit(self, users_per_record: float = 1.0) -> int:
        """GetRecords' Limit: about as many Kinesis records as the user records still
        allowed need, given how many user records a Kinesis record of this shard holds
        (KPL aggregates hold hundreds: one unlimited GetRecords would fetch up to 10 MB,
        the whole backlog, before the first batch can start)."""
        return fetch_limit(self.max_records - self.records, users_per_record)


def fetch_limit(user_records: int, users_per_record: float) -> int:
    """GetRecords' Limit for about `user_records` user records."""
    return max(1, min(GET_RECORDS_LIMIT, -(-user_records // max(1, int(users_per_record)))))


def arrow_batch(channel: str, records: list[KRecord]) -> pa.RecordBatch:
    """The rows of one shard's records: one per user record of an aggregate."""
    stream, shard_id = split_channel(channel)
    seqs, subs, keys, datas, stamps = [], [], [], [], []
    for rec in records:
        if rec.users is None:
            seqs.append(rec.seq)
            subs.append(None)
            keys.append(rec.partition_key)
            datas.append(rec.data)
            stamps.append(rec.arrival_us)
        else:
            n = len(rec.users)
            seqs += [rec.seq] * n
            subs += range(n)
            keys += [u.partition_key for u in rec.users]
            datas += [u.data for u in rec.users]
            stamps += [rec.arrival_us] * n
    n = len(seqs)
    seq_array = pa.array(seqs, pa.string())
    return pa.RecordBatch.from_arrays([
        pa.array([channel] * n, pa.string()), seq_array, pa.array([stream] * n, pa.string()),
        pa.array([shard_id] * n, pa.string()), seq_array, pa.array(subs, pa.int64()),
        pa.array(keys, pa.string()), pa.array(datas, pa.binary()),
        pa.array(stamps, pa.timestamp("us", tz="UTC")),
    ], schema=ARROW_SCHEMA)


# --- Kinesis calls ----------------------------------------------------------------------

class Kinesis:
    """The Kinesis calls the reader makes, each through aws.call (one retry rule)."""

    def __init__(self, settings: AwsSettings):
        self.settings = settings
        self.client = aws.client("kinesis", settings)
        region = settings.region or self.client.meta.region_name
        self.region = region
        self.endpoint = (f"kinesis.endpoint={settings.kinesis_endpoint}" if settings.kinesis_endpoint
                         else f"the Kinesis endpoint of {region} (kinesis.endpoint not set)")

    def call(self, what: str, fn, passthrough: frozenset[str] = frozenset(), **kwargs):
        return aws.call(what, fn, bound_s=RETRY_BOUND_S, endpoint=self.endpoint,
                        passthrough=passthrough, **kwargs)

    def list_shards(self, stream: str) -> list[Shard]:
        """Every shard of `stream` (open and closed within retention), paginated."""
        shards, token, waited = [], None, 0.0
        while True:
            args = {"NextToken": token} if token else {"StreamName": stream}
            try:
                page = self.call(f"Kinesis ListShards of stream {stream}", self.client.list_shards,
                                 passthrough=frozenset({"ResourceNotFoundException",
                                                        "ResourceInUseException"}), **args)
            except Exception as exc:  # noqa: BLE001 - the passthrough codes only
                code = aws.error_code(exc)
                if code == "ResourceNotFoundException":
                    raise FloelineError(
                        f"Kinesis stream {stream!r} does not exist in region {self.region} "
                        f"({self.endpoint}): check kinesis.stream.name") from exc
                if code == "ResourceInUseException" and waited < RETRY_BOUND_S:
                    time.sleep(0.5)  # the stream is still being created
                    waited += 0.5
                    continue
                raise aws.terminal_error(f"Kinesis ListShards of stream {stream}", exc, self.endpoint) from exc
            for s in page.get("Shards", ()):
                parents = tuple(channel_id(stream, s[k]) for k in ("ParentShardId", "AdjacentParentShardId")
                                if s.get(k))
                shards.append(Shard(channel_id(stream, s["ShardId"]), parents))
            token = page.get("NextToken")
            if not token:
                return shards

    def shard_iterator(self, channel: str, kind: str, value: str | None) -> str:
        stream, shard_id = split_channel(channel)
        args = {"StreamName": stream, "ShardId": shard_id, "ShardIteratorType": kind}
        if kind == "AT_TIMESTAMP":
            args["Timestamp"] = datetime.fromtimestamp(int(value) / 1000, timezone.utc)
        elif value is not None:
            args["StartingSequenceNumber"] = value
        what = f"Kinesis GetShardIterator {kind}{' ' + value if value else ''} on {channel}"
        return self.call(what, self.client.get_shard_iterator, **args)["ShardIterator"]

    def get_records(self, channel: str, iterator: str, limit: int) -> dict:
        return self.call(f"Kinesis GetRecords on {channel}", self.client.get_records,
                         passthrough=frozenset({"ExpiredIteratorException"}),
                         ShardIterator=iterator, Limit=limit)


class Cursor:
    """Where reading a shard stands: `p` the last record handed out, `pending` records
    fetched after it and not yet handed out, `iterator` the NextShardIterator after
    those (None: ask for one), `ended` when Kinesis said the shard has nothing after
    `pending`. Kept between read() calls of the driver's long-lived Python process."""

    def __init__(self, channel: str, state: ShardState, origin: tuple[str, str | None] | None = None):
        self.channel = channel
        self.p, self.start = state.p, state.start
        self.origin = origin or resume_point(state)
        self.pending: deque[KRecord] = deque()
        self.iterator: str | None = None
        self.ended = False
        self.fetched_to: str | None = None  # the last sequence number fetched
        self.lock = threading.Lock()  # one fetcher at a time: read() or the prefetcher
        self.generation = 0  # bumped by each read(): an older prefetcher stops
        self.stale = False  # replaced or finished: its prefetcher stops
        self.kinesis_records = self.user_records = 0  # fetched so far (sizes GetRecords)
        self.probed = False

    def users_per_record(self) -> float:
        """User records per Kinesis record fetched so far; before anything is, the
        first GetRecords is a probe of at most FIRST_FETCH records."""
        if not self.kinesis_records:
            return 1.0 if self.probed else float(GET_RECORDS_LIMIT) / FIRST_FETCH
        return self.user_records / self.kinesis_records

    def buffered(self) -> tuple[int, int]:
        """User records and bytes fetched and not yet handed out."""
        return sum(r.count for r in self.pending), sum(r.size for r in self.pending)

    def matches(self, state: ShardState) -> bool:
        return (self.p, self.start if self.p is None else None) == (state.p, state.start if state.p is None else None)

    def state(self) -> ShardState:
        return ShardState(self.p, self.start if self.p is None else None,
                          self.ended and not self.pending)

    def fetch(self, kinesis: Kinesis, limit: int) -> bool:
        """One GetRecords into `pending`; True when the shard is caught up (the
        response reached the tip, see below). An expired iterator is replaced, going on
        after the last record fetched."""
        for _ in range(3):
            if self.iterator is None:
                kind, value = ("AFTER_SEQUENCE_NUMBER", self.fetched_to) if self.fetched_to else self.origin
                self.iterator = kinesis.shard_iterator(self.channel, kind, value)
            try:
                response = kinesis.get_records(self.channel, self.iterator, limit)
                break
            except Exception as exc:  # noqa: BLE001 - ExpiredIteratorException (passthrough)
                if aws.error_code(exc) != "ExpiredIteratorException":
                    raise
                log.info("Kinesis shard iterator of %s expired; getting a new one", self.channel)
                self.iterator = None
        else:
            raise FloelineError(f"Kinesis shard iterators of {self.channel} keep expiring")
        records = [to_krecord(r) for r in response.get("Records", ())]
        self.probed = True
        self.pending.extend(records)
        if records:
            self.fetched_to = records[-1].seq
            self.kinesis_records += len(records)
            self.user_records += sum(r.count for r in records)
        self.iterator = response.get("NextShardIterator")
        self.ended = self.iterator is None
        # At the tip once a response reached it (MillisBehindLatest 0) with room to spare
        # (fewer records than asked for: records written in the same millisecond also say
        # 0), records or not: while a producer keeps writing, waiting for an empty
        # response would stretch one read (and the batch's latency) as long as it writes.
        return response.get("MillisBehindLatest", 0) == 0 and len(records) < limit


# --- the data source ------------------------------------------------------------------------

class KinesisDataSource(DataSource):
    """`spark.readStream.format("floeline_kinesis").option("spec", ...)`: see the module."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        return SCHEMA

    def simpleStreamReader(self, schema: StructType) -> "KinesisStreamReader":
        if "spec" not in self.options:
            raise ConfigError(f"the {FORMAT} source needs the 'spec' option")
        return KinesisStreamReader(Spec.parse(self.options["spec"]))


class KinesisStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads micro-batches on the driver (`read`) and re-reads logged ones
    (`readBetweenOffsets`). Runtime state (client, threads, cursors) is made in the
    process that reads and never pickled: Spark ships this object to its workers."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.cutoff_us: int | None = None  # Trigger.AvailableNow: nothing that arrived later
        self._initial: dict | None = None
        self._runtime: _Runtime | None = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_runtime"] = None
        return state

    def runtime(self) -> "_Runtime":
        if self._runtime is None:
            self._runtime = _Runtime(self.spec)
        return self._runtime

    def initialOffset(self) -> dict:
        """Where each shard starts (see start_states); the same answer every time in one
        process, so batch 0's start stays what read() started from."""
        if self._initial is None:
            shards = self.runtime().shards(force=True)
            self._initial = encode_offset(start_states(shards, self.spec.committed, self.spec.finished,
                                                       self.spec.initial))
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        self.cutoff_us = (datetime.now(timezone.utc) - _EPOCH) // _MICROSECOND
        log.info("Kinesis source: Trigger.AvailableNow reads records that arrived until %s",
                 datetime.now(timezone.utc).isoformat())

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        states = decode_offset(start)
        rt = self.runtime()
        shards = rt.shards()
        merged = merge_listing(states, shards, self.spec)
        channels = readable(merged, shards)
        results = rt.map(lambda ch: rt.read_shard(ch, merged[ch], self.cutoff_us), channels)
        batches = []
        for channel, (records, state) in zip(channels, results):
            merged[channel] = state
            if records:
                batches.append(arrow_batch(channel, records))
            if state.done:
                log.info("Kinesis shard %s is read to its end", channel)
                rt.refresh_listing = True
        if merged == states:
            return iter([]), start
        rows = sum(b.num_rows for b in batches)
        log.debug("Kinesis source: %d rows from %d shards", rows, len(batches))
        return iter(batches), encode_offset(merged)

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        ranges = replay_ranges(decode_offset(start), decode_offset(end))
        rt = self.runtime()
        results = rt.map(lambda r: rt.replay_shard(*r), ranges)
        return iter([arrow_batch(ch, records) for (ch, _, _), records in zip(ranges, results)
                     if records])

    def commit(self, end: dict) -> None:
        """Nothing to do: the connector commits positions to its tables."""


class _Runtime:
    """What a reading process holds: the client, a thread pool, the listing, and the
    cursor of each shard."""

    def __init__(self, spec: Spec, kinesis: Kinesis | None = None):
        self.spec = spec
        self.kinesis = kinesis or Kinesis(spec.aws)
        self.pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="floeline-kinesis")
        self.cursors: dict[str, Cursor] = {}
        self.listing: list[Shard] = []
        self.listed_at = float("-inf")
        self.refresh_listing = True
        self.lock = threading.Lock()
        self.prefetch_slots = threading.BoundedSemaphore(MAX_THREADS)

    def map(self, fn, items: list) -> list:
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self.pool.map(fn, items))

    def shards(self, force: bool = False) -> list[Shard]:
        """The streams' shards: listed again when a shard ended, else every 30 s."""
        if force or self.refresh_listing or time.monotonic() - self.listed_at > LIST_REFRESH_S:
            listing = [s for stream in self.spec.streams for s in self.kinesis.list_shards(stream)]
            new = {s.channel for s in listing} - {s.channel for s in self.listing}
            if self.listing and new:
                log.info("Kinesis shards appeared: %s", ", ".join(sorted(new)))
            self.listing, self.listed_at, self.refresh_listing = listing, time.monotonic(), False
        return self.listing

    def cursor(self, channel: str, state: ShardState) -> Cursor:
        with self.lock:
            cursor = self.cursors.get(channel)
            if cursor is None or not cursor.matches(state):
                if cursor is not None:
                    cursor.stale = True
                cursor = self.cursors[channel] = Cursor(channel, state)
            return cursor

    def read_shard(self, channel: str, state: ShardState, cutoff_us: int | None
                   ) -> tuple[list[KRecord], ShardState]:
        """The records of `channel` for this batch, within the per-shard limits, up to
        where the shard is caught up (or, with a cutoff, up to the first record that
        arrived after it); and the shard's state after them. A batch that ended on the
        limits leaves a prefetcher reading the next one."""
        cursor = self.cursor(channel, state)
        cursor.generation += 1
        with cursor.lock:
            taken, limited = self._take(cursor, cutoff_us)
            new_state = cursor.state()
        if new_state.done:
            cursor.stale = True
            with self.lock:
                self.cursors.pop(channel, None)
        elif limited and self.spec.prefetch:
            threading.Thread(target=self._prefetch, args=(cursor, cursor.generation), daemon=True,
                             name=f"floeline-prefetch-{channel}").start()
        return taken, new_state

    def _take(self, cursor: Cursor, cutoff_us: int | None) -> tuple[list[KRecord], bool]:
        """Hand out records from `cursor` (fetching as needed) for one batch; and
        whether the batch ended on the limits (more is likely waiting)."""
        budget = Budget(self.spec.max_records, self.spec.max_bytes)
        deadline = None if cutoff_us is not None else time.monotonic() + READ_BUDGET_S
        taken: list[KRecord] = []
        caught_up = False
        while not budget.full():
            if not cursor.pending:
                if cursor.ended or caught_up or (deadline and time.monotonic() > deadline):
                    return taken, False
                before = cursor.fetched_to
                caught_up = cursor.fetch(self.kinesis, budget.fetch_limit(cursor.users_per_record()))
                if not caught_up and not cursor.pending and not cursor.ended and before == cursor.fetched_to:
                    time.sleep(EMPTY_FETCH_PAUSE_S)  # an empty stretch behind the tip
                continue
            record = cursor.pending[0]
            if cutoff_us is not None and record.arrival_us > cutoff_us:
                return taken, False
            if not budget.admits(record):
                break
            budget.add(record)
            taken.append(cursor.pending.popleft())
            cursor.p = record.seq
        return taken, True

    def _prefetch(self, cursor: Cursor, generation: int) -> None:
        """Fetch up to one batch's worth ahead into `cursor` while Spark processes the
        batch just read, so reading overlaps writing. Stops when the next read() takes
        the shard over, when the shard is caught up or ended, or on an error (the next
        read() meets it again and reports it)."""
        deadline = time.monotonic() + READ_BUDGET_S
        with self.prefetch_slots:
            try:
                while cursor.generation == generation and not cursor.stale and time.monotonic() < deadline:
                    with cursor.lock:
                        if cursor.generation != generation or cursor.stale or cursor.ended:
                            return
                        count, size = cursor.buffered()
                        if count >= self.spec.max_records or size >= self.spec.max_bytes:
                            return
                        before = cursor.fetched_to
                        limit = fetch_limit(self.spec.max_records - count, cursor.users_per_record())
                        if cursor.fetch(self.kinesis, limit):
                            return  # caught up
                    if before == cursor.fetched_to:
                        time.sleep(EMPTY_FETCH_PAUSE_S)
            except Exception as exc:  # noqa: BLE001 - read() fetches again and raises it
                log.warning("Kinesis prefetch of %s stopped: %s", cursor.channel, exc)

    def replay_shard(self, channel: str, first: ShardState, last: str) -> list[KRecord]:
        """Exactly the records after `first` up to and including `last`. When `first`
        has a position, reading starts AT it and checks it is still there: then nothing
        between it and `last` can have expired (retention trims from the oldest). Each
        GetRecords asks for about what a batch may hold, as read() does: the batch was
        at most `max_records` user records, and KPL aggregates hold hundreds each."""
        check = first.p
        origin = ("AT_SEQUENCE_NUMBER", check) if check else None
        cursor = Cursor(channel, first, origin)
        gone = (f"cannot re-read Kinesis shard {channel} from {check or first.start} to {last}: "
                "the records are no longer in the stream (expired after its retention period?)")
        out: list[KRecord] = []
        users = 0  # user records in `out`
        while True:
            if not cursor.pending:
                if cursor.ended:
                    raise FloelineError(gone)
                limit = fetch_limit(max(1, self.spec.max_records - users), cursor.users_per_record())
                try:
                    caught_up = cursor.fetch(self.kinesis, limit)
                except (ServiceUnavailable, RetriesExhausted):
                    raise
                except FloelineError as exc:  # e.g. the sequence number is not found
                    raise FloelineError(f"{gone}: {exc}") from exc
                if caught_up and not cursor.pending:  # at the tip and `last` not reached
                    raise FloelineError(gone)
                continue
            record = cursor.pending.popleft()
            if check is not None:
                if record.seq != check:
                    raise FloelineError(gone)
                check = None
                continue
            if position_after(record.seq, last):
                raise FloelineError(gone)
            out.append(record)
            users += record.count
            if record.seq == last:
                return out
