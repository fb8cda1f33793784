"""A plain Python Kafka -> Delta writer: the Arrow-native peer floeline is measured
against in bench_cold.py (issue 14). No Spark: confluent-kafka reads the topic,
pyarrow's JSON reader turns each batch into typed columns, deltalake (delta-rs)
appends it with the batch's end offsets as txn actions (app id per partition, version
= next offset), so a restart resumes from the table as floeline does.

    python bench/peer_writer.py BOOTSTRAP TOPIC TABLE_DIR [--batch 100000]

Runs until the topic's end offsets (read at start) are committed, then exits.
Dependencies: bench/requirements.txt (deltalake), not floeline's."""

from __future__ import annotations

import argparse
import io
import sys
import time

import pyarrow as pa
import pyarrow.json as pa_json
from confluent_kafka import Consumer, TopicPartition
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

SCHEMA = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int64()), ("customer_name", pa.string()),
                    ("email", pa.string()), ("order_total", pa.float64()), ("currency", pa.string()),
                    ("is_paid", pa.bool_()), ("items", pa.int32()), ("country", pa.string()),
                    ("created_at", pa.string())])


def committed_offsets(table_dir: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The next offset per partition, from the table's txn actions (0 without a table)."""
    try:
        table = DeltaTable(table_dir)
    except Exception:  # no table yet
        return {p: 0 for p in partitions}
    return {p: max(table.transaction_version(f"{topic}-{p}") or 0, 0) for p in partitions}


def run(bootstrap: str, topic: str, table_dir: str, batch_size: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peer-{topic}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "queued.max.messages.kbytes": 262144})
    partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    start = committed_offsets(table_dir, topic, partitions)
    consumer.assign([TopicPartition(topic, p, start[p]) for p in partitions])
    position = dict(start)
    written = 0
    first_commit_s = None
    launched = time.time()
    while any(position[p] < ends[p] for p in partitions):
        values: list[bytes] = []
        while len(values) < batch_size and any(position[p] < ends[p] for p in partitions):
            for message in consumer.consume(num_messages=min(10000, batch_size - len(values)), timeout=1.0):
                if message.error():
                    raise RuntimeError(f"Kafka: {message.error()}")
                if message.offset() < ends[message.partition()]:
                    values.append(message.value())
                position[message.partition()] = message.offset() + 1
        if not values:
            continue
        table = pa_json.read_json(io.BytesIO(b"\n".join(values)),
                                  parse_options=pa_json.ParseOptions(explicit_schema=SCHEMA))
        txns = [Transaction(app_id=f"{topic}-{p}", version=position[p]) for p in partitions]
        write_deltalake(table_dir, table, mode="append",
                        commit_properties=CommitProperties(app_transactions=txns))
        written += table.num_rows
        if first_commit_s is None:
            first_commit_s = time.time() - launched
            print(f"first commit after {first_commit_s:.2f} s", file=sys.stderr, flush=True)
    consumer.close()
    print(f"peer wrote {written} rows", flush=True)
    return written


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("table_dir")
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args()
    run(args.bootstrap, args.topic, args.table_dir, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
