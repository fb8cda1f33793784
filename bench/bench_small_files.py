"""Small files: a connector committing once per flush leaves a few small files per
commit. Measures, in one run, the table's file count and a query's time after N
small commits (default 300, the scaled-down stand-in for an hour of 1 s flushes:
3,600 commits would take this machine over an hour) written by the connector without
maintenance and with floeline.table.auto.compact=true, then after `OPTIMIZE` of the
table without it. One commit per flush: the memory source with buffer.count.records
records per channel per micro-batch.
Last line: `commits=N files_plain=N files_auto=N files_optimized=N query_s_plain=S
query_s_auto=S query_s_optimized=S optimize_s=S write_s_plain=S write_s_auto=S`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.sources.memory import MemoryLog, MemorySource  # noqa: E402
from floeline.spark import get_spark  # noqa: E402
from floeline.sql.script import run_script  # noqa: E402
from floeline.warehouse.catalog import Warehouse  # noqa: E402

QUERY = "SELECT count(*) AS n, sum(amount) AS s FROM orders WHERE order_id % 7 = 0"


def write(spark, log: MemoryLog, work: str, name: str, per_flush: int, auto: bool) -> tuple[str, float]:
    warehouse = os.path.join(work, name)
    config = config_from_dict({
        "name": name, "topics": "orders", "floeline.warehouse": warehouse,
        "buffer.count.records": str(per_flush), "buffer.flush.time": "1",
        "floeline.table.auto.compact": str(auto).lower()})
    started = time.time()
    Connector(config, spark, source=MemorySource(config, log)).run(until_caught_up=True)
    return warehouse, time.time() - started


def files(spark, warehouse: str) -> int:
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", "ORDERS")
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def query_seconds(spark, warehouse: str, repeats: int = 3) -> float:
    """Best of `repeats` runs of QUERY through floeline sql (plan, file listing, scan)."""
    best = None
    for _ in range(repeats):
        started = time.time()
        (_statement, df), = run_script(spark, QUERY, Warehouse(warehouse))
        df.collect()
        elapsed = time.time() - started
        best = elapsed if best is None else min(best, elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--per-flush", type=int, default=50, help="records per channel per commit")
    args = parser.parse_args()
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="floeline-bench-files-") as work:
        log = MemoryLog(os.path.join(work, "log"))
        for c in range(2):  # two channels: two files per commit
            log.append(f"orders/{c}", "orders", [
                json.dumps({"order_id": c * 10**7 + i, "amount": i % 100}).encode()
                for i in range(args.commits * args.per_flush)])
        plain, write_plain = write(spark, log, work, "plain", args.per_flush, auto=False)
        auto, write_auto = write(spark, log, work, "auto", args.per_flush, auto=True)
        figures = {"files_plain": files(spark, plain), "files_auto": files(spark, auto),
                   "query_s_plain": query_seconds(spark, plain),
                   "query_s_auto": query_seconds(spark, auto)}
        started = time.time()
        run_script(spark, "OPTIMIZE orders", Warehouse(plain))
        figures["optimize_s"] = time.time() - started
        figures["files_optimized"] = files(spark, plain)
        figures["query_s_optimized"] = query_seconds(spark, plain)
    print(f"commits={args.commits} files_plain={figures['files_plain']} files_auto={figures['files_auto']} "
          f"files_optimized={figures['files_optimized']} query_s_plain={figures['query_s_plain']:.2f} "
          f"query_s_auto={figures['query_s_auto']:.2f} query_s_optimized={figures['query_s_optimized']:.2f} "
          f"optimize_s={figures['optimize_s']:.2f} write_s_plain={write_plain:.1f} write_s_auto={write_auto:.1f}")


if __name__ == "__main__":
    main()
