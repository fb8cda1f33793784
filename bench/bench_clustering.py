"""Clustering keys: a table created with CLUSTER BY (CUSTOMER) against the same table
without, written by the same connector from the same records in one run. Measures
the files a point query (CUSTOMER = k) reads after N commits (default 50), from the
scan's own numFiles metric after Delta's data skipping, averaged over --queries keys,
and the write's rows/s, clustered against not (the cost of range-partitioning and
sorting each commit's rows). The memory source, --channels channels (one file per
channel per commit, as a Kafka topic's partitions give), buffer.count.records records
per channel per commit; --rounds alternates plain and clustered writes so a drift of
the machine shows in both. A warm-up write runs first. The memory source reads a
batch in one task (one file), where a Kafka topic's partitions give a task and a file
each: spark.sql.files.maxRecordsPerFile (--records-per-file, default
--per-flush) makes the --channels files a commit of a topic with that many
partitions would have, for both tables.
Last line: `commits=N rows=N files=N read_plain=F read_clustered=F read_ratio=F
rows_s_plain=F rows_s_clustered=F write_cost_pct=F`."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.sources.memory import MemoryLog, MemorySource  # noqa: E402
from floeline.spark import get_spark  # noqa: E402
from floeline.sql.script import run_sql  # noqa: E402
from floeline.warehouse.catalog import Warehouse  # noqa: E402
from floeline.warehouse.clustering import files_scanned  # noqa: E402

COLUMNS = "RECORD_METADATA VARIANT, ID NUMBER, CUSTOMER NUMBER, AMOUNT FLOAT, NOTE VARCHAR"


def write(spark, log: MemoryLog, warehouse: str, per_flush: int, cluster: bool) -> float:
    """Seconds to write the log into a new table ORDERS (CLUSTER BY (CUSTOMER) or not)."""
    clause = " CLUSTER BY (CUSTOMER)" if cluster else ""
    run_sql(spark, f"CREATE TABLE ORDERS ({COLUMNS}){clause} ENABLE_SCHEMA_EVOLUTION = TRUE",
            Warehouse(warehouse))
    config = config_from_dict({
        "name": f"bench{'c' if cluster else 'p'}", "topics": "orders", "floeline.warehouse": warehouse,
        "buffer.count.records": str(per_flush), "buffer.flush.time": "1"})
    started = time.time()
    Connector(config, spark, source=MemorySource(config, log)).run(until_caught_up=True)
    return time.time() - started


def point_queries(spark, warehouse: str, keys: list[int]) -> tuple[float, float, int]:
    """(mean files read, mean seconds, the table's files) of `CUSTOMER = k` for each k."""
    table = spark.read.format("delta").load(os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS"))
    reads, seconds = [], []
    for key in keys:
        started = time.time()
        reads.append(files_scanned(table.where(f"CUSTOMER = {key}")))
        seconds.append(time.time() - started)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    files = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]
    return statistics.mean(reads), statistics.mean(seconds), files


def records(channel: int, count: int, keys: int, rng: random.Random) -> list[bytes]:
    return [json.dumps({"id": channel * 10**8 + i, "customer": rng.randrange(keys), "amount": i / 4,
                        "note": f"order {i} of channel {channel}"}).encode() for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--per-flush", type=int, default=2000, help="records per channel per commit")
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--keys", type=int, default=1000, help="distinct CUSTOMER values")
    parser.add_argument("--queries", type=int, default=10, help="point queries averaged")
    parser.add_argument("--rounds", type=int, default=2, help="plain/clustered writes each")
    parser.add_argument("--records-per-file", type=int, default=None,
                        help="spark.sql.files.maxRecordsPerFile (default: --per-flush)")
    args = parser.parse_args()
    spark = get_spark()
    spark.conf.set("spark.sql.files.maxRecordsPerFile", str(args.records_per_file or args.per_flush))
    rng = random.Random(55)
    rows = args.commits * args.per_flush * args.channels
    with tempfile.TemporaryDirectory(prefix="floeline-bench-cluster-") as work:
        log = MemoryLog(os.path.join(work, "log"))
        for channel in range(args.channels):
            log.append(f"orders/{channel}", "orders", records(channel, args.commits * args.per_flush,
                                                                args.keys, rng))
        warm = MemoryLog(os.path.join(work, "warm"))
        warm.append("orders/0", "orders", records(0, 3 * args.per_flush, args.keys, rng))
        write(spark, warm, os.path.join(work, "warm-plain"), args.per_flush, cluster=False)
        write(spark, warm, os.path.join(work, "warm-clustered"), args.per_flush, cluster=True)
        seconds: dict[bool, list[float]] = {False: [], True: []}
        last: dict[bool, str] = {}
        for round_ in range(args.rounds):
            for cluster in ((False, True) if round_ % 2 == 0 else (True, False)):
                warehouse = os.path.join(work, f"{'clustered' if cluster else 'plain'}-{round_}")
                seconds[cluster].append(write(spark, log, warehouse, args.per_flush, cluster))
                last[cluster] = warehouse
                print(f"round {round_} {'clustered' if cluster else 'plain'}: "
                      f"{rows / seconds[cluster][-1]:,.0f} rows/s", flush=True)
        keys = [rng.randrange(args.keys) for _ in range(args.queries)]
        read_plain, query_s_plain, files_plain = point_queries(spark, last[False], keys)
        read_clustered, query_s_clustered, files_clustered = point_queries(spark, last[True], keys)
    rate = {c: rows / statistics.median(s) for c, s in seconds.items()}
    print(f"files per table: plain {files_plain}, clustered {files_clustered}; point query: "
          f"{query_s_plain:.3f} s plain, {query_s_clustered:.3f} s clustered")
    print(f"commits={args.commits} rows={rows} files={files_plain} read_plain={read_plain:.1f} "
          f"read_clustered={read_clustered:.1f} read_ratio={read_clustered / read_plain:.3f} "
          f"rows_s_plain={rate[False]:.0f} rows_s_clustered={rate[True]:.0f} "
          f"write_cost_pct={100 * (rate[False] - rate[True]) / rate[False]:.1f}")


if __name__ == "__main__":
    main()
