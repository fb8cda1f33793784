"""COPY INTO against a bare Spark job on the same files, in the same run.

1. Writes N JSON records (the same ~236-byte records as bench_ingest.py) as
   newline-delimited JSON into F gzip files in a local stage directory.
2. Loads them two ways, after a warm-up of each on one file; rounds alternate and the
   best time of each counts:
   - bare:     spark.read.json(dir).write.format("delta") into a new table (schema
               inference over the files, typed columns, nothing else);
   - floeline: COPY INTO a table with one VARIANT column (the seed's Firehose table), with
               the load history, per-file figures and ON_ERROR checks, into a new table
               each round.
3. Latency: the pipe service (`floeline pipes run`'s loop) while a writer drops one
   small file per second into the stage, after one file that warms the path up (its
   latency printed apart); latency = the commit's time - the file's creation time. Twice: an S3 stage on the local AWS with S3 event notifications in
   the pipe's SQS queue (the seed's path; goal p50 <= 3 s), and a directory stage listed
   every 0.2 s.

Last line: `copy_rows_per_s=N bare_rows_per_s=N ratio=R`. Goal: R >= 0.8.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from floeline.spark import get_spark  # noqa: E402
from floeline.sql.script import run_script  # noqa: E402
from floeline.warehouse.catalog import Warehouse  # noqa: E402

from bench_ingest import record  # noqa: E402  (the same records as the Kafka benchmark)


def write_files(directory: str, count: int, files: int) -> None:
    os.makedirs(directory, exist_ok=True)
    per_file = count // files
    for f in range(files):
        lines = "".join(json.dumps(record(f * per_file + i)) + "\n" for i in range(per_file))
        with open(os.path.join(directory, f"part-{f:05d}.json.gz"), "wb") as out:
            out.write(gzip.compress(lines.encode(), compresslevel=6))


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bare(spark, directory: str, out: str) -> None:
    spark.read.json(directory).write.format("delta").save(out)


def copy(spark, warehouse: Warehouse, stage_dir: str, table: str) -> None:
    results = run_script(spark, f"""
        CREATE TABLE {table} (v VARIANT);
        CREATE OR REPLACE STAGE bench_stage URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
        COPY INTO {table} FROM @bench_stage""", warehouse)
    loaded = results[-1][1].collect()
    assert all(r["status"] == "LOADED" for r in loaded), loaded


def latency(spark, warehouse: Warehouse, stage_sql: str, drop, seconds: int, table: str) -> list[float]:
    """Run the pipe service while `drop(name, data)` puts one file of 100 records per
    second into the stage; latency = the commit's report time - the put's return."""
    from floeline.ingest.pipe_service import PipeService

    run_script(spark, f"""
        CREATE TABLE {table} (v VARIANT, f VARCHAR);
        {stage_sql};
        CREATE OR REPLACE PIPE {table}_pipe AUTO_INGEST=TRUE AS
          COPY INTO {table} FROM (SELECT $1, METADATA$FILENAME FROM @{table}_stage)""", warehouse)
    created: dict[str, float] = {}
    committed: dict[str, float] = {}

    def on_line(line: str) -> None:
        name = line.split(": ", 1)[1].split(" ", 1)[0]
        committed[name] = time.time()

    service = PipeService(spark, warehouse, poll_s=0.2, report=on_line)
    service.sync()  # the pipe's streaming query runs from here on

    def wait_for(done) -> None:
        deadline = time.time() + 300
        while not done():
            service.sync()  # reports a failed query
            assert time.time() < deadline and not service.failures, service.failures
            time.sleep(0.05)

    # One file first, not timed: the first load through a new path (s3a's client and
    # the AWS SDK's classes, the pipe's first commit) is a one-off cost, reported apart.
    started = time.time()
    drop("warm-up.json", (json.dumps(record(0)) + "\n").encode())
    wait_for(lambda: "warm-up.json" in committed)
    print(f"first file (cold path): {committed.pop('warm-up.json') - started:.2f} s", flush=True)
    stop = threading.Event()

    def writer():
        for i in range(seconds):
            name = f"lat-{i:04d}.json"
            drop(name, "".join(json.dumps(record(i * 100 + j)) + "\n" for j in range(100)).encode())
            created[name] = time.time()
            time.sleep(1)
        stop.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    wait_for(lambda: stop.is_set() and len(committed) >= len(created))
    service.stop()
    return [committed[n] - created[n] for n in created]


def local_latency(spark, warehouse: Warehouse, stage_dir: str, seconds: int) -> list[float]:
    """A directory stage, found by listing it (every 0.2 s)."""
    os.makedirs(stage_dir)

    def drop(name: str, data: bytes) -> None:
        path = os.path.join(stage_dir, name)
        with open(path + ".tmp", "wb") as out:
            out.write(data)
        os.replace(path + ".tmp", path)

    stage = f"CREATE OR REPLACE STAGE listed_stage URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)"
    return latency(spark, warehouse, stage, drop, seconds, "listed")


def notified_latency(spark, warehouse: Warehouse, work: str, seconds: int) -> list[float]:
    """An S3 stage on the local AWS (moto), found through S3 events in the pipe's SQS
    queue (long polling)."""
    import boto3

    from floeline.dev import aws as devaws
    from floeline.dev.services import next_or_free_port

    # its own services, on ports beside the defaults (a demo's may be running)
    endpoints = devaws.start(os.path.join(work, "aws"), kinesis_port=next_or_free_port(14568),
                             moto_port=next_or_free_port(15000))
    s3 = boto3.client("s3", endpoint_url=endpoints["s3"], region_name=devaws.REGION,
                      aws_access_key_id="bench", aws_secret_access_key="bench")
    s3.create_bucket(Bucket="bench-latency")
    stage = (f"CREATE OR REPLACE STAGE notified_stage URL='s3://bench-latency/in/' "
             f"ENDPOINT='{endpoints['s3']}' CREDENTIALS=(AWS_KEY_ID='bench' AWS_SECRET_KEY='bench') "
             f"FILE_FORMAT=(TYPE=JSON)")
    armed = False

    def drop(name: str, data: bytes) -> None:
        nonlocal armed
        if not armed:  # the pipe (and its queue) exists once latency() created it
            channel = next(p["notification_channel"] for p in run_script(spark, "SHOW PIPES", warehouse)[-1][1]
                           .collect() if p["name"] == "NOTIFIED_PIPE")
            s3.put_bucket_notification_configuration(Bucket="bench-latency", NotificationConfiguration={
                "QueueConfigurations": [{"QueueArn": channel, "Events": ["s3:ObjectCreated:*"]}]})
            armed = True
        s3.put_object(Bucket="bench-latency", Key=f"in/{name}", Body=data)

    try:
        return latency(spark, warehouse, stage, drop, seconds, "notified")
    finally:
        devaws.stop(os.path.join(work, "aws"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-seconds", type=int, default=30)
    args = parser.parse_args()

    spark = get_spark()
    work = tempfile.mkdtemp(prefix="floeline-bench-copy-")
    stage_dir, warm_dir = os.path.join(work, "stage"), os.path.join(work, "warm")
    started = time.perf_counter()
    write_files(stage_dir, args.records, args.files)
    write_files(warm_dir, 10_000, 1)
    print(f"wrote {args.records} records in {args.files} gzip files in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    warehouse = Warehouse(os.path.join(work, "warehouse"))
    bare(spark, warm_dir, os.path.join(work, "bare-warm"))
    copy(spark, warehouse, warm_dir, "WARM")

    bare_times, copy_times = [], []
    for n in range(args.rounds):
        bare_times.append(timed(lambda: bare(spark, stage_dir, os.path.join(work, f"bare-{n}"))))
        copy_times.append(timed(lambda: copy(spark, warehouse, stage_dir, f"T{n}")))
        print(f"round {n + 1}: bare {bare_times[-1]:.1f} s, copy {copy_times[-1]:.1f} s", flush=True)
    rows = spark.read.format("delta").load(warehouse.resolve(["T0"]).path).count()
    assert rows == args.records, rows

    if args.latency_seconds:
        # each in its own warehouse: the pipe service runs every pipe of its warehouse
        waits = notified_latency(spark, Warehouse(os.path.join(work, "wh-notified")), work,
                                 args.latency_seconds)
        print(f"file-to-table latency, S3 events through SQS: p50 {statistics.median(waits):.2f} s, "
              f"max {max(waits):.2f} s ({len(waits)} files)", flush=True)
        waits = local_latency(spark, Warehouse(os.path.join(work, "wh-listed")), os.path.join(work, "latency"),
                              args.latency_seconds)
        print(f"file-to-table latency, listing a directory every 0.2 s: p50 {statistics.median(waits):.2f} s, "
              f"max {max(waits):.2f} s ({len(waits)} files)", flush=True)

    copy_rate = args.records / min(copy_times)
    bare_rate = args.records / min(bare_times)
    print(f"copy_rows_per_s={copy_rate:.0f} bare_rows_per_s={bare_rate:.0f} "
          f"ratio={copy_rate / bare_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
