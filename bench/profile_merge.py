"""Where a steady MERGE batch's time goes, without a broker or a streaming query: one
batch of N Debezium change events (bench_merge.py's stream, keyed to 4 Kafka partitions,
in the Kafka source's layout, read from a Parquet file) through the one-pass MERGE
(onepass_merge.run_one_pass_merge) and, as the same-run baseline, the same records
through the one-pass append (onepass.run_one_pass_batch), alternately, REPS times. The
tables' positions are put back before each try, so the batch is never a replay.

Not a benchmark of the connector (bench_merge.py is): a tool for trying a change to the
batch's plan in minutes. The first round pays compilation; read the medians.

    N=180000 KEYS=100000 REPS=4 .venv/bin/python bench/profile_merge.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from bench_merge import change_stream  # noqa: E402

from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.ingest.general import run_general_batch  # noqa: E402
from floeline.ingest.onepass import run_one_pass_batch  # noqa: E402
from floeline.ingest.onepass_merge import run_one_pass_merge  # noqa: E402
from floeline.sources.base import BatchEnd, Committed  # noqa: E402
from floeline.spark import get_spark  # noqa: E402

PARTITIONS = 4
N = int(os.environ.get("N", "180000"))
KEYS = int(os.environ.get("KEYS", "100000"))
REPS = int(os.environ.get("REPS", "4"))


def kafka_rows(spark, work: str):
    """2 x N change events as Kafka records (key -> partition), saved as Parquet: a
    file per partition, so a batch reads in 4 tasks as from the topic."""
    events, _final = change_stream(N * 2, KEYS)
    offsets = [0] * PARTITIONS
    rows = []
    for n, event in enumerate(events):
        partition = json.loads(event["key"])["id"] % PARTITIONS
        rows.append(("orders", partition, offsets[partition], event["key"].encode(),
                     event["value"].encode(), 1_764_000_000_000 + n))
        offsets[partition] += 1
    df = spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, key BINARY, "
                                     "value BINARY, ms BIGINT").selectExpr(
        "topic", "partition", "offset", "key", "value", "timestamp_millis(ms) AS timestamp",
        "0 AS timestampType", "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers")
    df.repartitionByRange(PARTITIONS, "partition").write.parquet(f"{work}/records")
    return spark.read.parquet(f"{work}/records")


class Case:
    """One connector's pipeline over the records, driven batch by batch."""

    def __init__(self, spark, records, name: str, warehouse: str, settings: dict):
        self.records = records
        self.connector = Connector(config_from_dict({
            "name": name, "topics": "orders", "bootstrap.servers": "127.0.0.1:1",
            "floeline.warehouse": warehouse, **settings}), spark)
        self.pipeline = self.connector.pipeline

    def batch(self, first: int, end: int):
        """Each partition's offsets first..end-1, normalized, with its BatchEnds."""
        df = self.connector.source.normalize(self.records.where(f"offset >= {first} AND offset < {end}"))
        before = {f"orders/{p}": str(first - 1) for p in range(PARTITIONS)} if first > 0 else {}
        return df, BatchEnd(before), BatchEnd({f"orders/{p}": str(end - 1) for p in range(PARTITIONS)})

    def first_batch(self, end: int) -> None:
        """The general path creates the table and shows its keys, as a connector's first batch."""
        df, _start, _end = self.batch(0, end)
        run_general_batch(self.pipeline, df, 0, time.time(), set(), ["orders"])

    def one_pass(self, run, batch_id: int, first: int, end: int):
        df, start, stop = self.batch(first, end)
        state = self.pipeline.tables.state(self.pipeline.table_ref("orders"))
        state.committed_through(Committed(dict(start.positions)))  # never a replay
        started = time.time()
        result = run(self.pipeline, df, batch_id, started, start, stop)
        assert result is not None, f"{self.connector.config.name}: the batch took the general path"
        return time.time() - started, result.report.phases


def main() -> None:
    spark = get_spark()
    work = tempfile.mkdtemp(prefix="floeline-profile-merge-")
    records = kafka_rows(spark, work)
    per = N // PARTITIONS  # records per partition in a batch
    merge = Case(spark, records, "profile_merge", f"{work}/merge", {
        "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true"})
    append = Case(spark, records, "profile_append", f"{work}/append", {})
    merge.first_batch(per)
    append.first_batch(per)
    merges, appends = [], []
    for round_ in range(REPS):
        seconds, _phases = append.one_pass(run_one_pass_batch, 2 * round_ + 1, per, 2 * per)
        appends.append(seconds)
        seconds, phases = merge.one_pass(run_one_pass_merge, 2 * round_ + 1, per, 2 * per)
        merges.append((seconds, phases.get("one pass merge read", 0.0), phases.get("one pass merge", 0.0)))
        print(f"round {round_}: merge {seconds:.2f} s (read {merges[-1][1]:.2f}, MERGE "
              f"{merges[-1][2]:.2f}), append {appends[-1]:.2f} s", flush=True)
    total, read, merged = (statistics.median(m[i] for m in merges) for i in range(3))
    baseline = statistics.median(appends)
    print(f"median: merge {total:.2f} s (read {read:.2f}, MERGE {merged:.2f}), append "
          f"{baseline:.2f} s; merge_over_append={total / baseline:.2f}")


if __name__ == "__main__":
    main()
