"""Spark's Kafka source against floeline's Kafka reader (issue 26).

bench/RESULTS.md found that a micro-batch over many topic partitions costs per
partition, not per record: Spark's Kafka source makes a consumer and a generated row
converter for each topic partition. floeline's reader (`floeline.kafka.reader=grouped`,
src/floeline/resources/GroupedKafka.java) reads a batch with one consumer per Spark
task, each assigned several partitions, keeps its consumers between batches and builds
rows without generated code. Both read with the options floeline's KafkaSource gives
them, in one Spark session, alternating (--rounds), each query with new consumers:

- wide, first: 100 topics x 4 partitions, 500 records a partition (200,000), the
  time from the query's start until its batches counted every record (new consumers);
- wide, warm: then 5 times 10 records a partition (4,000), the time from the
  producer's last delivery until the query counted them (consumers kept);
- narrow: 1 topic x 4 partitions, 100,000 records a partition (400,000), first batch.

Each run has new topics, so both readers read the same records. Each batch runs
count(*) and sum(length(value)) over its rows (the read is the cost); the query's
count must end equal to the records produced. Records are bench_ingest.py's ~236-byte
JSON values. Needs `make setup` (it compiles the reader) and starts the dev broker.

    .venv/bin/python bench/bench_kafka_reader.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_ingest import record  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.jvm import KAFKA_READER_CLASS  # noqa: E402
from floeline.sources.kafka import SPARK_SOURCE_OPTIONS  # noqa: E402
from floeline.spark import get_spark  # noqa: E402

READERS = ("spark", "grouped")


def produce(bootstrap: str, topics: list[str], partitions: int, per_partition: int, start: int) -> None:
    """`per_partition` records into each partition of `topics`, all delivered on return."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1000000})
    i = start
    for topic in topics:
        for p in range(partitions):
            for _ in range(per_partition):
                while True:
                    try:
                        producer.produce(topic, json.dumps(record(i)).encode(), partition=p)
                        break
                    except BufferError:
                        producer.poll(0.1)
                i += 1
            producer.poll(0)
    if producer.flush(120) != 0:
        sys.exit("the producer could not deliver every record in 120 s")


def stream(spark, reader: str, bootstrap: str, topics: list[str]):
    """A streaming DataFrame of `topics` read by `reader` with the options floeline's
    KafkaSource gives it (no batch limit here), new consumers of its own."""
    fmt = "kafka" if reader == "spark" else KAFKA_READER_CLASS
    df = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
          .option("includeHeaders", "true").options(**SPARK_SOURCE_OPTIONS)
          .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest"))
    if reader == "grouped":
        df = df.option("tasks", str(2 * spark.sparkContext.defaultParallelism))
    return df.load()


class Counter:
    """Counts the rows of every batch (foreachBatch) so the main thread can wait."""

    def __init__(self):
        self.rows, self.batches = 0, 0
        self.changed = threading.Condition()

    def __call__(self, df, _batch_id):
        row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
        with self.changed:
            self.rows += row["n"]
            self.batches += 1
            self.changed.notify_all()

    def wait_for(self, query, rows: int, timeout: float = 600) -> None:
        """Until the batches counted `rows`; exits when the query failed or timed out."""
        deadline = time.time() + timeout
        with self.changed:
            while self.rows < rows:
                self.changed.wait(1)
                if not query.isActive:
                    raise SystemExit(f"the query stopped: {query.exception()}")
                if time.time() > deadline:
                    raise SystemExit(f"waited {timeout} s for {rows} rows, counted {self.rows}")


def run_case(spark, reader: str, bootstrap: str, case: dict, work: str, warm_rounds: int) -> dict:
    """Read the case's topics from the start with `reader`; then, for the wide case,
    `warm_rounds` times a small load over every partition."""
    counter = Counter()
    started = time.time()
    query = (stream(spark, reader, bootstrap, case["topics"]).writeStream
             .option("checkpointLocation", os.path.join(work, f"ck-{uuid.uuid4()}"))
             .foreachBatch(counter).start())
    try:
        counter.wait_for(query, case["rows"])
        result = {"first_s": time.time() - started, "first_batches": counter.batches, "warm_s": []}
        for _ in range(warm_rounds):
            before = counter.rows
            produce(bootstrap, case["topics"], case["partitions"], case["warm"], 10**9)
            sent = time.time()
            counter.wait_for(query, before + case["warm"] * case["partitions"] * len(case["topics"]))
            result["warm_s"].append(time.time() - sent)
            time.sleep(1)
        expected = case["rows"] + warm_rounds * case["warm"] * case["partitions"] * len(case["topics"])
        time.sleep(1)
        if counter.rows != expected:
            raise SystemExit(f"{reader} counted {counter.rows} rows of {expected}")
        return result
    finally:
        query.stop()


def new_case(bootstrap: str, prefix: str, topics: int, per_partition: int, warm: int) -> dict:
    """`topics` new topics of 4 partitions, `per_partition` records in each partition."""
    case = {"topics": [f"{prefix}-{i}" for i in range(topics)], "partitions": 4, "warm": warm}
    for topic in case["topics"]:
        devkafka.create_topic(bootstrap, topic, partitions=case["partitions"])
    produce(bootstrap, case["topics"], case["partitions"], per_partition, 0)
    case["rows"] = case["partitions"] * per_partition * topics
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--tables", type=int, default=100)
    args = parser.parse_args()
    bootstrap = devkafka.start()
    work = tempfile.mkdtemp(prefix="bench-kafka-reader-")
    run = uuid.uuid4().hex[:6]
    spark = get_spark()
    # Warm-up (JIT, class loading) on both readers, over a topic of its own.
    warm = new_case(bootstrap, f"reader-warm-{run}", 1, 2000, 0)
    for reader in READERS:
        run_case(spark, reader, bootstrap, warm, work, 0)
    results: dict[str, dict[str, list[float]]] = {r: {"wide_first": [], "wide_warm": [], "narrow": []}
                                                  for r in READERS}
    for round_ in range(args.rounds):
        for reader in (READERS if round_ % 2 == 0 else READERS[::-1]):
            # New topics for each run: each reader starts from the same records.
            wide = new_case(bootstrap, f"reader-wide-{run}-{round_}-{reader}", args.tables, 500, 10)
            narrow = new_case(bootstrap, f"reader-narrow-{run}-{round_}-{reader}", 1, 100_000, 0)
            w = run_case(spark, reader, bootstrap, wide, work, args.warm_rounds)
            n = run_case(spark, reader, bootstrap, narrow, work, 0)
            results[reader]["wide_first"].append(w["first_s"])
            results[reader]["wide_warm"] += w["warm_s"]
            results[reader]["narrow"].append(n["first_s"])
            print(f"round {round_} {reader}: wide first {w['first_s']:.2f} s ({w['first_batches']} batches), "
                  f"warm {' '.join(f'{s:.2f}' for s in w['warm_s'])} s; narrow {n['first_s']:.2f} s",
                  flush=True)
    summary = {}
    for reader in READERS:
        r = results[reader]
        summary[f"{reader}_wide_first_s"] = round(min(r["wide_first"]), 2)
        summary[f"{reader}_wide_warm_median_s"] = round(statistics.median(r["wide_warm"]), 2)
        summary[f"{reader}_narrow_s"] = round(min(r["narrow"]), 2)
    print(f"load average {os.getloadavg()}")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
