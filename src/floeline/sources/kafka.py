"""What floeline asks of the Kafka cluster itself, outside Spark's Kafka source: which
partitions the subscription covers, where each partition starts and ends, and the
connector's consumer-group offsets (advanced after each commit so Kafka's own lag
tools, e.g. kafka-consumer-groups, show the connector's lag)."""

from __future__ import annotations

import json
import re
import time

from floeline.errors import ServiceUnavailable

TIMEOUT_S = 15
# Options for Spark's Kafka source. A micro-batch's tasks read up to the newest offset,
# and the consumer's fetch past it is held by the broker for fetch.max.wait.ms (500 ms
# by default) before the task can finish: measured at +1.0 s on a 4-partition batch
# that ends at the topic's end, and nothing with 10 ms. A fetch with data is answered
# at once whatever this wait, so a short one costs nothing mid-topic.
SPARK_SOURCE_OPTIONS = {"kafka.fetch.max.wait.ms": "10"}
# Spark's Kafka source never subscribes to the broker's internal topics.
_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state", "__share_group_state"}


def group_id(connector: str) -> str:
    """Kafka Connect names a sink connector's consumer group `connect-{name}`."""
    return f"connect-{connector}"


class KafkaCluster:
    def __init__(self, bootstrap: str):
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})

    def partitions(self, topics: tuple[str, ...] = (), pattern: str | None = None
                   ) -> dict[str, int]:
        """Partition count per subscribed topic that exists now."""
        try:
            meta = self.admin.list_topics(timeout=TIMEOUT_S)
        except Exception as exc:
            raise ServiceUnavailable(
                f"cannot reach Kafka at bootstrap.servers={self.bootstrap}: {exc}. Check the "
                f"broker is running (`floeline kafka start` for the local one) and the address.") from exc
        regex = re.compile(pattern) if pattern else None
        found = {}
        for name, topic in meta.topics.items():
            if name in topics or (regex and regex.fullmatch(name) and name not in _INTERNAL_TOPICS):
                found[name] = len(topic.partitions)
        return found

    def _list_offsets(self, tps: list[tuple[str, int]], spec) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}
        request = {TopicPartition(t, p): getattr(OffsetSpec, spec)() for t, p in tps}
        futures = self.admin.list_offsets(request, request_timeout=TIMEOUT_S)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    def earliest(self, tps):
        return self._list_offsets(list(tps), "earliest")

    def latest(self, tps):
        return self._list_offsets(list(tps), "latest")

    def group_offsets(self, group: str, tps) -> dict[tuple[str, int], int]:
        """The group's committed next-offset per partition (absent when none)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        tps = list(tps)
        if not tps:
            return {}
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])
        result = self.admin.list_consumer_group_offsets([request])[group].result()
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
                if tp.offset >= 0}

    def commit_group_offsets(self, group: str, next_offsets: dict[tuple[str, int], int]) -> None:
        """Set the group's committed offsets (the next offset to read, Kafka's convention)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not next_offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(next_offsets.items())])
        self.admin.alter_consumer_group_offsets([request])[group].result()


def average_record_bytes(bootstrap: str, latest: dict[tuple[str, int], int],
                         earliest: dict[tuple[str, int], int], per_partition: int = 20,
                         max_partitions: int = 16, timeout_s: float = 5.0) -> float | None:
    """The mean key+value size of the newest records of a few partitions, or None when
    they are empty. Spark's Kafka source limits a micro-batch by record count only, so
    buffer.size.bytes is turned into a record count with this sample."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    tps = [tp for tp in sorted(latest) if latest[tp] > earliest.get(tp, 0)][:max_partitions]
    if not tps:
        return None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "floeline-sampler",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         # The end of a partition shows after an empty fetch: do not let
                         # the broker hold that fetch for its default 500 ms.
                         "fetch.wait.max.ms": 10})
    try:
        consumer.assign([TopicPartition(t, p, max(earliest.get((t, p), 0), latest[(t, p)] - per_partition))
                         for t, p in tps])
        sizes, finished, deadline = [], 0, time.time() + timeout_s
        while finished < len(tps) and time.time() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                finished += message.error().code() == KafkaError._PARTITION_EOF
                continue
            sizes.append(len(message.value() or b"") + len(message.key() or b""))
    finally:
        consumer.close()
    return sum(sizes) / len(sizes) if sizes else None


def starting_offsets_json(positions: dict[tuple[str, int], int]) -> str:
    """Spark's `startingOffsets` JSON: {"topic": {"0": next_offset, ...}}; -2 = earliest."""
    spec: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        spec.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(spec)


def produce(bootstrap: str, topic: str, records, partition: int | None = None) -> int:
    """Send records to `topic` and wait for every delivery. Each record is a value
    (bytes, str, a dict/list encoded as JSON, or None for a tombstone) or a dict with
    `value` and optional `key`, `headers` ([(k, v), ...]), `partition`, `timestamp`
    (epoch ms). Used by the demo, tests and benchmarks; returns the count sent."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
                         "message.max.bytes": 20971520,
                         # Delivery failures surface through on_delivery below; librdkafka's
                         # own reconnect chatter after a broker stops would only be noise.
                         "log_level": 2})
    failures, sent = [], 0

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    for record in records:
        if not (isinstance(record, dict) and "value" in record and set(record) <= {
                "value", "key", "headers", "partition", "timestamp"}):
            record = {"value": record}
        value = record["value"]
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        kwargs = {"value": value, "on_delivery": on_delivery}
        for name in ("key", "headers", "timestamp"):
            if record.get(name) is not None:
                kwargs[name] = record[name]
        part = record.get("partition", partition)
        if part is not None:
            kwargs["partition"] = part
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    producer.flush(60)
    if failures:
        raise ServiceUnavailable(f"{len(failures)} of {sent} records to {topic} failed: {failures[0]}")
    return sent
