"""Plain Spark's own figure for the worker's throughput case (issue 25): in one warm
session, one Kafka -> Delta query over a 4-partition topic of --records records, then
--queries queries started together over as many 1-partition topics of records/queries
each, with bench_worker.py's bare_query (1 s trigger, from_json, Delta append) and its
records. What ratio Spark itself gives 20 small queries against one big one sets the
floor for 20 connectors against one.

    .venv/bin/python bench/probe_plain_queries.py [--queries 20] [--records 400000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_cold import _cpu_and_rss, _tree  # noqa: E402
from bench_ingest import produce_records  # noqa: E402
from bench_scale import produce_spread  # noqa: E402
from bench_worker import bare_query, wait_for_rows  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    bootstrap = devkafka.start()
    stamp = int(time.time())
    from floeline.spark import get_spark

    spark = get_spark("local[2]")
    work = tempfile.mkdtemp(prefix="floeline-plain-queries-")
    warm = f"plain_warm_{stamp}"
    devkafka.create_topic(bootstrap, warm, partitions=1)
    produce_records(bootstrap, warm, 1000)
    query = bare_query(spark, bootstrap, warm, os.path.join(work, "warm"))
    wait_for_rows([os.path.join(work, "warm", "_delta_log")], 1000)
    query.stop()

    def cpu_s() -> float:
        return _cpu_and_rss(_tree(os.getpid()))[0]

    print(f"load average {os.getloadavg()[0]:.1f} at the start; {work}", flush=True)
    for round_no in range(args.rounds):
        single = f"plain_single_{stamp}_{round_no}"
        many = [f"plain_many_{stamp}_{round_no}_{i:02d}" for i in range(args.queries)]
        devkafka.create_topic(bootstrap, single, partitions=4)
        produce_records(bootstrap, single, args.records)
        for topic in many:
            devkafka.create_topic(bootstrap, topic, partitions=1)
        produce_spread(bootstrap, many, args.records)

        out = os.path.join(work, single)
        started, cpu = time.time(), cpu_s()
        query = bare_query(spark, bootstrap, single, out)
        wait_for_rows([os.path.join(out, "_delta_log")], args.records)
        single_s, single_cpu = time.time() - started, cpu_s() - cpu
        query.stop()

        started, cpu = time.time(), cpu_s()
        queries = [bare_query(spark, bootstrap, t, os.path.join(work, t)) for t in many]
        wait_for_rows([os.path.join(work, t, "_delta_log") for t in many], args.records)
        many_s, many_cpu = time.time() - started, cpu_s() - cpu
        for q in queries:
            q.stop()
        one, together = args.records / single_s, args.records / many_s
        print(f"round {round_no + 1}: one query {one:,.0f} rows/s ({single_cpu:.1f} CPU-s); "
              f"{args.queries} together {together:,.0f} rows/s ({many_cpu:.1f} CPU-s): "
              f"ratio {together / one:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
