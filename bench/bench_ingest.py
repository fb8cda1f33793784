"""floeline's ingest benchmark (`make bench`), measured against baselines in the same run.

1. Produces N JSON records (~200 bytes, 4 partitions) to the local broker.
2. Reads them three ways, in one Spark session, after a warm-up run of each on a small
   topic; two rounds alternate bare and floeline and the best time of each counts:
   - raw:      Spark's Kafka source, count only (the ceiling);
   - bare:     a hand-written Spark job: Kafka -> from_json(hand-written schema) -> Delta
               append, no metadata, same micro-batch size as floeline, Spark's defaults;
   - bare, tuned: the same job with floeline's Kafka source options (no fetch wait,
               5,000 records a poll; see sources/kafka.py), reported for reference, not in the ratio;
   - same table: a hand-written job with floeline's Kafka source options writing the
               table floeline writes (its column types, RECORD_METADATA as JSON text,
               or as a VARIANT with --variant-storage variant), exactly once through
               foreachBatch and Delta's idempotent writes (txnAppId/txnVersion): issue 26
               goal 4 asks floeline >= 1.0x this job;
   - floeline: the connector end to end (default pipe, full RECORD_METADATA, exactly-once
               offsets), --until-caught-up.
3. Latency: a producer process at a steady rate (default 5,000 records/s, one client,
   linger.ms=5) while the connector runs with buffer.flush.time=1, then =0 (back-to-back
   micro-batches, issue 26 goal 3); end-to-end latency = commit time - CreateTime.
   --latency-only skips 1 and 2.

Last line: floeline_rows_per_s=N bare_rows_per_s=N raw_read_rows_per_s=N ratio_vs_bare=R
ratio_vs_same_table=R
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

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.sources.kafka import SPARK_SOURCE_OPTIONS, produce  # noqa: E402
from floeline.spark import get_spark  # noqa: E402
from steady_producer import SteadyProducer  # noqa: E402

PARTITIONS = 4
# linger.ms of the latency runs' producer: the client's default (librdkafka's and Kafka's).
LATENCY_LINGER_MS = 5
BARE_SCHEMA = ("order_id BIGINT, customer_id BIGINT, customer_name STRING, email STRING, "
               "order_total DOUBLE, currency STRING, is_paid BOOLEAN, items INT, "
               "country STRING, created_at STRING")


def record(i: int) -> dict:
    return {"order_id": i, "customer_id": i % 50000, "customer_name": f"customer-{i % 977}",
            "email": f"user{i % 50000}@example.com", "order_total": round(i % 10000 / 7, 2),
            "currency": "USD", "is_paid": i % 3 == 0, "items": i % 9 + 1,
            "country": ("NO", "DE", "FR", "US")[i % 4], "created_at": "2026-11-21T10:00:00Z"}


def produce_records(bootstrap: str, topic: str, count: int) -> float:
    started = time.time()
    chunk = 100_000
    for start in range(0, count, chunk):
        produce(bootstrap, topic, (json.dumps(record(i)).encode()
                                   for i in range(start, min(count, start + chunk))))
    return time.time() - started


def timed(fn) -> float:
    started = time.time()
    fn()
    return time.time() - started


def raw_read(spark, bootstrap, topic) -> int:
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load().count())


def bare_job(spark, bootstrap, topic, out_dir, max_per_trigger, source_options=None) -> None:
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .options(**(source_options or {}))
              .option("maxOffsetsPerTrigger", str(max_per_trigger)).load())
    parsed = stream.select(F.from_json(F.col("value").cast("string"), BARE_SCHEMA).alias("r")).select("r.*")
    query = (parsed.writeStream.format("delta").outputMode("append")
             .option("checkpointLocation", os.path.join(out_dir, "bare_ckpt"))
             .trigger(availableNow=True).start(os.path.join(out_dir, "bare_table")))
    query.awaitTermination()


# The table floeline writes for these records: the value's fields as NUMBER (decimal),
# FLOAT, BOOLEAN and VARCHAR columns, upper-cased, and RECORD_METADATA.
SAME_TABLE_SCHEMA = ("order_id DECIMAL(38,0), customer_id DECIMAL(38,0), customer_name STRING, "
                     "email STRING, order_total DOUBLE, currency STRING, is_paid BOOLEAN, "
                     "items DECIMAL(38,0), country STRING, created_at STRING")


# floeline.variant.storage of the floeline runs (--variant-storage); the same-table job
# writes RECORD_METADATA in the same form: JSON text (the default) or Delta VARIANT.
STORAGE = {"form": "json"}


def same_table_frame(batch, batch_id):
    """A Kafka batch as the rows of floeline's table for these records."""
    pushed = int(time.time() * 1000)
    columns = [f"j.{name} AS {name.upper()}" for name in
               (field.split()[0] for field in SAME_TABLE_SCHEMA.split(", "))]
    fields = ("named_struct('topic', topic, 'partition', partition, 'offset', offset, "
              f"'CreateTime', unix_millis(timestamp), 'SnowflakeConnectorPushTime', {pushed}L, "
              "'key', CAST(key AS STRING))")
    # JSON text straight from the struct (to_json of a VARIANT costs ten times as much)
    metadata = f"to_json({fields})" if STORAGE["form"] == "json" else f"to_variant_object({fields})"
    return batch.selectExpr(
        f"from_json(CAST(value AS STRING), '{SAME_TABLE_SCHEMA}') AS j",
        f"{metadata} AS RECORD_METADATA").selectExpr("RECORD_METADATA", *columns)


def same_table_job(spark, bootstrap, topic, out_dir, max_per_trigger) -> None:
    """The hand-written job of issue 26 goal 4: floeline's Kafka source options, and the
    same table floeline writes (its columns and types, RECORD_METADATA in floeline's
    storage form with the record's topic, partition, offset, CreateTime, push time and key), exactly once
    the way Delta offers a hand-written stream: foreachBatch with Delta's idempotent
    writes (txnAppId, txnVersion = the batch id) in the commit."""
    app_id = f"same_table_{topic}"

    def write(batch, batch_id):
        (same_table_frame(batch, batch_id).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id)
         .save(os.path.join(out_dir, "same_table")))

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .options(**SPARK_SOURCE_OPTIONS)
              .option("maxOffsetsPerTrigger", str(max_per_trigger)).load())
    query = (stream.writeStream.foreachBatch(write)
             .option("checkpointLocation", os.path.join(out_dir, "same_table_ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def floeline_job(spark, bootstrap, topic, out_dir, count_records, flush_s=1) -> Connector:
    config = config_from_dict({
        "name": f"bench_{topic}_{random.randint(0, 10**6)}", "topics": topic, "bootstrap.servers": bootstrap,
        "floeline.warehouse": os.path.join(out_dir, "warehouse"), "floeline.variant.storage": STORAGE["form"],
        "buffer.count.records": str(count_records), "buffer.flush.time": str(flush_s)})
    connector = Connector(config, spark, out=sys.stderr)
    connector.run(until_caught_up=True)
    return connector


def produce_steadily(bootstrap: str, topic: str, rate: int, seconds: int) -> int:
    """`rate` records/s for `seconds` from a producer process of its own with one client
    (steady_producer.py: a producer thread in this process shared the driver's Python,
    and a new client every tick connected before it sent); returns the records sent."""
    producer = SteadyProducer(bootstrap, [topic], rate, record, linger_ms=LATENCY_LINGER_MS)
    producer.start()
    time.sleep(seconds)
    producer.stop()
    return producer.sent


def latency_run(spark, bootstrap, out_dir, rate: int, seconds: int,
                flush_s: int) -> tuple[list[int], list[int]]:
    """floeline's per-batch latency p50s and maxima (ms) at `rate` records/s."""
    topic = f"bench_latency_{flush_s}_{int(time.time())}"
    devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
    config = config_from_dict({
        "name": f"bench_{topic}", "topics": topic, "bootstrap.servers": bootstrap,
        "floeline.warehouse": os.path.join(out_dir, "warehouse"), "floeline.variant.storage": STORAGE["form"],
        "buffer.flush.time": str(flush_s)})
    connector = Connector(config, spark, out=sys.stderr)
    runner = threading.Thread(target=connector.run, daemon=True)
    # Warm the table up (created on first record) before the steady phase.
    produce(bootstrap, topic, [json.dumps(record(0))])
    runner.start()
    while not connector.reports:
        time.sleep(0.2)
    produce_steadily(bootstrap, topic, rate, seconds)
    time.sleep(4)
    connector.stop()
    runner.join(60)
    steady = [r for r in connector.reports[1:] if r.latency_p50_ms is not None and r.records_read]
    return [r.latency_p50_ms for r in steady], [r.latency_max_ms for r in steady]


def same_table_latency_run(spark, bootstrap, out_dir, rate: int, seconds: int,
                           flush_s: int) -> tuple[list[int], list[int]]:
    """The same-run baseline of latency_run: the hand-written job of same_table_job as a
    stream with the same trigger; its latency measured as floeline measures its own
    (commit time - CreateTime, per batch)."""
    from pyspark.sql import functions as F

    topic = f"bench_latency_same_{flush_s}_{int(time.time())}"
    devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
    produce(bootstrap, topic, [json.dumps(record(0))])
    table, p50s, maxes = os.path.join(out_dir, f"same_latency_{flush_s}"), [], []

    def write(batch, batch_id):
        from pyspark.sql import Observation

        observed = Observation(f"same-latency-{flush_s}-{batch_id}")
        same_table_frame(batch.observe(
            observed, F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("mid"),
            F.min(F.unix_millis("timestamp")).alias("first")), batch_id).write.format("delta") \
            .mode("append").option("txnAppId", topic).option("txnVersion", batch_id).save(table)
        now = int(time.time() * 1000)
        if batch_id > 0 and observed.get["mid"] is not None:
            p50s.append(now - observed.get["mid"])
            maxes.append(now - observed.get["first"])

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .options(**SPARK_SOURCE_OPTIONS).load())
    query = (stream.writeStream.foreachBatch(write)
             .option("checkpointLocation", table + "_ckpt")
             .trigger(processingTime=f"{flush_s} seconds").start())
    while not p50s and query.lastProgress is None:
        time.sleep(0.2)
    produce_steadily(bootstrap, topic, rate, seconds)
    time.sleep(4)
    query.stop()
    return p50s, maxes


def warm_up(spark, bootstrap: str, out_dir: str, args, warm: str) -> None:
    """Every pipeline first runs on a small topic, so JIT compilation is not charged to
    whichever pipeline happens to run first."""
    devkafka.create_topic(bootstrap, warm, partitions=PARTITIONS)
    produce_records(bootstrap, warm, args.warmup)
    raw_read(spark, bootstrap, warm)
    bare_job(spark, bootstrap, warm, os.path.join(out_dir, "warm"), args.count_records * PARTITIONS)
    same_table_job(spark, bootstrap, warm, os.path.join(out_dir, "warm"), args.count_records * PARTITIONS)
    floeline_job(spark, bootstrap, warm, os.path.join(out_dir, "warm"), args.count_records)


def throughput_rounds(spark, bootstrap: str, out_dir: str, args) -> str:
    """Goal 4's rounds: raw, bare, bare tuned, same table and floeline; returns the summary line."""
    topic = f"bench_{int(time.time())}_{random.randint(0, 999)}"
    devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
    produced_s = produce_records(bootstrap, topic, args.records)
    print(f"produced {args.records} records to {topic} ({PARTITIONS} partitions) in {produced_s:.1f}s")

    warm_up(spark, bootstrap, out_dir, args, f"{topic}_warmup")

    # Measured: rounds alternate bare and floeline; the best time of each counts
    # (this machine is shared and noisy).
    raw_times, bare_times, tuned_times, same_times, floe_times, reports = [], [], [], [], [], None
    for round_no in range(args.rounds):
        round_dir = os.path.join(out_dir, f"round{round_no}")
        raw_count = [0]
        raw_times.append(timed(lambda: raw_count.__setitem__(0, raw_read(spark, bootstrap, topic))))
        assert raw_count[0] == args.records, raw_count
        bare_times.append(timed(lambda: bare_job(spark, bootstrap, topic, round_dir,
                                                 args.count_records * PARTITIONS)))
        bare_rows = spark.read.format("delta").load(os.path.join(round_dir, "bare_table")).count()
        tuned_dir = os.path.join(round_dir, "tuned")
        tuned_times.append(timed(lambda: bare_job(spark, bootstrap, topic, tuned_dir,
                                                  args.count_records * PARTITIONS,
                                                  SPARK_SOURCE_OPTIONS)))
        same_dir = os.path.join(round_dir, "same")
        same_times.append(timed(lambda: same_table_job(spark, bootstrap, topic, same_dir,
                                                       args.count_records * PARTITIONS)))
        same_rows = spark.read.format("delta").load(os.path.join(same_dir, "same_table")).count()
        connector = [None]
        floe_times.append(timed(lambda: connector.__setitem__(
            0, floeline_job(spark, bootstrap, topic, round_dir, args.count_records))))
        floe_rows = spark.read.format("delta").load(connector[0].pipeline.table_ref(topic).path).count()
        assert bare_rows == same_rows == floe_rows == args.records, (bare_rows, same_rows, floe_rows)
        same_columns, floe_columns = (
            sorted((f.name, f.dataType.simpleString()) for f in spark.read.format("delta").load(path).schema)
            for path in (os.path.join(same_dir, "same_table"), connector[0].pipeline.table_ref(topic).path))
        assert same_columns == floe_columns, (same_columns, floe_columns)
        reports = connector[0].reports
        print(f"round {round_no + 1}: raw {raw_times[-1]:.1f}s  bare {bare_times[-1]:.1f}s  "
              f"bare tuned {tuned_times[-1]:.1f}s  same table {same_times[-1]:.1f}s  floeline {floe_times[-1]:.1f}s ({len(reports)} micro-batches)")

    raw_rate, bare_rate, floe_rate = (args.records / min(raw_times), args.records / min(bare_times),
                                      args.records / min(floe_times))
    print(f"raw read:  best {min(raw_times):.1f}s  {raw_rate:,.0f} rows/s")
    print(f"bare job:  best {min(bare_times):.1f}s  {bare_rate:,.0f} rows/s")
    print(f"floeline:  best {min(floe_times):.1f}s  {floe_rate:,.0f} rows/s")
    tuned_rate = args.records / min(tuned_times)
    print(f"bare job with floeline's Kafka source options {SPARK_SOURCE_OPTIONS}: best "
          f"{min(tuned_times):.1f}s  {tuned_rate:,.0f} rows/s; floeline / that = "
          f"{floe_rate / tuned_rate:.2f}")

    same_rate = args.records / min(same_times)
    print(f"hand-written job writing floeline's table (RECORD_METADATA, Delta's idempotent "
          f"writes): best {min(same_times):.1f}s  {same_rate:,.0f} rows/s; floeline / that = "
          f"{floe_rate / same_rate:.2f}")
    return (f"floeline_rows_per_s={floe_rate:.0f} bare_rows_per_s={bare_rate:.0f} "
            f"raw_read_rows_per_s={raw_rate:.0f} ratio_vs_bare={floe_rate / bare_rate:.2f} "
            f"ratio_vs_same_table={floe_rate / same_rate:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--count-records", type=int, default=100_000,
                        help="floeline buffer.count.records (per partition); bare uses the same batch size")
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--latency-seconds", type=int, default=30)
    parser.add_argument("--flush-times", default="1,0",
                        help="buffer.flush.time values of the latency runs (0: back-to-back micro-batches)")
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput rounds")
    parser.add_argument("--warmup", type=int, default=50_000, help="records in the warm-up topic")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant-storage", choices=("json", "variant"), default="json",
                        help="floeline.variant.storage of floeline's table (and the same-table job's)")
    args = parser.parse_args()
    STORAGE["form"] = args.variant_storage

    bootstrap = devkafka.start()
    spark = get_spark()
    out_dir = tempfile.mkdtemp(prefix="floeline-bench-")
    # The run's tables are a few hundred MB: removed at exit (kept runs filled the disk).
    atexit.register(shutil.rmtree, out_dir, True)
    if args.latency_only:
        summary = None
        warm_up(spark, bootstrap, out_dir, args, f"bench_warmup_{int(time.time())}")
    else:
        summary = throughput_rounds(spark, bootstrap, out_dir, args)
    for flush_s in (int(value) for value in args.flush_times.split(",")):
        for name, run in (("same table", same_table_latency_run), ("floeline", latency_run)):
            p50s, maxes = run(spark, bootstrap, out_dir, args.rate, args.latency_seconds, flush_s)
            if p50s:
                print(f"latency at {args.rate} records/s, buffer.flush.time={flush_s}, {name}, "
                      f"{len(p50s)} batches: p50={statistics.median(p50s) / 1000:.2f}s "
                      f"max={max(maxes) / 1000:.2f}s")
    if summary:
        print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
