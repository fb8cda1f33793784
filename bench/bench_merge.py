"""MERGE throughput (issue 27 item 5): a stream of change events merged by key
(insert.mode=upsert) against floeline's append of the same records (insert.mode=insert)
with the same buffer settings, in the same run.

1. Produces, to the local broker, --changes Debezium change events (JSON,
   schemas.enable=false, the envelope Debezium's Postgres connector writes: before, after,
   source, op, ts_ms) over --keys keys, to one topic x 4 partitions keyed by the row's key
   (so a key's changes stay in order on one partition, as Debezium's are): 70 % updates,
   10 % deletes, 20 % inserts (a new key, or one deleted before). The expected final
   table (every live key's last image) is kept in memory.
2. Runs each case in a fresh process (`--child`): Spark starts, a warm-up connector
   takes a small stream of changes (--warmup, over a tenth as many keys) the case's own
   way (JIT, jar loading, Spark's generated code for its plans; until 2026-11-26 both
   cases warmed up with an append, which left the MERGE's first batch cold), then the
   measured connector reads the topic
   end to end (--until-caught-up). Rounds alternate the cases; the best time counts.
   - append: insert.mode=insert, every change a row;
   - merge:  insert.mode=upsert, primary.key.mode=record_key, delete.enabled=true.
3. Checks: the append table holds every change; the merged table equals the expected
   final table (row count, and every row's values).
4. Where the time goes: the merge case's per-phase seconds summed over its batches
   (general.Phases: decode, keys, table, changes, merge, ...).

Last line: append_rows_per_s=N merge_rows_per_s=N merge_ratio=R

    .venv/bin/python bench/bench_merge.py [--changes 1000000] [--keys 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_scale import run_child  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402

CASES = ("append", "merge")
RESULT_MARK = "bench_merge result: "
TABLE_COLUMNS = ("id", "name", "amount", "qty", "updated_at")


# ---------------------------------------------------------------- the change stream

def image(key: int, version: int) -> dict:
    """A row of the source table: its key and a few columns that change."""
    return {"id": key, "name": f"customer-{key}-v{version}", "amount": round(key * 0.37 + version, 2),
            "qty": version, "updated_at": 1_764_000_000_000_000 + version}


def change_stream(changes: int, keys: int, seed: int = 27):
    """(events, final): `changes` Debezium envelopes (dicts with key/value) and the
    table they leave (key -> image). Ops: 70 % u, 10 % d, 20 % c, as feasible."""
    rng = random.Random(seed)
    live: dict[int, dict] = {}
    live_keys: list[int] = []  # for choosing a random live key in O(1)
    where: dict[int, int] = {}  # key -> index in live_keys
    dead: list[int] = []
    next_fresh, events = 0, []
    for n in range(changes):
        roll = rng.random()
        if roll < 0.2 or not live_keys:
            op = "c"
        elif roll < 0.9:
            op = "u"
        else:
            op = "d"
        if op == "c":
            if next_fresh < keys:
                key, next_fresh = next_fresh, next_fresh + 1
            elif dead:
                key = dead.pop(rng.randrange(len(dead)))
            else:
                op, key = "u", live_keys[rng.randrange(len(live_keys))]
        else:
            key = live_keys[rng.randrange(len(live_keys))]
        before = live.get(key)
        if op == "d":
            after = None
            i = where.pop(key)
            last = live_keys.pop()
            if last != key:
                live_keys[i], where[last] = last, i
            del live[key]
            dead.append(key)
        else:
            after = image(key, n)
            if key not in live:
                where[key] = len(live_keys)
                live_keys.append(key)
            live[key] = after
        events.append({"key": json.dumps({"id": key}), "value": json.dumps({
            "before": before, "after": after,
            "source": {"version": "3.6.1.Final", "connector": "postgresql", "name": "bench",
                       "ts_ms": 1_764_000_000_000 + n, "db": "shop", "schema": "public",
                       "table": "customers", "lsn": 10_000 + n},
            "op": op, "ts_ms": 1_764_000_000_000 + n})})
    return events, live


# ---------------------------------------------------------------- the measured process

def child(args) -> int:
    """One case in this process: warm up, run the connector, print the result line."""
    from floeline.config import config_from_dict
    from floeline.ingest import Connector
    from floeline.spark import get_spark
    from floeline.warehouse import delta_log

    spark = get_spark()
    warehouse = os.path.join(args.work, f"{args.case}_{args.round}", "warehouse")

    def connector_for(name: str, topic: str, extra: dict) -> Connector:
        return Connector(config_from_dict({
            "name": name, "topics": topic, "bootstrap.servers": args.bootstrap,
            "floeline.warehouse": warehouse, "buffer.count.records": str(args.count_records),
            "buffer.flush.time": "1", **extra}), spark, out=sys.stderr)

    extra = {} if args.case == "append" else {
        "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true"}
    # Each case warms up on its own path (a small stream of the same kind of changes), as
    # a connector that has run a while is: the JIT and Spark's generated code for its plans.
    connector_for(f"warm_{args.case}_{args.round}", args.warm_topic, extra).run(until_caught_up=True)
    started = time.time()
    connector = connector_for(f"bench_{args.case}_{args.round}", args.topic, extra)
    connector.run(until_caught_up=True)
    elapsed = time.time() - started
    ref = connector.pipeline.table_ref(args.topic)
    phases: dict[str, float] = {}
    for report in connector.reports:
        print(f"batch {report.batch_id} phases: "
              + ", ".join(f"{name} {seconds:.2f}" for name, seconds in report.phases.items()), flush=True)
        for name, seconds in report.phases.items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 2)
    result = {"case": args.case, "seconds": elapsed, "batches": len(connector.reports),
              "rows": delta_log.row_count(ref.path) or 0, "phases": phases}
    if args.case == "merge":
        result["mismatches"] = table_mismatches(spark, ref.path, args.expected)
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


def table_mismatches(spark, path: str, expected_file: str) -> list[str]:
    """What differs between the merged table and the expected final rows (at most 10)."""
    with open(expected_file) as f:
        expected = {int(k): v for k, v in json.load(f).items()}
    rows = spark.read.format("delta").load(path).select(
        *[f"`{c.upper()}`" for c in TABLE_COLUMNS]).collect()
    problems = []
    if len(rows) != len(expected):
        problems.append(f"{len(rows)} rows, expected {len(expected)}")
    for row in rows:
        want = expected.get(int(row[0]))
        got = {c: row[i] for i, c in enumerate(TABLE_COLUMNS)}
        if want is None:
            problems.append(f"key {row[0]} is in the table but deleted in the source")
        elif any(_value(got[c]) != _value(want[c]) for c in TABLE_COLUMNS):
            problems.append(f"key {row[0]}: table {got}, source {want}")
        if len(problems) >= 10:
            break
    return problems


def _value(v):
    return float(v) if isinstance(v, (int, float)) or type(v).__name__ == "Decimal" else v


# ---------------------------------------------------------------- the parent

def run_case(case: str, round_no: int, common: list[str], log_path: str) -> dict:
    """Run one case's child process; its result with the tree's peak RSS (bytes)."""
    command = [sys.executable, os.path.abspath(__file__), "--child", case, "--round", str(round_no)] + common
    return run_child(command, log_path, RESULT_MARK, f"case {case}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000, help="change events")
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    parser.add_argument("--count-records", type=int, default=50_000,
                        help="buffer.count.records (per partition), the same in both cases")
    parser.add_argument("--warmup", type=int, default=20_000, help="change events in the warm-up topic")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    for hidden in ("--bootstrap", "--work", "--warm-topic", "--topic", "--expected"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.case = args.child
        return child(args)

    from floeline.sources.kafka import produce

    bootstrap = devkafka.start()
    stamp = f"{int(time.time())}_{random.randint(0, 999)}"
    topic, warm = f"merge_changes_{stamp}", f"merge_warm_{stamp}"
    started = time.time()
    events, final = change_stream(args.changes, args.keys)
    devkafka.create_topic(bootstrap, topic, partitions=4)
    produce(bootstrap, topic, events)
    devkafka.create_topic(bootstrap, warm, partitions=4)
    produce(bootstrap, warm, change_stream(args.warmup, max(args.warmup // 10, 1), seed=7)[0])
    ops = {op: sum(1 for e in events if f'"op": "{op}"' in e["value"]) for op in "cud"}
    print(f"set-up {time.time() - started:.1f} s: {args.changes} changes over {args.keys} keys "
          f"(c={ops['c']} u={ops['u']} d={ops['d']}), {len(final)} rows at the end", flush=True)

    work = tempfile.mkdtemp(prefix="floeline-merge-")
    expected = os.path.join(work, "expected.json")
    with open(expected, "w") as f:
        json.dump(final, f)
    common = ["--bootstrap", bootstrap, "--work", work, "--warm-topic", warm, "--topic", topic,
              "--expected", expected, "--count-records", str(args.count_records)]
    cases = [c for c in args.cases.split(",") if c]
    best: dict[str, dict] = {}
    for round_no in range(args.rounds):
        for case in cases:
            load = os.getloadavg()[0]
            result = run_case(case, round_no, common, os.path.join(work, f"{case}_{round_no}.log"))
            want = args.changes if case == "append" else len(final)
            if result["rows"] != want:
                raise SystemExit(f"case {case}: the table holds {result['rows']} rows, expected {want}")
            if result.get("mismatches"):
                raise SystemExit(f"case merge: the table differs from the source: {result['mismatches']}")
            rate = args.changes / result["seconds"]
            print(f"round {round_no + 1} {case}: {result['seconds']:.1f} s, {rate:,.0f} changes/s, "
                  f"{result['batches']} micro-batches, peak RSS {result['rss'] / 2**20:.0f} MB, "
                  f"load average {load:.1f}; phases {result['phases']}", flush=True)
            if case not in best or result["seconds"] < best[case]["seconds"]:
                best[case] = result
    print(f"logs and tables: {work}")
    if set(cases) == set(CASES):
        append, merge = (args.changes / best[c]["seconds"] for c in CASES)
        print(f"append_rows_per_s={append:.0f} merge_rows_per_s={merge:.0f} merge_ratio={merge / append:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
