"""Scale figures (issue 12 item 8): many topics and tables in one connector, a wide
topic, and the driver's peak memory, each against the single-table baseline of the
same run.

1. Produces, to the local broker, the same ~236-byte records as bench_ingest.py:
   - single: one topic x 4 partitions, N records;
   - many:   --tables topics x --many-partitions partitions (4), N records in all
     (N / tables each);
   - p64:    one topic x 64 partitions, N records;
   and small warm-up topics: one for single and p64, 4 (of --many-partitions) for many.
2. Runs each case in a fresh process (`--child`): Spark starts, a warm-up connector
   reads the case's warm-up topics (JIT, jar loading, and for many the path that writes
   tables together), then the measured connector reads the
   case's topics end to end (--until-caught-up; one connector; `topics=` lists the
   case's topics, each to its own table) and its rows are counted from the Delta logs.
   Time runs from the measured connector's creation (source planning and table
   creation included) to its end. Rounds alternate the cases (the machine is shared
   and noisy); the best time of each case counts.
3. Peak RSS of each case's process tree (the Python driver + Spark's JVM, its child
   under PySpark, + any Python workers), sampled from /proc every 0.2 s
   (bench_cold._tree), over the whole child process, warm-up included.

Last line: single_rows_per_s=N many_tables_rows_per_s=N many_ratio=R p64_rows_per_s=N
p64_ratio=R peak_rss_mb=N single_rss_mb=N many_rss_mb=N p64_rss_mb=N

    .venv/bin/python bench/bench_scale.py [--records 400000] [--tables 100] [--rounds 2]

Issue 26's 1,000 tables, with the single table as the same run's baseline:
`--records 100000 --tables 1000 --many-partitions 1 --cases single,many --rounds 1`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_cold import _cpu_and_rss, _tree, kcmp_works  # noqa: E402
from bench_ingest import produce_records, record  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402

CASES = ("single", "many", "p64")
# Topics of the many-tables case's warm-up (the tables-together path).
WARM_TABLES = 4
RESULT_MARK = "bench_scale result: "


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` records over `parts` topics, the first ones taking the remainder."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def produce_spread(bootstrap: str, topics: list[str], total: int) -> float:
    """`total` records over `topics` (split_evenly), record numbers running on."""
    from floeline.sources.kafka import produce

    started, first = time.time(), 0
    for topic, count in zip(topics, split_evenly(total, len(topics))):
        produce(bootstrap, topic, (json.dumps(record(i)).encode() for i in range(first, first + count)))
        first += count
    return time.time() - started


def summary_line(rates: dict[str, float], rss_mb: dict[str, float]) -> str:
    """The bench's last line, from each case's best rows/s and peak RSS in MB."""
    single = rates["single"]
    return (f"single_rows_per_s={rates['single']:.0f} many_tables_rows_per_s={rates['many']:.0f} "
            f"many_ratio={rates['many'] / single:.2f} p64_rows_per_s={rates['p64']:.0f} "
            f"p64_ratio={rates['p64'] / single:.2f} peak_rss_mb={max(rss_mb.values()):.0f} "
            + " ".join(f"{case}_rss_mb={rss_mb[case]:.0f}" for case in CASES))


# ---------------------------------------------------------------- the measured process

def child(args) -> int:
    """One case in this process: warm up, run the connector, print the result line."""
    from floeline.config import config_from_dict
    from floeline.ingest import Connector
    from floeline.spark import get_spark
    from floeline.warehouse import delta_log

    spark = get_spark()
    spark_started = time.time()

    def connector_for(name: str, topics: list[str]) -> Connector:
        return Connector(config_from_dict({
            "name": name, "topics": ",".join(topics), "bootstrap.servers": args.bootstrap,
            "floeline.warehouse": os.path.join(args.work, f"{args.case}_{args.round}", "warehouse"),
            "buffer.count.records": str(args.count_records), "buffer.flush.time": "1",
            "floeline.kafka.reader": args.kafka_reader}),
            spark, out=sys.stderr)

    connector_for(f"warm_{args.case}_{args.round}", args.warm_topic.split(",")).run(until_caught_up=True)
    warmed = time.time()
    topics = args.topics.split(",")
    started = time.time()
    connector = connector_for(f"scale_{args.case}_{args.round}", topics)
    connector.run(until_caught_up=True)
    elapsed = time.time() - started
    rows = sum(delta_log.row_count(connector.pipeline.table_ref(t).path) or 0 for t in topics)
    print(RESULT_MARK + json.dumps({
        "case": args.case, "seconds": elapsed, "rows": rows, "batches": len(connector.reports),
        "spark_start_s": spark_started - args.launched, "warmup_s": warmed - spark_started,
        "batch_seconds": [round(r.duration_s, 2) for r in connector.reports]}), flush=True)
    return 0


# ---------------------------------------------------------------- the parent

def run_case(case: str, round_no: int, topics: list[str], warm: list[str], common: list[str],
             log_path: str) -> dict:
    """Run one case's child process (`warm`: its warm-up topics); its result with the
    tree's peak RSS (bytes)."""
    command = [sys.executable, os.path.abspath(__file__), "--child", case, "--round", str(round_no),
               "--topics", ",".join(topics), "--warm-topic", ",".join(warm),
               "--launched", str(time.time())] + common
    return run_child(command, log_path, RESULT_MARK, f"case {case}")


def run_child(command: list[str], log_path: str, mark: str, label: str) -> dict:
    """Run a benchmark's measured child process (stderr to `log_path`); the JSON after
    `mark` on its stdout, with the process tree's peak RSS (bytes) as `rss`."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _cpu_and_rss(_tree(proc.pid))[1])
            time.sleep(0.2)
        reader.join(10)
    results = [json.loads(line[len(mark):]) for line in lines if line.startswith(mark)]
    if proc.returncode != 0 or not results:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise SystemExit(f"{label} failed ({proc.returncode}); its log {log_path}:\n{tail}")
    return dict(results[0], rss=peak)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000, help="records per case (N)")
    parser.add_argument("--tables", type=int, default=100, help="topics (and tables) of the many-tables case")
    parser.add_argument("--many-partitions", type=int, default=4, help="partitions of each many-tables topic")
    parser.add_argument("--count-records", type=int, default=50_000,
                        help="buffer.count.records (per partition), the same in every case")
    parser.add_argument("--warmup", type=int, default=20_000, help="records in the warm-up topic")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES), help="a subset to run, e.g. many")
    parser.add_argument("--kafka-reader", choices=("spark", "grouped"), default="grouped",
                        help="floeline.kafka.reader of every case's connectors (default: floeline's)")
    # What the parent passes to each case's process:
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--topics", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--warm-topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.case = args.child
        return child(args)

    if not kcmp_works():
        print("warning: kcmp is refused here, so peak RSS may count the JVM twice while it "
              "spawns a process (bench_cold.own_address_spaces)", flush=True)
    bootstrap = devkafka.start()
    stamp = f"{int(time.time())}_{random.randint(0, 999)}"
    layout = {"single": ([f"scale_single_{stamp}"], 4),
              "many": ([f"scale_many_{stamp}_{i:04d}" for i in range(args.tables)], args.many_partitions),
              "p64": ([f"scale_p64_{stamp}"], 64)}
    cases = [c for c in args.cases.split(",") if c]
    started = time.time()
    for case in cases:
        topics, partitions = layout[case]
        for topic in topics:
            devkafka.create_topic(bootstrap, topic, partitions=partitions)
        produced_s = produce_spread(bootstrap, topics, args.records)
        print(f"{case}: produced {args.records} records to {len(topics)} topic(s) x {partitions} "
              f"partitions in {produced_s:.1f} s", flush=True)
    # Each case warms up on its own code path: one table, or (many) tables written
    # together, whose first batch learns every table's keys.
    warm = {"single": [f"scale_warm_{stamp}"], "p64": [f"scale_warm_{stamp}"],
            "many": [f"scale_warm_many_{stamp}_{i}" for i in range(WARM_TABLES)]}
    devkafka.create_topic(bootstrap, warm["single"][0], partitions=4)
    produce_records(bootstrap, warm["single"][0], args.warmup)
    for topic in warm["many"]:
        devkafka.create_topic(bootstrap, topic, partitions=args.many_partitions)
    produce_spread(bootstrap, warm["many"], args.warmup)
    print(f"set-up {time.time() - started:.1f} s", flush=True)

    work = tempfile.mkdtemp(prefix="floeline-scale-")
    common = ["--bootstrap", bootstrap, "--work", work,
              "--count-records", str(args.count_records), "--kafka-reader", args.kafka_reader]
    best: dict[str, dict] = {}
    rss: dict[str, int] = {}
    for round_no in range(args.rounds):
        for case in cases:
            load = os.getloadavg()[0]
            result = run_case(case, round_no, layout[case][0], warm[case], common,
                              os.path.join(work, f"{case}_{round_no}.log"))
            if result["rows"] != args.records:
                raise SystemExit(f"case {case}: {result['rows']} rows landed, {args.records} produced")
            rate = args.records / result["seconds"]
            print(f"round {round_no + 1} {case}: {result['seconds']:.1f} s, {rate:,.0f} rows/s, "
                  f"{result['batches']} micro-batches {result['batch_seconds']}, peak RSS "
                  f"{result['rss'] / 2**20:.0f} MB (Spark start {result['spark_start_s']:.1f} s, "
                  f"warm-up {result['warmup_s']:.1f} s, load average {load:.1f})", flush=True)
            if case not in best or result["seconds"] < best[case]["seconds"]:
                best[case] = result
            rss[case] = max(rss.get(case, 0), result["rss"])
    print(f"logs and tables: {work}")
    if set(cases) != set(CASES):
        for case in cases:
            print(f"{case}: best {args.records / best[case]['seconds']:,.0f} rows/s, "
                  f"peak RSS {rss[case] / 2**20:.0f} MB")
        return 0
    print(summary_line({c: args.records / best[c]["seconds"] for c in CASES},
                       {c: rss[c] / 2**20 for c in CASES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
