"""What one read of a shard hands to a batch: Kinesis records as read (a KPL aggregate
keeps its user records together, so a batch never splits one), the per-shard limits a
batch stays within, and the Arrow rows Spark gets, one per user record."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (BinaryType, LongType, StringType, StructField, StructType,
                               TimestampType)

from floeline.sources.kinesis.kpl import UserRecord, deaggregate
from floeline.sources.kinesis.offsets import split_channel

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

GET_RECORDS_LIMIT = 10000  # Kinesis's maximum

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (moment - _EPOCH) // _MICROSECOND


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
