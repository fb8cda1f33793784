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

The offset (in Spark's offset log; the connector parses it) holds each shard's last
sequence number read and whether it is done (offsets.py, with the rules for where a
shard starts and which shards may be read: a child only once its parents are done,
and never in the batch that finishes its parent)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from floeline.errors import ConfigError
from floeline.sources.kinesis.batches import SCHEMA, Budget, KRecord, arrow_batch, epoch_us, fetch_limit
from floeline.sources.kinesis.client import Kinesis
from floeline.sources.kinesis.cursor import Cursor
from floeline.sources.kinesis.offsets import (
    Shard, ShardState, decode_offset, encode_offset, merge_listing, readable, replay_ranges,
    start_states)
from floeline.sources.kinesis.replay import replay_shard
from floeline.sources.kinesis.spec import FORMAT, Spec

log = logging.getLogger("floeline")

MAX_THREADS = 16
LIST_REFRESH_S = 30.0
# Without Trigger.AvailableNow a read stops walking a shard's empty stretch (GetRecords
# answers no records but MillisBehindLatest > 0) after this long; the iterator is kept,
# so the next read goes on from there.
READ_BUDGET_S = 20.0
EMPTY_FETCH_PAUSE_S = 0.2  # between empty GetRecords of one shard: Kinesis allows 5/s


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
                                                       self.spec.initial, self.spec.earliest))
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        self.cutoff_us = epoch_us(datetime.now(timezone.utc))
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
        results = rt.map(lambda r: replay_shard(rt.kinesis, self.spec.max_records, *r), ranges)
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
