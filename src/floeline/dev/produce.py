"""`floeline kafka produce` and `floeline kinesis produce`: JSON lines from a file or
stdin into a topic or a stream, so a quick start can put records in without a client
program of the user's own.

Each non-blank line is one JSON value, sent as the record's value as written (the
connector's JsonConverter reads it). `--key-field F` makes a top-level field of each
object its Kafka key or Kinesis partition key (the value keeps the field);
`--header K=V` adds a Kafka header to every record. A line that is not JSON, or an
object without the key field, is an error naming the line and the fix; nothing is sent
then."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from floeline.errors import FloelineError


@dataclass(frozen=True)
class Line:
    """One record to send: its value as JSON text and its key (None: no key)."""

    value: str
    key: str | None


def read_lines(lines: Iterable[str], source: str, key_field: str | None = None) -> list[Line]:
    """The records of JSON-lines text; `source` names the file in errors ("stdin")."""
    records = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FloelineError(f"{source} line {number} is not JSON ({exc.msg} at column "
                                f"{exc.colno}): each line must be one JSON value, e.g. "
                                f'{{"order_id": 1, "customer_name": "John"}}') from None
        records.append(Line(text, _key(value, key_field, source, number)))
    return records


def _key(value, key_field: str | None, source: str, number: int) -> str | None:
    if key_field is None:
        return None
    if not isinstance(value, dict) or key_field not in value:
        raise FloelineError(f"{source} line {number} has no field {key_field!r} (--key-field): "
                            f"give each line that field, or leave --key-field out to send "
                            f"records without a key")
    key = value[key_field]
    return key if isinstance(key, str) else json.dumps(key)


def parse_headers(given: list[str] | None) -> list[tuple[str, str]]:
    """`--header K=V` options as Kafka headers, in order."""
    headers = []
    for item in given or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise FloelineError(f"--header {item!r} is not NAME=VALUE; write it as e.g. "
                                f"--header source=cli")
        headers.append((name, value))
    return headers


def produce_kafka(bootstrap: str, topic: str, records: list[Line],
                  headers: list[tuple[str, str]], partitions: int = 1) -> int:
    """Send `records` to `topic` (created with `partitions` when missing) and wait for
    every delivery; returns the count sent."""
    from floeline.dev.kafka import create_topic, topic_exists
    from floeline.sources.kafka import produce

    if not topic_exists(bootstrap, topic):
        create_topic(bootstrap, topic, partitions=partitions)
    return produce(bootstrap, topic, [
        {"value": r.value, "key": r.key, "headers": headers or None} for r in records])


def produce_kinesis(stream: str, records: list[Line], client, create: bool, shards: int = 1) -> int:
    """Put `records` into `stream` with `client` (a boto3 Kinesis client), creating the
    stream with `shards` first when `create` is set and it is missing; returns the
    count put. A record without a key gets its line's number as its partition key."""
    if create:
        _create_stream(client, stream, shards)
    sent = 0
    for start in range(0, len(records), 500):  # PutRecords takes at most 500
        batch = records[start:start + 500]
        entries = [{"Data": r.value.encode(), "PartitionKey": r.key or str(start + i)}
                   for i, r in enumerate(batch)]
        sent += _put_all(client, stream, entries)
    return sent


def _create_stream(client, stream: str, shards: int) -> None:
    if stream not in client.list_streams().get("StreamNames", []):
        client.create_stream(StreamName=stream, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=stream,
                                            WaiterConfig={"Delay": 1, "MaxAttempts": 60})


def _put_all(client, stream: str, entries: list[dict], attempts: int = 10) -> int:
    """PutRecords, the rejected entries (throttling) again with backoff; the count put."""
    total = len(entries)
    for attempt in range(attempts):
        answer = client.put_records(StreamName=stream, Records=entries)
        if not answer.get("FailedRecordCount"):
            return total
        entries = [e for e, r in zip(entries, answer["Records"]) if "ErrorCode" in r]
        time.sleep(0.2 * 2 ** attempt)
    raise FloelineError(f"Kinesis stream {stream!r} kept rejecting {len(entries)} records "
                        f"after {attempts} tries; try again later, or with fewer records")
