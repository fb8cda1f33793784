"""What the Kinesis tests do to the local Kinesis (kinesis-local) as a producer would:
create streams, put plain and KPL-aggregated records, split and merge shards, read a
stream back. kinesis-local's PutRecords slows down as a shard grows (it is quadratic in
the shard's size), so tests keep streams to a few hundred records."""

from __future__ import annotations

import json
import time
import uuid

import boto3


def client(aws):
    return boto3.client("kinesis", endpoint_url=aws.kinesis_endpoint, region_name=aws.region,
                        aws_access_key_id=aws.access_key_id, aws_secret_access_key=aws.secret_access_key)


def dynamodb(aws):
    return boto3.client("dynamodb", endpoint_url=aws.dynamodb_endpoint, region_name=aws.region,
                        aws_access_key_id=aws.access_key_id, aws_secret_access_key=aws.secret_access_key)


def stream_name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_active(kinesis, stream: str, timeout_s: float = 30) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        status = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
        if status == "ACTIVE":
            return
        time.sleep(0.2)
    raise TimeoutError(f"stream {stream} not ACTIVE after {timeout_s}s")


def create_stream(aws, stream: str, shards: int = 2) -> None:
    kinesis = client(aws)
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    wait_active(kinesis, stream)


def put(aws, stream: str, records, key=lambda i, r: f"k{i}") -> list[tuple[str, str]]:
    """Put records (dicts become JSON; bytes/str as they are), in order, each with the
    partition key `key(i, record)`. Returns (shardId, sequenceNumber) per record."""
    kinesis = client(aws)
    entries = []
    for i, record in enumerate(records):
        data = json.dumps(record).encode() if isinstance(record, (dict, list)) else record
        entries.append({"Data": data.encode() if isinstance(data, str) else data,
                        "PartitionKey": key(i, record)})
    placed = []
    for start in range(0, len(entries), 100):
        chunk = entries[start:start + 100]
        result = kinesis.put_records(StreamName=stream, Records=chunk)
        assert not result.get("FailedRecordCount"), result
        placed += [(r["ShardId"], r["SequenceNumber"]) for r in result["Records"]]
    return placed


def put_aggregated(aws, stream: str, partition_key: str, user_records: list[tuple[str, bytes]]):
    """One KPL-aggregated Kinesis record holding `user_records` ((partition key, data))."""
    from floeline.sources.kinesis.kpl import aggregate

    result = client(aws).put_record(StreamName=stream, PartitionKey=partition_key,
                                    Data=aggregate(user_records))
    return result["ShardId"], result["SequenceNumber"]


def open_shards(aws, stream: str) -> list[dict]:
    shards = client(aws).list_shards(StreamName=stream)["Shards"]
    return [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]


def split(aws, stream: str, shard: dict) -> None:
    """Split `shard` at the middle of its hash key range."""
    low = int(shard["HashKeyRange"]["StartingHashKey"])
    high = int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis = client(aws)
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard["ShardId"],
                        NewStartingHashKey=str((low + high) // 2))
    wait_active(kinesis, stream)


def merge(aws, stream: str, first: dict, second: dict) -> None:
    kinesis = client(aws)
    kinesis.merge_shards(StreamName=stream, ShardToMerge=first["ShardId"],
                         AdjacentShardToMerge=second["ShardId"])
    wait_active(kinesis, stream)


def adjacent_pair(shards: list[dict]) -> tuple[dict, dict]:
    """Two open shards whose hash key ranges touch."""
    ordered = sorted(shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    for a, b in zip(ordered, ordered[1:]):
        if int(a["HashKeyRange"]["EndingHashKey"]) + 1 == int(b["HashKeyRange"]["StartingHashKey"]):
            return a, b
    raise AssertionError("no adjacent open shards")


def read_all(aws, stream: str) -> list[dict]:
    """Every record of every shard (a dead-letter stream read back)."""
    kinesis = client(aws)
    records = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=1000)
            records += page["Records"]
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
    return records
