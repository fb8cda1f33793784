"""Reading one shard: where it stands between reads, what it fetched ahead, and one
GetRecords at a time (an expired iterator replaced where reading stands)."""

from __future__ import annotations

import logging
import threading
from collections import deque

from floeline.errors import FloelineError
from floeline.sources import aws
from floeline.sources.kinesis.batches import GET_RECORDS_LIMIT, KRecord, to_krecord
from floeline.sources.kinesis.client import Kinesis
from floeline.sources.kinesis.offsets import ShardState, resume_point

log = logging.getLogger("floeline")

FIRST_FETCH = 50  # a shard's first GetRecords, before its records' aggregation is known


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
