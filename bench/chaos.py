"""Chaos soak: exactly once under SIGKILLs, a deleted Spark checkpoint and broker restarts.

floeline promises that every Kafka record lands in its table once or, being bad, in its
error table once, whatever happens to the process. This script tries hard to break that
with a real broker (its own, on free ports) and `floeline run` processes:

- 3 topics (3 + 3 + 2 = 8 partitions) -> 3 tables (snowflake.topic2table.map), produced in
  chunks between restarts; the third topic starts mid-stream (its table is created late);
  some chunks add a new key to every table (schema evolution); from the second chunk on a
  few records per topic are bad JSON (their `<TABLE>_ERRORS` tables appear mid-stream);
- `--kills` times a connector process group (the Python driver, Spark's JVM and its Python
  workers) is killed with SIGKILL at a chosen moment, watched from outside: table
  creation, a schema change, a data commit (before the consumer-group offset update), new
  data files (inside a commit), a `batch N` line (before Spark's checkpoint commit) or a
  random time (bench/chaos_common.py lists them);
- the Spark checkpoint is deleted `--checkpoint-deletes` times between restarts;
- the broker is stopped and started (same data dir) `--broker-restarts` times while a
  connector runs.
Then a connector runs until caught up and every table is read with Spark. Per table:
records produced (the partitions' high watermarks), landed, in the error table,
duplicates (a topic/partition/offset held twice) and lost (produced, neither landed nor
in the error table). Last line:

  produced=N landed=N dlq=N duplicates=0 lost=0 kills=20 checkpoint_deletes=2 broker_restarts=2 seconds=S

Exit status 1 if duplicates, lost, misrouted (good records in an error table or bad ones
landed) or unexpected (rows at offsets never produced) is not 0, or a connector crashed.
tests/integration/test_chaos.py runs a short version of the same code.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from chaos_common import (  # it puts src/ on the path
    DATABASE, MOMENTS, SCHEMA, ConnectorProcess, TableCount, TableWatcher, await_moment,
    chunk_sizes, row, spread, wait_for)
from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.dev.services import free_port  # noqa: E402
from floeline.sources.kafka import produce  # noqa: E402

CONNECTOR = "chaos"
# (topic stem, partitions, table); the third starts mid-stream.
TOPICS = (("orders", 3, "ORDERS"), ("clicks", 3, "CLICKS"), ("users", 2, "USERS"))


# ---------------------------------------------------------------- the plan

@dataclass
class Options:
    records: int = 1_000_000
    kills: int = 20
    checkpoint_deletes: int = 2
    broker_restarts: int = 2
    seed: int = 11
    batch_records: int = 5000  # buffer.count.records (per partition and batch)
    bad_per_topic: int = 3  # bad JSON records per topic and chunk, from the second chunk
    startup_timeout_s: float = 900.0  # launch -> first batch line (a busy machine is slow)
    moment_timeout_s: float = 120.0  # first batch line -> moment; then a kill at once
    final_timeout_s: float = 3600.0
    workdir: str | None = None
    log: object = sys.stdout


@dataclass
class Cycle:
    """One connector launch ended by a SIGKILL (the last one runs until caught up)."""
    index: int
    moment: str  # create | evolve | commit | write | progress | random | final
    delete_checkpoint: bool = False  # before the launch
    restart_broker: bool = False  # after the launch's first batch
    new_key: str | None = None  # every table's records of this chunk may carry it
    users_start: bool = False  # the third topic gets its first records in this chunk


def plan_cycles(options: Options) -> list[Cycle]:
    """The kills' moments and where the checkpoint deletes and broker restarts go: the
    first launch is killed at table creation; broker restarts, evolution cycles and the
    third topic's start each get cycles of their own; the rest rotate the other moments
    in a seeded order. The last cycle (index == kills) is the final catch-up run."""
    rng = random.Random(options.seed)
    kills = options.kills
    cycles = [Cycle(i, "") for i in range(kills)] + [Cycle(kills, "final")]
    if kills:
        cycles[0].moment = "create"
    free = list(range(1, kills))
    for i in spread(options.broker_restarts, free):
        cycles[i].restart_broker = True
    free = [i for i in free if not cycles[i].restart_broker]
    evolutions = spread(max(1, kills // 5), free)
    for i in evolutions:
        cycles[i].moment, cycles[i].new_key = "evolve", f"extra_{i}"
    free = [i for i in free if i not in evolutions]
    users = cycles[spread(1, free)[0]] if kills >= 6 and free else cycles[0]
    users.users_start = True
    if users.index:
        users.moment = "create"
    # Checkpoint deletes go before launches 1..kills (the final run included).
    for i in spread(options.checkpoint_deletes, list(range(1, kills + 1))):
        cycles[i].delete_checkpoint = True
    order = list(MOMENTS)
    rng.shuffle(order)
    rest = [c for c in cycles[:kills] if not c.moment]
    for n, cycle in enumerate(rest):
        cycle.moment = order[n % len(order)]
    return cycles


# ---------------------------------------------------------------- records

class Producer:
    """Produces each cycle's chunk and remembers how many good and bad records each
    table got. The truth for "produced" is still the broker (high watermarks)."""

    def __init__(self, bootstrap: str, run_id: str, options: Options):
        self.bootstrap, self.options = bootstrap, options
        self.topics = {table: (f"chaos_{stem}_{run_id}", parts) for stem, parts, table in TOPICS}
        self.bad = Counter()
        self.good = Counter()
        self.users_started = False

    def create_topics(self) -> None:
        for topic, partitions in self.topics.values():
            devkafka.create_topic(self.bootstrap, topic, partitions=partitions)

    def topic2table(self) -> str:
        return ",".join(f"{topic}:{table}" for table, (topic, _) in self.topics.items())

    def chunk(self, cycle: Cycle, size: int) -> int:
        """Produce this cycle's `size` records (bad ones included) over the active
        topics; returns the count sent."""
        if cycle.users_start:
            self.users_started = True
        active = [t for t in self.topics if t != "USERS" or self.users_started]
        bad_each = self.options.bad_per_topic if cycle.index > 0 else 0
        sent = 0
        for n, table in enumerate(active):
            share = size // len(active) + (1 if n < size % len(active) else 0)
            bad = min(bad_each, share)
            sent += self._produce(table, cycle, share - bad, bad)
        return sent

    def _produce(self, table: str, cycle: Cycle, good: int, bad: int) -> int:
        topic, partitions = self.topics[table]
        start = self.good[table] + self.bad[table]
        bad_at = {start + (k + 1) * good // (bad + 1) + k for k in range(bad)}

        def records():
            for i in range(start, start + good + bad):
                if i in bad_at:
                    value = f'{{"broken": {i}, '.encode()  # invalid JSON: a bad record
                else:
                    value = json.dumps(row(table, i, cycle.new_key))
                yield {"value": value, "key": str(i).encode(), "partition": i % partitions}

        sent = produce(self.bootstrap, topic, records())
        self.good[table] += good
        self.bad[table] += bad
        return sent


# ---------------------------------------------------------------- the soak

@dataclass
class Result:
    tables: list[TableCount] = field(default_factory=list)
    kills: int = 0
    moments: Counter = field(default_factory=Counter)
    checkpoint_deletes: int = 0
    broker_restarts: int = 0
    crashes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(getattr(t, name) for t in self.tables)

    @property
    def ok(self) -> bool:
        return not self.crashes and all(
            self.total(n) == 0 for n in ("duplicates", "lost", "unexpected", "misrouted"))

    def line(self) -> str:
        return (f"produced={self.total('produced')} landed={self.total('landed')} "
                f"dlq={self.total('dlq')} duplicates={self.total('duplicates')} "
                f"lost={self.total('lost')} unexpected={self.total('unexpected')} "
                f"misrouted={self.total('misrouted')} kills={self.kills} "
                f"checkpoint_deletes={self.checkpoint_deletes} "
                f"broker_restarts={self.broker_restarts} crashes={len(self.crashes)} "
                f"seconds={self.seconds:.0f}")


class Soak:
    def __init__(self, options: Options, workdir: Path):
        self.options, self.workdir = options, workdir
        self.rng = random.Random(options.seed)
        self.warehouse = workdir / "warehouse"
        self.checkpoint = workdir / "checkpoint"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.broker_state, self.broker_port = workdir / "kafka", free_port()
        self.bootstrap = ""
        self.result = Result()
        self.running: ConnectorProcess | None = None

    def say(self, text: str) -> None:
        print(text, file=self.options.log, flush=True)

    def run(self, spark=None) -> Result:
        started = time.monotonic()
        cycles = plan_cycles(self.options)
        self.bootstrap = devkafka.start(self.broker_state, self.broker_port)
        try:
            producer = Producer(self.bootstrap, f"{self.options.seed}", self.options)
            producer.create_topics()
            config_file = self.write_config(producer)
            sizes = chunk_sizes(self.options.records, len(cycles))
            for cycle, size in zip(cycles, sizes):
                if cycle.delete_checkpoint:
                    shutil.rmtree(self.checkpoint, ignore_errors=True)
                    self.result.checkpoint_deletes += 1
                    self.say(f"cycle {cycle.index}: deleted the Spark checkpoint")
                producer.chunk(cycle, size)
                if cycle.moment == "final":
                    self.catch_up(config_file, cycle)
                else:
                    self.kill_cycle(config_file, cycle)
            self.result.tables = count_tables(spark, self.warehouse, producer, self.bootstrap)
        finally:
            if self.running is not None and self.running.alive():
                self.running.kill()
            devkafka.stop(self.broker_state)
        self.result.seconds = time.monotonic() - started
        return self.result

    def write_config(self, producer: Producer) -> Path:
        path = self.workdir / "chaos.properties"
        topics = ",".join(topic for topic, _ in producer.topics.values())
        settings = {
            "name": CONNECTOR, "topics": topics, "bootstrap.servers": self.bootstrap,
            "snowflake.topic2table.map": producer.topic2table(),
            "errors.tolerance": "all", "errors.log.enable": "false",
            "buffer.flush.time": "1", "buffer.count.records": str(self.options.batch_records),
            "floeline.warehouse": str(self.warehouse),
            "floeline.checkpoint.dir": str(self.checkpoint),
            "floeline.spark.master": "local[2]",
        }
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def launch(self, config_file: Path, cycle: Cycle, until_caught_up: bool = False) -> ConnectorProcess:
        self.running = ConnectorProcess(config_file, self.logs / f"cycle-{cycle.index:02d}.log",
                                        until_caught_up)
        return self.running

    def kill_cycle(self, config_file: Path, cycle: Cycle) -> None:
        watcher = TableWatcher(self.warehouse)
        watcher.baseline()
        proc = self.launch(config_file, cycle)
        if cycle.restart_broker:
            wait_for(proc, lambda: proc.batches >= 1, "its first batch", self.options.startup_timeout_s)
            devkafka.stop(self.broker_state)
            devkafka.start(self.broker_state, self.broker_port)
            self.result.broker_restarts += 1
            self.say(f"cycle {cycle.index}: restarted the broker after batch line {proc.batches}")
            watcher.baseline()
        moment, detail = await_moment(proc, watcher, cycle.moment, self.rng,
                                      self.options.startup_timeout_s, self.options.moment_timeout_s)
        if not proc.alive():
            self.result.crashes.append(f"cycle {cycle.index}: exited {proc.proc.returncode}")
            self.say(f"cycle {cycle.index}: the connector exited by itself "
                     f"({proc.proc.returncode}):\n{proc.tail()}")
            proc.kill()
            return
        proc.kill()
        self.result.kills += 1
        self.result.moments[moment] += 1
        self.say(f"cycle {cycle.index}: SIGKILL at {moment} ({detail}) "
                 f"{time.monotonic() - proc.started:.1f}s after launch, "
                 f"{proc.batches} batch lines")

    def catch_up(self, config_file: Path, cycle: Cycle) -> None:
        proc = self.launch(config_file, cycle, until_caught_up=True)
        code = proc.wait(self.options.final_timeout_s)
        self.say(f"cycle {cycle.index}: ran until caught up in {time.monotonic() - proc.started:.1f}s "
                 f"(exit {code}, {proc.batches} batch lines)")
        if code != 0:
            self.result.crashes.append(f"final run exited {code}")
            self.say(proc.tail())


# ---------------------------------------------------------------- counting

def count_tables(spark, warehouse: Path, producer: Producer, bootstrap: str) -> list[TableCount]:
    """Per table, from the tables themselves (Spark) and the broker's high watermarks."""
    if spark is None:
        from floeline.spark import get_spark

        spark = get_spark()
    watermarks = high_watermarks(bootstrap, producer.topics.values())
    counts = []
    for table, (topic, partitions) in producer.topics.items():
        counts.append(count_table(spark, warehouse / DATABASE / SCHEMA, table, topic,
                                  {p: watermarks[(topic, p)] for p in range(partitions)},
                                  producer.bad[table]))
    return counts


def count_table(spark, root: Path, table: str, topic: str, ends: dict[int, int],
                bad_produced: int) -> TableCount:
    from pyspark.sql import functions as F

    count = TableCount(table, produced=sum(ends.values()), bad_produced=bad_produced)
    frames = []
    if (root / table / "_delta_log").is_dir():
        landed = spark.read.format("delta").load(str(root / table)).selectExpr(
            "RECORD_METADATA:topic::string AS t", "RECORD_METADATA:partition::int AS p",
            "RECORD_METADATA:offset::bigint AS o")
        frames.append(landed.withColumn("error", F.lit(False)))
    errors_path = root / f"{table}_ERRORS"
    if (errors_path / "_delta_log").is_dir():
        errored = spark.read.format("delta").load(str(errors_path)).selectExpr(
            "substring_index(RECORD_CHANNEL, '/', size(split(RECORD_CHANNEL, '/')) - 1) AS t",
            "CAST(substring_index(RECORD_CHANNEL, '/', -1) AS int) AS p",
            "CAST(RECORD_POSITION AS bigint) AS o")
        frames.append(errored.withColumn("error", F.lit(True)))
    if not frames:
        count.lost = count.produced
        return count
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    valid = F.lit(False)
    for partition, end in ends.items():
        valid = valid | ((F.col("p") == partition) & (F.col("o") >= 0) & (F.col("o") < end))
    valid = (F.col("t") == topic) & valid
    figures = rows.agg(
        F.sum(F.when(~F.col("error"), 1).otherwise(0)).alias("landed"),
        F.sum(F.when(F.col("error"), 1).otherwise(0)).alias("dlq"),
        F.count_distinct("t", "p", "o").alias("distinct"),
        F.count(F.lit(1)).alias("rows"),
    ).first()
    distinct_valid = rows.where(valid).select("p", "o").distinct().count()
    count.landed, count.dlq = int(figures["landed"] or 0), int(figures["dlq"] or 0)
    count.duplicates = figures["rows"] - figures["distinct"]
    count.unexpected = figures["distinct"] - distinct_valid
    count.lost = count.produced - distinct_valid
    count.misrouted = abs(count.dlq - bad_produced)
    return count


def high_watermarks(bootstrap: str, topics) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-count",
                         "enable.auto.commit": False})
    try:
        ends = {}
        for topic, partitions in topics:
            for p in range(partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                if low != 0:
                    raise RuntimeError(f"{topic}/{p} starts at offset {low}: records were deleted")
                ends[(topic, p)] = high
        return ends
    finally:
        consumer.close()


def run_soak(options: Options, spark=None) -> Result:
    """Run the whole soak in `options.workdir` (a fresh temporary directory if unset,
    removed afterwards when everything was exact)."""
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="floeline-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = Soak(options, workdir).run(spark)
    if result.ok and not options.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"state and connector logs kept in {workdir}", file=options.log, flush=True)
    return result


def report(result: Result, out=sys.stdout) -> None:
    for t in result.tables:
        print(f"{t.table}: produced={t.produced} landed={t.landed} dlq={t.dlq} "
              f"(bad produced {t.bad_produced}) duplicates={t.duplicates} lost={t.lost} "
              f"unexpected={t.unexpected}", file=out)
    print("kill moments: " + ", ".join(f"{k}={n}" for k, n in sorted(result.moments.items())),
          file=out)
    for crash in result.crashes:
        print(f"crash: {crash}", file=out)
    print(result.line(), file=out, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=Options.records)
    parser.add_argument("--kills", type=int, default=Options.kills)
    parser.add_argument("--checkpoint-deletes", type=int, default=Options.checkpoint_deletes)
    parser.add_argument("--broker-restarts", type=int, default=Options.broker_restarts)
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--batch-records", type=int, default=Options.batch_records,
                        help="buffer.count.records of the connector")
    parser.add_argument("--workdir", help="keep the broker, warehouse and logs here")
    args = parser.parse_args(argv)
    options = Options(records=args.records, kills=args.kills,
                      checkpoint_deletes=args.checkpoint_deletes,
                      broker_restarts=args.broker_restarts, seed=args.seed,
                      batch_records=args.batch_records, workdir=args.workdir)
    for cycle in plan_cycles(options):
        print(f"plan: {cycle}", flush=True)
    result = run_soak(options)
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
