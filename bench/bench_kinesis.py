"""floeline's Kinesis benchmark, measured against a baseline in the same run.

1. Puts N JSON records (~236 bytes, the Kafka benchmark's records) into a 4-shard
   stream of the local Kinesis (kinesis-local), KPL-aggregated (--per-aggregate user
   records per Kinesis record). Aggregation is how producers reach volume on Kinesis, and
   the only way to get 200,000 records into kinesis-local in reasonable time: its
   PutRecords is quadratic in a shard's size (measured: a 500-record PutRecords takes
   6 s once a shard holds 5,000 records) and single PutRecord calls run ~150/s.
   With --plain N, a second, smaller stream of N plain records is measured too (small N
   measures mostly the connector's fixed start-up cost).
2. Reads the stream two ways, after a warm-up of each on a small stream; rounds
   alternate and the best time of each counts:
   - raw:      a boto3 GetRecords loop, one thread per shard, from TRIM_HORIZON until
               caught up, de-aggregating KPL records (counts user records, writes nothing);
   - floeline: the Kinesis connector end to end (`--until-caught-up`: default pipe, full
               RECORD_METADATA, positions in the table, the DynamoDB lease table), with
               buffer.count.records=25000 per shard (the Kafka benchmark batches 100,000 per
               partition; the connector's default 10,000 means more, smaller batches).
3. Latency: a producer at a steady rate (default 1,000 records/s, aggregated 50 per
   Kinesis record) while the connector runs with buffer.flush.time=1; latency = commit
   time - ApproximateArrivalTimestamp.

Last line: kinesis_rows_per_s=N raw_rows_per_s=N ratio=R
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import boto3  # noqa: E402

from floeline.dev import aws as devaws  # noqa: E402
from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.sources.kinesis.kpl import aggregate, deaggregate  # noqa: E402
from floeline.spark import get_spark  # noqa: E402

SHARDS = 4
CREDENTIALS = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"}


def record(i: int) -> dict:
    return {"order_id": i, "customer_id": i % 50000, "customer_name": f"customer-{i % 977}",
            "email": f"user{i % 50000}@example.com", "order_total": round(i % 10000 / 7, 2),
            "currency": "USD", "is_paid": i % 3 == 0, "items": i % 9 + 1,
            "country": ("NO", "DE", "FR", "US")[i % 4], "created_at": "2026-11-21T10:00:00Z"}


def kinesis_client(endpoint: str):
    return boto3.client("kinesis", endpoint_url=endpoint, region_name=devaws.REGION, **CREDENTIALS)


def create_stream(kinesis, stream: str) -> None:
    kinesis.create_stream(StreamName=stream, ShardCount=SHARDS)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.5, "MaxAttempts": 60})


def delete_bench_streams(kinesis) -> None:
    """Streams an earlier run left (kinesis-local allows 50 shards in all)."""
    names = [n for n in kinesis.list_streams()["StreamNames"] if n.startswith("bench-")]
    for name in names:
        kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
    deadline = time.time() + 30
    while names and time.time() < deadline and any(
            n.startswith("bench-") for n in kinesis.list_streams()["StreamNames"]):
        time.sleep(0.2)


def put_stream(kinesis, stream: str, count: int, per_aggregate: int) -> float:
    """Put `count` records, `per_aggregate` user records per Kinesis record (1: plain)."""
    started = time.time()
    entries = []
    for start in range(0, count, per_aggregate):
        ids = range(start, min(count, start + per_aggregate))
        key = f"pk{start // per_aggregate}"
        if per_aggregate == 1:
            data = json.dumps(record(start)).encode()
        else:
            data = aggregate([(f"pk{i}", json.dumps(record(i)).encode()) for i in ids])
        entries.append({"Data": data, "PartitionKey": key})
    for start in range(0, len(entries), 100):
        chunk = entries[start:start + 100]
        while chunk:
            result = kinesis.put_records(StreamName=stream, Records=chunk)
            chunk = [e for e, r in zip(chunk, result["Records"]) if r.get("ErrorCode")]
    return time.time() - started


def raw_read(endpoint: str, stream: str) -> int:
    """User records in the stream, read with one thread per shard (the ceiling)."""
    kinesis = kinesis_client(endpoint)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]

    def read_shard(shard_id: str) -> int:
        client = kinesis_client(endpoint)
        iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard_id,
                                             ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        count = 0
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=10000)
            for r in page["Records"]:
                users = deaggregate(r["Data"])
                count += 1 if users is None else len(users)
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
        return count

    with ThreadPoolExecutor(len(shards)) as pool:
        return sum(pool.map(read_shard, [s["ShardId"] for s in shards]))


def connector_config(endpoints: dict, stream: str, out_dir: str, **extra) -> dict:
    name = f"bench_{stream}_{random.randint(0, 10 ** 6)}".replace("-", "_")
    settings = {
        "name": name, "floeline.source": "kinesis", "kinesis.stream.name": stream,
        "kinesis.application.name": name, "aws.region": devaws.REGION,
        "aws.access.key.id": CREDENTIALS["aws_access_key_id"],
        "aws.secret.access.key": CREDENTIALS["aws_secret_access_key"],
        "kinesis.endpoint": endpoints["kinesis"], "dynamodb.endpoint": endpoints["dynamodb"],
        "floeline.warehouse": os.path.join(out_dir, "warehouse"), "buffer.flush.time": "1"}
    settings.update(extra)
    return config_from_dict(settings)


def floeline_job(spark, endpoints, stream, out_dir, count_records: int) -> Connector:
    config = connector_config(endpoints, stream, out_dir, **{"buffer.count.records": str(count_records)})
    connector = Connector(config, spark, out=sys.stderr)
    connector.run(until_caught_up=True)
    return connector


def timed(fn):
    started = time.time()
    result = fn()
    return time.time() - started, result


def measure(spark, endpoints, stream: str, count: int, out_dir: str, rounds: int,
            count_records: int) -> tuple[float, float]:
    """Best (raw, floeline) seconds over `rounds` alternating rounds."""
    raw_times, floe_times = [], []
    for round_no in range(rounds):
        seconds, seen = timed(lambda: raw_read(endpoints["kinesis"], stream))
        assert seen == count, (seen, count)
        raw_times.append(seconds)
        round_dir = os.path.join(out_dir, f"{stream}-{round_no}")
        seconds, connector = timed(lambda: floeline_job(spark, endpoints, stream, round_dir, count_records))
        rows = spark.read.format("delta").load(connector.pipeline.table_ref(stream).path).count()
        assert rows == count, (rows, count)
        floe_times.append(seconds)
        print(f"{stream} round {round_no + 1}: raw {raw_times[-1]:.1f}s  floeline {seconds:.1f}s "
              f"({len(connector.reports)} micro-batches)", flush=True)
    return min(raw_times), min(floe_times)


def latency_run(spark, endpoints, out_dir, rate: int, seconds: int, per_aggregate: int = 50):
    kinesis = kinesis_client(endpoints["kinesis"])
    stream = f"bench-latency-{int(time.time())}"
    create_stream(kinesis, stream)
    config = connector_config(endpoints, stream, out_dir)
    connector = Connector(config, spark, out=sys.stderr)
    kinesis.put_record(StreamName=stream, PartitionKey="warm", Data=json.dumps(record(0)).encode())
    runner = threading.Thread(target=connector.run, daemon=True)
    runner.start()
    while not connector.reports:
        time.sleep(0.2)
    interval = per_aggregate / rate
    stop, sent, tick = time.time() + seconds, 0, time.time()
    while time.time() < stop:
        users = [(f"pk{sent + i}", json.dumps(record(sent + i)).encode()) for i in range(per_aggregate)]
        kinesis.put_record(StreamName=stream, PartitionKey=f"agg{sent}", Data=aggregate(users))
        sent += per_aggregate
        tick += interval
        time.sleep(max(0.0, tick - time.time()))
    time.sleep(4)
    connector.stop()
    runner.join(60)
    steady = [r for r in connector.reports[1:] if r.latency_p50_ms is not None and r.records_read]
    return sent, [r.latency_p50_ms for r in steady], [r.latency_max_ms for r in steady]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-aggregate", type=int, default=200)
    parser.add_argument("--plain", type=int, default=0, help="also measure N plain records")
    parser.add_argument("--count-records", type=int, default=25_000,
                        help="floeline buffer.count.records (per shard and batch)")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    state = os.path.join(os.path.dirname(__file__), "out", "aws")
    endpoints = devaws.start(state)
    kinesis = kinesis_client(endpoints["kinesis"])
    delete_bench_streams(kinesis)
    tag = f"{int(time.time())}-{random.randint(0, 999)}"
    out_dir = tempfile.mkdtemp(prefix="floeline-bench-kinesis-")
    stream, warm = f"bench-{tag}", f"bench-warm-{tag}"
    for name, count in ((stream, args.records), (warm, args.warmup)):
        create_stream(kinesis, name)
        seconds = put_stream(kinesis, name, count, args.per_aggregate)
        print(f"put {count} records into {name} ({SHARDS} shards, {args.per_aggregate} per "
              f"aggregated record) in {seconds:.1f}s", flush=True)
    spark = get_spark()
    # Warm-up: each reader once on a small stream, so JIT compilation and Spark's
    # first-query costs are not charged to whichever runs first.
    raw_read(endpoints["kinesis"], warm)
    floeline_job(spark, endpoints, warm, os.path.join(out_dir, "warm"), args.count_records)

    raw_s, floe_s = measure(spark, endpoints, stream, args.records, out_dir, args.rounds,
                            args.count_records)
    raw_rate, floe_rate = args.records / raw_s, args.records / floe_s
    print(f"raw GetRecords loop: best {raw_s:.1f}s  {raw_rate:,.0f} rows/s")
    print(f"floeline:            best {floe_s:.1f}s  {floe_rate:,.0f} rows/s  ratio {floe_rate / raw_rate:.2f}")
    if args.plain:
        plain = f"bench-plain-{tag}"
        create_stream(kinesis, plain)
        seconds = put_stream(kinesis, plain, args.plain, 1)
        print(f"put {args.plain} plain records into {plain} in {seconds:.1f}s", flush=True)
        raw_p, floe_p = measure(spark, endpoints, plain, args.plain, out_dir, args.rounds,
                                args.count_records)
        print(f"plain records: raw {args.plain / raw_p:,.0f} rows/s  floeline "
              f"{args.plain / floe_p:,.0f} rows/s  ratio {raw_p / floe_p:.2f}")

    sent, p50s, maxes = latency_run(spark, endpoints, out_dir, args.rate, args.latency_seconds)
    if p50s:
        print(f"latency at {args.rate} records/s ({sent} records), buffer.flush.time=1, "
              f"{len(p50s)} batches: p50={statistics.median(p50s) / 1000:.2f}s "
              f"max={max(maxes) / 1000:.2f}s")
    print(f"kinesis_rows_per_s={floe_rate:.0f} raw_rows_per_s={raw_rate:.0f} "
          f"ratio={floe_rate / raw_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
