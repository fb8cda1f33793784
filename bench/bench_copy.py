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
3. Latency: the pipe service (`floeline pipes run`'s loop, polling 0.2 s) while a writer
   drops one small file per second into the stage; latency = the commit's time - the
   file's creation time.

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


def latency(spark, warehouse: Warehouse, stage_dir: str, seconds: int) -> list[float]:
    from floeline.ingest.pipe_service import PipeService

    run_script(spark, f"""
        CREATE TABLE lat (v VARIANT, f VARCHAR);
        CREATE OR REPLACE STAGE lat_stage URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
        CREATE PIPE lat_pipe AUTO_INGEST=TRUE AS
          COPY INTO lat FROM (SELECT $1, METADATA$FILENAME FROM @lat_stage)""", warehouse)
    created: dict[str, float] = {}
    committed: dict[str, float] = {}

    def on_line(line: str) -> None:
        name = line.split(": ", 1)[1].split(" ", 1)[0]
        committed[name] = time.time()

    service = PipeService(spark, warehouse, poll_s=0.2, report=on_line)
    stop = threading.Event()

    def writer():
        for i in range(seconds):
            name = f"lat-{i:04d}.json"
            path = os.path.join(stage_dir, name)
            with open(path + ".tmp", "w") as out:
                out.write("".join(json.dumps(record(i * 100 + j)) + "\n" for j in range(100)))
            os.replace(path + ".tmp", path)
            created[name] = time.time()
            time.sleep(1)
        stop.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    while not stop.is_set() or len(committed) < len(created):
        if not service.poll():
            time.sleep(0.2)
    return [committed[n] - created[n] for n in created]


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
        lat_dir = os.path.join(work, "latency")
        os.makedirs(lat_dir)
        waits = latency(spark, warehouse, lat_dir, args.latency_seconds)
        print(f"file-to-table latency: p50 {statistics.median(waits):.2f} s, max {max(waits):.2f} s "
              f"({len(waits)} files, pipe service polling the stage every 0.2 s)", flush=True)

    copy_rate = args.records / min(copy_times)
    bare_rate = args.records / min(bare_times)
    print(f"copy_rows_per_s={copy_rate:.0f} bare_rows_per_s={bare_rate:.0f} "
          f"ratio={copy_rate / bare_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
