"""Where bad records go instead of their table: the dead-letter queue topic
(errors.deadletterqueue.topic.name) or, without one, the error table `<TABLE>_ERRORS`
beside the target table. Either way the record keeps its original key, value,
headers and timestamp, plus why and where it failed, so it can be inspected and
replayed.

DLQ records carry Kafka Connect's error headers (`__connect.errors.*`), so tools
built for Kafka Connect's DLQ read floeline's unchanged. They are produced and
flushed before the batch's table commit: a record is in the table or in the DLQ,
never neither. (A crash between the two can send a record to the DLQ twice; its
`__connect.errors.topic/partition/offset` headers identify the copies.)"""

from __future__ import annotations

from dataclasses import dataclass

from floeline.errors import ServiceUnavailable

ERROR_TABLE_SUFFIX = "_ERRORS"

# The error table's layout: the record as it came from Kafka, and its failure.
ERROR_TABLE_COLUMNS = (
    ("RECORD_TOPIC", "string"), ("RECORD_PARTITION", "int"), ("RECORD_OFFSET", "bigint"),
    ("RECORD_TIMESTAMP", "timestamp"), ("RECORD_KEY", "binary"), ("RECORD_VALUE", "binary"),
    ("RECORD_HEADERS", "array<struct<key:string,value:binary>>"),
    ("STAGE", "string"), ("ERROR", "string"), ("ERROR_CLASS", "string"),
    ("CONNECTOR", "string"), ("FAILED_AT", "timestamp"),
)


@dataclass
class BadRecord:
    """One record that cannot go to its table, with its original bytes."""
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    stage: str
    error: str
    error_class: str


def error_headers(record: BadRecord, connector: str) -> list[tuple[str, bytes]]:
    """Kafka Connect's DLQ context headers for `record`."""
    fields = {
        "topic": record.topic, "partition": str(record.partition), "offset": str(record.offset),
        "connector.name": connector, "stage": _connect_stage(record.stage),
        "class.name": "floeline." + record.stage.replace(" ", "_"),
        "exception.class.name": record.error_class,
        "exception.message": record.error,
        "exception.stacktrace": f"{record.error_class}: {record.error}\n\tat floeline {record.stage}",
    }
    return [(f"__connect.errors.{k}", v.encode("utf-8")) for k, v in fields.items()]


def _connect_stage(stage: str) -> str:
    """Kafka Connect's stage names (KEY_CONVERTER, VALUE_CONVERTER, TRANSFORMATION, TASK_PUT)."""
    return {"key converter": "KEY_CONVERTER", "value converter": "VALUE_CONVERTER",
            "transform": "TRANSFORMATION"}.get(stage, "TASK_PUT")


def send_to_dlq(bootstrap: str, topic: str, connector: str, records: list[BadRecord],
                context_headers: bool = True, timeout_s: float = 30.0) -> None:
    """Produce `records` to the DLQ topic and wait until the broker has them all."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.max.bytes": 64 * 1024 * 1024})
    failures: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(str(err))

    for record in records:
        headers = list(record.headers) + (error_headers(record, connector) if context_headers else [])
        kwargs = {"key": record.key, "value": record.value, "headers": headers,
                  "on_delivery": delivered}
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms
        producer.produce(topic, **kwargs)
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        raise ServiceUnavailable(
            f"could not write {remaining or len(failures)} bad record(s) to the dead-letter queue "
            f"topic {topic!r} ({'; '.join(failures[:3]) or 'timed out'}); nothing of this batch "
            f"was committed. Check the broker and that the topic exists (or may be auto-created).")
