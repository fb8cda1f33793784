"""Dead-letter queues: where bad records go instead of their table when
errors.tolerance=all. One interface, one implementation per queue; the config picks
one (pipeline.py's dead_letter_queue_for):

- KafkaTopicQueue (errors.deadletterqueue.topic.name): the record as it came, with
  Kafka Connect's error headers (`__connect.errors.*`), so tools built for Kafka
  Connect's DLQ read floeline's unchanged.
- KinesisStreamQueue (errors.deadletterqueue.stream.name): a JSON document per record
  holding the data (base64) and the error context as fields, keyed by the record's
  partition key.
- ErrorTable (error_table.py), without either: the table `<TABLE>_ERRORS` beside the
  table, its commits carrying the table's positions after the batch.

A queue is written and flushed before the batch's table commit: a record is in the
table or in the queue, never neither. (A crash between the two can send a record to
the queue twice; its coordinates identify the copies.)"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Protocol

from floeline import retry
from floeline.errors import ServiceError, ServiceUnavailable
from floeline.retry import RetryPolicy
from floeline.sources.base import Committed
from floeline.sources.kafka import is_transient_kafka
from floeline.sources.kafka_clients import AuthFailures, client_config


@dataclass
class BadRecord:
    """One record that cannot go to its table, with its original bytes."""
    channel: str
    position: str
    source_fields: dict  # the source's own coordinates (topic/partition/offset, stream/shard/...)
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    stage: str = ""
    error: str = ""
    error_class: str = "DataException"


class DeadLetterQueue(Protocol):
    destination: str  # the metrics label: "dlq" (a topic or stream) or "error_table"

    def put(self, bad, ref, committed_after: Committed) -> int:
        """Deliver the bad records of one table (`bad`: a frame of their coordinates,
        raw key and value, `_stage_text`, `_error_text`, `_class`) before the table's
        commit, or raise (nothing of the batch is committed then). `committed_after`:
        the table's positions once the batch commits. Returns how many it added."""

    def put_stopping(self, record: BadRecord) -> int:
        """errors.tolerance=none: the record that stops the connector; how many were
        kept (0 or 1)."""


def ordered(frame):
    """Rows in channel and position order (positions compare as numbers)."""
    from pyspark.sql import functions as F

    return frame.orderBy("channel", F.length("position"), "position")


def source_fields(row) -> dict:
    """The source's own coordinates of a bad-record row."""
    source = row["source"]
    return source.asDict() if source is not None else {}


def bad_record(row) -> BadRecord:
    """A bad-record row (see DeadLetterQueue.put) as a BadRecord."""
    stamp = int(row["timestamp"].timestamp() * 1000) if row["timestamp"] else None
    return BadRecord(row["channel"], row["position"], source_fields(row), stamp,
                     row["_raw_key"], row["_raw_value"],
                     [(h["key"], h["value"]) for h in (row["headers"] or [])],
                     row["_stage_text"], row["_error_text"], row["_class"] or "DataException")


class RecordQueue:
    """A queue of records outside the warehouse (a topic, a stream): the bad records
    are collected in order and sent."""
    destination = "dlq"

    def send(self, records: list[BadRecord]) -> None:
        raise NotImplementedError

    def put(self, bad, ref, committed_after: Committed) -> int:
        records = ordered(bad).collect()
        self.send([bad_record(r) for r in records])
        return len(records)

    def put_stopping(self, record: BadRecord) -> int:
        self.send([record])
        return 1


# ---- Kafka topic ---------------------------------------------------------------------


def error_headers(record: BadRecord, connector: str) -> list[tuple[str, bytes]]:
    """Kafka Connect's DLQ context headers for `record`."""
    source = record.source_fields
    fields = {
        "topic": str(source.get("topic", record.channel)),
        "partition": str(source.get("partition", "")), "offset": str(source.get("offset", record.position)),
        "connector.name": connector, "stage": _connect_stage(record.stage),
        "class.name": "floeline." + record.stage.replace(" ", "_"),
        "exception.class.name": record.error_class,
        "exception.message": record.error,
        "exception.stacktrace": f"{record.error_class}: {record.error}\n\tat floeline {record.stage}",
    }
    return [(f"__connect.errors.{k}", v.encode("utf-8")) for k, v in fields.items()]


def _connect_stage(stage: str) -> str:
    """Kafka Connect's stage names (KEY_CONVERTER, VALUE_CONVERTER, HEADER_CONVERTER,
    TRANSFORMATION, TASK_PUT)."""
    return {"key converter": "KEY_CONVERTER", "value converter": "VALUE_CONVERTER",
            "header converter": "HEADER_CONVERTER",
            "transform": "TRANSFORMATION"}.get(stage, "TASK_PUT")


class KafkaTopicQueue(RecordQueue):
    # How long one flush waits before the retry rule counts a (transient) timeout.
    FLUSH_WAIT_S = 5.0

    def __init__(self, bootstrap: str, topic: str, connector: str, context_headers: bool = True,
                 policy: RetryPolicy = retry.DEFAULT, security=None):
        self.bootstrap, self.topic, self.connector = bootstrap, topic, connector
        self.context_headers, self.policy, self.security = context_headers, policy, security

    def send(self, records: list[BadRecord]) -> None:
        """Produce `records` to the DLQ topic and wait until the broker has them all.
        The producer retries in-flight sends itself (idempotent: no duplicates); a
        record whose delivery failed with a transient error (the broker restarting) is
        sent again, until the retry bound; any other failure stops the batch."""
        from confluent_kafka import Producer

        auth_failures = AuthFailures()  # a refused login only shows here: fail at once
        producer = Producer(client_config(self.bootstrap, self.security, error_cb=auth_failures, **{
            "enable.idempotence": True, "message.max.bytes": 64 * 1024 * 1024, "log_level": 2}))
        pending = list(range(len(records)))  # not yet handed to the producer, or failed
        failed: dict[int, object] = {}

        def delivered(index):
            def report(err, _msg):
                if err is not None:
                    failed[index] = err
            return report

        def deliver():
            for i in pending:
                record = records[i]
                headers = list(record.headers) + (error_headers(record, self.connector)
                                                  if self.context_headers else [])
                kwargs = {"key": record.key, "value": record.value, "headers": headers,
                          "on_delivery": delivered(i)}
                if record.timestamp_ms is not None:
                    kwargs["timestamp"] = record.timestamp_ms
                while True:
                    try:
                        producer.produce(self.topic, **kwargs)
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.1)
                producer.poll(0)
            pending.clear()
            remaining = producer.flush(self.FLUSH_WAIT_S)
            auth_failures.raise_if_any(self.bootstrap, self.security)
            terminal = [e for e in failed.values() if not is_transient_kafka(e)]
            if terminal:
                raise ServiceError(
                    f"could not write {len(failed)} bad record(s) to the dead-letter queue topic "
                    f"{self.topic!r} ({'; '.join(str(e) for e in terminal[:3])}); nothing of this "
                    f"batch was committed. Check that the topic exists (or may be auto-created) "
                    f"and the producer may write to it.")
            if failed:  # transient: send those again
                pending.extend(sorted(failed))
                first = next(iter(failed.values()))
                failed.clear()
                raise ServiceUnavailable(f"{len(pending)} bad record(s) not delivered: {first}")
            if remaining:
                raise ServiceUnavailable(f"{remaining} bad record(s) not yet acknowledged "
                                         f"after {self.FLUSH_WAIT_S:g} s")

        retry.call(deliver, what=f"Kafka produce to the dead-letter queue topic {self.topic!r} at "
                                 f"bootstrap.servers={self.bootstrap}", service="Kafka",
                   policy=self.policy,
                   fix="Nothing of this batch was committed. Check that the broker is running "
                       "and the topic exists (or may be auto-created).")


# ---- Kinesis stream ------------------------------------------------------------------


def kinesis_dead_letter(record: BadRecord, connector: str) -> dict:
    """The JSON document a bad record becomes in the Kinesis dead-letter stream."""
    return {
        "connector": connector, "stage": record.stage, "error": record.error,
        "errorClass": record.error_class, "channel": record.channel, "position": record.position,
        **{k: v for k, v in record.source_fields.items() if v is not None},
        "timestampMs": record.timestamp_ms,
        "key": None if record.key is None else base64.b64encode(record.key).decode("ascii"),
        "data": None if record.value is None else base64.b64encode(record.value).decode("ascii"),
    }


class KinesisStreamQueue(RecordQueue):
    # PutRecords takes at most 500 records and 5 MB per call.
    _BATCH = 500

    def __init__(self, aws, stream: str, connector: str, policy: RetryPolicy = retry.DEFAULT):
        self.aws, self.stream, self.connector, self.policy = aws, stream, connector, policy
        self._client = None

    def send(self, records: list[BadRecord]) -> None:
        """PutRecords to the DLQ stream; failed entries (throttled) are sent again."""
        from floeline.sources import aws as aws_calls

        if self._client is None:
            self._client = aws_calls.client("kinesis", self.aws)
        entries = [{"Data": json.dumps(kinesis_dead_letter(r, self.connector)).encode("utf-8"),
                    "PartitionKey": (r.source_fields.get("partitionKey") or r.channel)[:256]}
                   for r in records]
        what = f"Kinesis PutRecords to the dead-letter stream {self.stream}"
        for start in range(0, len(entries), self._BATCH):
            pending = entries[start:start + self._BATCH]
            for _attempt in range(10):
                result = aws_calls.call(what, self._client.put_records, StreamName=self.stream,
                                        Records=pending, endpoint=self.aws.kinesis_endpoint,
                                        policy=self.policy)
                if not result.get("FailedRecordCount"):
                    break
                pending = [e for e, r in zip(pending, result["Records"]) if r.get("ErrorCode")]
                time.sleep(min(2.0, 0.1 * 2 ** _attempt))  # throttled entries: back off
            else:
                raise ServiceUnavailable(
                    f"{what}: {len(pending)} record(s) still failing after 10 attempts; nothing of "
                    f"this batch was committed")
