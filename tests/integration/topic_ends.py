"""Reading a topic to its end: for a topic whose producer has flushed (a connector's DLQ
once its run has returned: dead_letters.py flushes a batch's letters before the table
commit), every record it holds, without the fixed wait for extras of
records_io.consume_all (1.5 s a call) and without a consumer group to join."""

from __future__ import annotations

import time


def consume_to_end(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0):
    """Every record of `topic`, in offset order: waits for `expected` records, then reads
    each partition to its end (its high watermark when the reader gets there; a record
    landing after that is read too if it comes before the other partitions end). Extra
    records already in the topic are always returned, so `len(...) == n` checks that
    nothing more went there."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    records, at_end = [], set()
    deadline = time.time() + timeout_s
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        assert partitions, f"topic {topic} has no partitions"
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while len(records) < expected or len(at_end) < len(partitions):
            assert time.time() < deadline, (
                f"{topic}: {len(records)} of {expected} records, partitions {sorted(at_end)} "
                f"of {partitions} read to their end in {timeout_s} s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                records.append(msg)
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        consumer.close()
    return sorted(records, key=lambda m: m.offset())  # as records_io.consume_all
