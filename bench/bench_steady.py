"""Steady state with many tables (issue 26 goal 2): one connector writing --tables
tables, fed at --rate records/s in all for --seconds, with buffer.flush.time=10. Does
it keep up (the lag stays under 30 s)?

1. Creates --tables topics x --partitions partitions on the local broker and a warm-up
   topic; in one Spark session a warm-up job reads the warm-up topic (JIT, jars), then a
   warm-up connector writes --warm-tables tables over four batches (JIT of the shared
   write and the commits; 0: none, the measured connector's first batches are cold).
2. Puts one record in every topic, starts the measured connector (`topics=` lists them
   all, each to its own table) and waits for its first batch, which creates the tables:
   its cost is printed, not counted as steady.
3. A producer process then writes --rate records/s spread evenly over the topics (the
   records of bench_ingest.py) for --seconds while the connector runs.
4. Per batch: when it ended, its records, tables, duration, the cost per table commit
   (duration / tables written), the lag in seconds (commit time - the oldest record's
   timestamp: the batch's latency max) and in records (`behind`). The measured topics
   keep the broker's append time as the records' timestamp (message.timestamp.type=
   LogAppendTime), so the lag is the connector's, counted from when a record could be
   read; the producer prints its own delivery times (send to the broker's ack) apart.

Same-run baseline: the wall clock. The connector keeps up when every steady batch's lag
stays under 30 s and the records it wrote equal the records produced.

Last line: tables=N rate=N seconds=N batches=N steady_lag_max_s=S steady_lag_p50_s=S
per_commit_s=S produced=N written=N kept_up=yes|no

    .venv/bin/python bench/bench_steady.py [--tables 100] [--rate 5000] [--seconds 600] [--warm-tables 10]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_ingest import floeline_job, produce_records, record  # noqa: E402
from steady_producer import SteadyProducer  # noqa: E402

from floeline.config import config_from_dict  # noqa: E402
from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.spark import get_spark  # noqa: E402

LAG_GOAL_S = 30
# The measured topics' records carry the broker's append time: the lag counts from when a
# record could be read, not from when the producer made it (a producer's queue that the
# broker acknowledged 17 s late at the start was once the whole of a lag over the goal).
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def create_tables_record(bootstrap: str, topics: list[str]) -> None:
    """One record in every topic: the measured connector's first batch creates the tables."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in topics:
        producer.produce(topic, json.dumps(record(0)).encode())
    producer.flush(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    parser.add_argument("--rate", type=int, default=5000, help="records/s over all topics")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--flush-time", type=int, default=10, help="buffer.flush.time")
    parser.add_argument("--warm-tables", type=int, default=10,
                        help="tables the warm-up connector writes (0: no warm-up connector)")
    parser.add_argument("--kafka-reader", choices=("spark", "grouped"), default="grouped",
                        help="floeline.kafka.reader of the measured connector (default: floeline's)")
    args = parser.parse_args()

    bootstrap = devkafka.start()
    stamp = f"{int(time.time())}_{random.randint(0, 999)}"
    topics = [f"steady_{stamp}_{i:04d}" for i in range(args.tables)]
    for topic in topics:
        devkafka.create_topic(bootstrap, topic, partitions=args.partitions, config=APPEND_TIME)
    warm = f"steady_{stamp}_warmup"
    devkafka.create_topic(bootstrap, warm, partitions=4)
    produce_records(bootstrap, warm, 20_000)
    out_dir = tempfile.mkdtemp(prefix="floeline-steady-")
    # The run's tables are a few hundred MB: removed at exit (kept runs filled the disk).
    atexit.register(shutil.rmtree, out_dir, True)
    spark = get_spark()
    floeline_job(spark, bootstrap, warm, os.path.join(out_dir, "warm"), 50_000)
    if args.warm_tables:
        warm_topics = [f"steady_{stamp}_warm_{i}" for i in range(args.warm_tables)]
        for topic in warm_topics:  # 100 records a partition a batch: four batches
            devkafka.create_topic(bootstrap, topic, partitions=args.partitions)
            produce_records(bootstrap, topic, 400 * args.partitions)
        Connector(config_from_dict({
            "name": f"steady_warm_{stamp}", "topics": ",".join(warm_topics), "bootstrap.servers": bootstrap,
            "floeline.warehouse": os.path.join(out_dir, "warm_warehouse"), "buffer.count.records": "100",
            "floeline.kafka.reader": args.kafka_reader}), spark, out=sys.stderr).run(until_caught_up=True)

    producer = SteadyProducer(bootstrap, topics, args.rate, record)
    create_tables_record(bootstrap, topics)
    config = config_from_dict({
        "name": f"steady_{stamp}", "topics": ",".join(topics), "bootstrap.servers": bootstrap,
        "floeline.warehouse": os.path.join(out_dir, "warehouse"),
        "buffer.flush.time": str(args.flush_time), "floeline.kafka.reader": args.kafka_reader})
    connector = Connector(config, spark, out=sys.stderr)
    runner = threading.Thread(target=connector.run, daemon=True)
    started = time.time()
    runner.start()
    while not connector.reports and runner.is_alive():
        time.sleep(0.2)
    first = connector.reports[0]
    print(f"first batch (creates {len(first.rows_written)} tables): {first.duration_s:.1f} s, "
          f"{time.time() - started:.1f} s after the connector's start", flush=True)

    producer.start()
    steady_from = len(connector.reports)
    feed_started = time.time()
    printed = steady_from
    while time.time() - feed_started < args.seconds and runner.is_alive():
        time.sleep(1)
        printed = print_batches(connector.reports, printed, feed_started)
    producer.stop(60)
    # Let the connector take what was produced last, then stop it.
    deadline = time.time() + max(60, 3 * args.flush_time)
    while time.time() < deadline and written_rows(connector.reports[steady_from:]) < producer.sent:
        time.sleep(1)
        printed = print_batches(connector.reports, printed, feed_started)
    connector.stop()
    runner.join(120)
    print_batches(connector.reports, printed, feed_started)

    steady = [r for r in connector.reports[steady_from:] if r.records_read]
    lags = [r.latency_max_ms / 1000 for r in steady if r.latency_max_ms is not None]
    p50s = [r.latency_p50_ms / 1000 for r in steady if r.latency_p50_ms is not None]
    per_commit = [r.duration_s / len(r.rows_written) for r in steady if r.rows_written]
    written = written_rows(connector.reports[steady_from:])
    kept_up = bool(lags) and max(lags) < LAG_GOAL_S and written == producer.sent
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"tables={args.tables} rate={args.rate} seconds={args.seconds} batches={len(steady)} "
          f"steady_lag_max_s={max(lags, default=float('nan')):.1f} "
          f"steady_lag_p50_s={statistics.median(p50s) if p50s else float('nan'):.1f} "
          f"per_commit_s={statistics.median(per_commit) if per_commit else float('nan'):.3f} "
          f"produced={producer.sent} written={written} kept_up={'yes' if kept_up else 'no'}")
    return 0


def written_rows(reports) -> int:
    return sum(sum(r.rows_written.values()) for r in reports)


def print_batches(reports, printed: int, since: float) -> int:
    """One line per new batch: the lag curve and the cost per table commit."""
    for r in reports[printed:]:
        tables = len(r.rows_written)
        lag = "-" if r.latency_max_ms is None else f"{r.latency_max_ms / 1000:.1f}"
        per = f"{r.duration_s / tables:.3f}" if tables else "-"
        print(f"t={time.time() - since:6.1f}s batch {r.batch_id}: records={r.records_read} "
              f"tables={tables} took={r.duration_s:.1f}s per_commit={per}s lag={lag}s "
              f"behind={r.behind}", flush=True)
    return len(reports)


if __name__ == "__main__":
    sys.exit(main())
