"""Kinesis chaos soak: exactly once under SIGKILLs, a shard split and a deleted checkpoint.

The Kinesis variant of bench/chaos.py, with the same kill machinery (bench/chaos_common.py)
against a local Kinesis and DynamoDB of its own (floeline.dev.aws: kinesis-local and moto on free
ports) and `floeline run` processes of a Kinesis connector reading three streams:

- 3 streams (2 + 2 + 1 shards) -> 3 tables, put in chunks between launches; records are
  KPL-aggregated (`--per-aggregate` user records per Kinesis record: kinesis-local's
  PutRecords is quadratic in a shard's size, see bench/bench_kinesis.py, so plain records
  cannot reach this volume locally); the third stream gets its first records mid-stream
  (its table is created late); some chunks add a new key (schema evolution); from the
  second chunk on each stream gets a few bad JSON records, half plain Kinesis records, half
  user records inside an otherwise good aggregate (their `<TABLE>_ERRORS` tables);
- `--kills` times the connector's process group is SIGKILLed at a chosen moment: table
  creation, a schema change, a data commit (before the lease table's checkpoint update),
  new data files (inside a commit), a `batch N` line, a random time;
- `--splits` times (default once) a shard of the first stream is split (SplitShard) while a
  connector runs: half of that cycle's chunk is put before the split (into the parent),
  half after (into the children, read only after the parent's end);
- the Spark checkpoint is deleted `--checkpoint-deletes` times between launches.
Then a connector runs `--until-caught-up` and every table is read with Spark. Per table:
user records produced (as PutRecords acknowledged them), landed, in the error table,
duplicates (a stream/shard/sequence number/subsequence number held twice, table and error
table together), lost (produced, in neither), unexpected (held, never produced) and
misrouted (a bad record landed or a good one in the error table). Last line:

  produced=N landed=N dlq=N duplicates=0 lost=0 unexpected=0 misrouted=0 kills=10 splits=1 checkpoint_deletes=1 crashes=0 seconds=S

Exit status 1 unless duplicates, lost, unexpected, misrouted and crashes are all 0.
tests/integration/test_chaos_kinesis.py runs a short version of the same code.
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
from floeline.dev import aws as devaws  # noqa: E402
from floeline.dev.services import free_port  # noqa: E402
from floeline.sources.kinesis.kpl import aggregate  # noqa: E402

CONNECTOR = "kchaos"
# (stream stem, shards, record kind); the third starts mid-stream, the first is split.
STREAMS = (("orders", 2, "ORDERS"), ("clicks", 2, "CLICKS"), ("users", 1, "USERS"))
CREDENTIALS = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"}
PUT_BATCH = 50  # Kinesis records per PutRecords call (<= 5 MB)


# ---------------------------------------------------------------- the plan

@dataclass
class Options:
    records: int = 1_000_000
    kills: int = 10
    splits: int = 1
    checkpoint_deletes: int = 1
    seed: int = 11
    # user records per KPL-aggregated Kinesis record: ~38 KB, within the KPL's default
    # 51,200-byte aggregate; kinesis-local puts ~3,300 user records/s so (~1,900 at 100)
    per_aggregate: int = 500
    batch_records: int = 5000  # buffer.count.records (per shard and batch)
    bad_per_stream: int = 2  # bad JSON records per stream and chunk, from the second chunk
    startup_timeout_s: float = 900.0  # launch -> first batch line (a busy machine is slow)
    moment_timeout_s: float = 120.0  # first batch line -> moment; then a kill at once
    idle_s: float = 30.0  # no batch line for this long (and 2x the last batch's): caught up
    final_timeout_s: float = 3600.0
    workdir: str | None = None
    log: object = sys.stdout


@dataclass
class Cycle:
    """One connector launch ended by a SIGKILL (the last one runs until caught up)."""
    index: int
    moment: str  # create | evolve | commit | write | progress | random | final
    delete_checkpoint: bool = False  # before the launch
    split: bool = False  # a shard of the first stream is split after the first batch
    new_key: str | None = None  # this chunk's records may carry it
    users_start: bool = False  # the third stream gets its first records in this chunk


def plan_cycles(options: Options) -> list[Cycle]:
    """The first launch is killed at table creation; splits, evolution cycles and the
    third stream's start each get cycles of their own; the rest rotate the other moments
    in a seeded order. The last cycle (index == kills) is the final catch-up run."""
    rng = random.Random(options.seed)
    kills = options.kills
    cycles = [Cycle(i, "") for i in range(kills)] + [Cycle(kills, "final")]
    if kills:
        cycles[0].moment = "create"
    free = list(range(1, kills))
    for i in spread(options.splits, free):
        cycles[i].split = True
    free = [i for i in free if not cycles[i].split]
    evolutions = spread(max(1, kills // 5), free)
    for i in evolutions:
        cycles[i].moment, cycles[i].new_key = "evolve", f"extra_{i}"
    free = [i for i in free if i not in evolutions]
    users = cycles[spread(1, free)[0]] if kills >= 4 and free else cycles[0]
    users.users_start = True
    if users.index:
        users.moment = "create"
    for i in spread(options.checkpoint_deletes, list(range(1, kills + 1))):
        cycles[i].delete_checkpoint = True
    order = list(MOMENTS)
    rng.shuffle(order)
    rest = [c for c in cycles[:kills] if not c.moment]
    for n, cycle in enumerate(rest):
        cycle.moment = order[n % len(order)]
    if options.splits and not any(c.split for c in cycles):
        cycles[-1].split = True  # too few kills: the final run sees the split
    return cycles


# ---------------------------------------------------------------- records

def kinesis_client(endpoint: str):
    import boto3

    return boto3.client("kinesis", endpoint_url=endpoint, region_name=devaws.REGION, **CREDENTIALS)


class Producer:
    """Puts each cycle's chunk and remembers every Kinesis record PutRecords acknowledged:
    (stream, shard, sequence number) -> its user records' count (None: a plain record)
    and which of them are bad. Those acknowledgements are the truth for "produced"."""

    def __init__(self, endpoint: str, run_id: str, options: Options):
        self.kinesis, self.options = kinesis_client(endpoint), options
        self.streams = {kind: (f"chaos_{stem}_{run_id}", shards) for stem, shards, kind in STREAMS}
        self.placed: dict[tuple[str, str, str], int | None] = {}
        self.bad: set[tuple[str, str, str, int]] = set()  # subsequence -1: a plain record
        self.next_id = Counter()
        self.users_started = False

    def table(self, kind: str) -> str:
        return self.streams[kind][0].upper()

    def create_streams(self) -> None:
        for stream, shards in self.streams.values():
            self.kinesis.create_stream(StreamName=stream, ShardCount=shards)
        for stream, _ in self.streams.values():
            wait_active(self.kinesis, stream)

    def chunk(self, cycle: Cycle, size: int) -> int:
        """Put `size` user records (bad ones included) over the active streams."""
        if cycle.users_start:
            self.users_started = True
        active = [k for k in self.streams if k != "USERS" or self.users_started]
        bad_each = self.options.bad_per_stream if cycle.index > 0 else 0
        sent = 0
        for n, kind in enumerate(active):
            share = size // len(active) + (1 if n < size % len(active) else 0)
            sent += self._put(kind, cycle, share, min(bad_each, share))
        return sent

    def _put(self, kind: str, cycle: Cycle, count: int, bad: int) -> int:
        """`count` user records, of which `bad` are bad JSON: every other one a plain
        Kinesis record, the rest inside an aggregate with good ones."""
        stream = self.streams[kind][0]
        start = self.next_id[kind]
        self.next_id[kind] += count
        bad_at = {start + (k + 1) * count // (bad + 1) for k in range(bad)}
        plain_bad = set(sorted(bad_at)[::2])
        entries: list[tuple[dict, list[bool] | None]] = []  # (entry, bad flags of its users)
        users: list[tuple[str, bytes]] = []
        flags: list[bool] = []

        def flush():
            if users:
                entries.append(({"Data": aggregate(list(users)), "PartitionKey": users[0][0]},
                                list(flags)))
                users.clear()
                flags.clear()

        for i in range(start, start + count):
            key = f"{kind}-{i}"
            if i in plain_bad:
                entries.append(({"Data": f'{{"broken": {i}, '.encode(), "PartitionKey": key}, None))
                continue
            if i in bad_at:
                users.append((key, f'{{"broken": {i}, '.encode()))
                flags.append(True)
            else:
                users.append((key, json.dumps(row(kind, i, cycle.new_key)).encode()))
                flags.append(False)
            if len(users) >= self.options.per_aggregate:
                flush()
        flush()
        for at in range(0, len(entries), PUT_BATCH):
            self._put_records(stream, entries[at:at + PUT_BATCH])
        return count

    def _put_records(self, stream: str, batch: list[tuple[dict, list[bool] | None]]) -> None:
        """PutRecords, again for the entries it refused (throttling) until all are in."""
        while batch:
            answer = self.kinesis.put_records(StreamName=stream, Records=[e for e, _ in batch])
            refused = []
            for (entry, flags), result in zip(batch, answer["Records"]):
                if result.get("ErrorCode"):
                    refused.append((entry, flags))
                    continue
                key = (stream, result["ShardId"], result["SequenceNumber"])
                self.placed[key] = None if flags is None else len(flags)
                if flags is None:
                    self.bad.add((*key, -1))
                else:
                    self.bad.update((*key, sub) for sub, is_bad in enumerate(flags) if is_bad)
            if refused:
                time.sleep(0.5)
            batch = refused

    def produced(self, stream: str) -> int:
        return sum(1 if n is None else n for (s, _, _), n in self.placed.items() if s == stream)

    def split(self, kind: str) -> str:
        """Split the first stream's widest open shard at the middle of its hash range."""
        stream = self.streams[kind][0]
        shards = [s for s in self.kinesis.list_shards(StreamName=stream)["Shards"]
                  if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
        widest = max(shards, key=lambda s: int(s["HashKeyRange"]["EndingHashKey"])
                     - int(s["HashKeyRange"]["StartingHashKey"]))
        low = int(widest["HashKeyRange"]["StartingHashKey"])
        high = int(widest["HashKeyRange"]["EndingHashKey"])
        self.kinesis.split_shard(StreamName=stream, ShardToSplit=widest["ShardId"],
                                 NewStartingHashKey=str((low + high) // 2))
        wait_active(self.kinesis, stream)
        return f"{stream}/{widest['ShardId']}"


def wait_active(kinesis, stream: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return
        time.sleep(0.2)
    raise TimeoutError(f"stream {stream} not ACTIVE after {timeout_s}s")


# ---------------------------------------------------------------- the soak

@dataclass
class Result:
    tables: list[TableCount] = field(default_factory=list)
    kills: int = 0
    moments: Counter = field(default_factory=Counter)
    splits: int = 0
    checkpoint_deletes: int = 0
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
                f"misrouted={self.total('misrouted')} kills={self.kills} splits={self.splits} "
                f"checkpoint_deletes={self.checkpoint_deletes} crashes={len(self.crashes)} "
                f"seconds={self.seconds:.0f}")


class Soak:
    def __init__(self, options: Options, workdir: Path):
        self.options, self.workdir = options, workdir
        self.rng = random.Random(options.seed)
        self.warehouse = workdir / "warehouse"
        self.checkpoint = workdir / "checkpoint"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.aws_state = workdir / "aws"
        self.endpoints: dict[str, str] = {}
        self.result = Result()
        self.running: ConnectorProcess | None = None

    def say(self, text: str) -> None:
        print(text, file=self.options.log, flush=True)

    def run(self, spark=None) -> Result:
        started = time.monotonic()
        cycles = plan_cycles(self.options)
        self.endpoints = devaws.start(self.aws_state, kinesis_port=free_port(), moto_port=free_port())
        try:
            producer = Producer(self.endpoints["kinesis"], f"{self.options.seed}", self.options)
            producer.create_streams()
            config_file = self.write_config(producer)
            sizes = chunk_sizes(self.options.records, len(cycles))
            for cycle, size in zip(cycles, sizes):
                if cycle.delete_checkpoint:
                    shutil.rmtree(self.checkpoint, ignore_errors=True)
                    self.result.checkpoint_deletes += 1
                    self.say(f"cycle {cycle.index}: deleted the Spark checkpoint")
                put_at = time.monotonic()
                before_split = size // 2 if cycle.split else size
                producer.chunk(cycle, before_split)
                self.say(f"cycle {cycle.index}: put {before_split} records in "
                         f"{time.monotonic() - put_at:.1f}s")
                if cycle.moment == "final":
                    self.catch_up(config_file, cycle, producer, size - before_split)
                else:
                    self.kill_cycle(config_file, cycle, producer, size - before_split)
            self.result.tables = count_tables(spark, self.warehouse, producer)
        finally:
            if self.running is not None and self.running.alive():
                self.running.kill()
            devaws.stop(self.aws_state)
        self.result.seconds = time.monotonic() - started
        return self.result

    def write_config(self, producer: Producer) -> Path:
        path = self.workdir / "kchaos.properties"
        settings = {
            "name": CONNECTOR, "floeline.source": "kinesis",
            "kinesis.stream.name": ",".join(s for s, _ in producer.streams.values()),
            "kinesis.application.name": f"{CONNECTOR}-app", "aws.region": devaws.REGION,
            "aws.access.key.id": CREDENTIALS["aws_access_key_id"],
            "aws.secret.access.key": CREDENTIALS["aws_secret_access_key"],
            "kinesis.endpoint": self.endpoints["kinesis"],
            "dynamodb.endpoint": self.endpoints["dynamodb"],
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

    def split_mid_stream(self, proc: ConnectorProcess, cycle: Cycle, producer: Producer,
                         rest: int) -> None:
        """After the launch's first batch: split a shard, then put the chunk's rest."""
        wait_for(proc, lambda: proc.batches >= 1, "its first batch", self.options.startup_timeout_s)
        shard = producer.split("ORDERS")
        self.result.splits += 1
        producer.chunk(cycle, rest)
        self.say(f"cycle {cycle.index}: split {shard} after batch line {proc.batches}, "
                 f"then put {rest} records")

    def kill_cycle(self, config_file: Path, cycle: Cycle, producer: Producer, rest: int) -> None:
        watcher = TableWatcher(self.warehouse)
        watcher.baseline()
        proc = self.launch(config_file, cycle)
        if cycle.split:
            self.split_mid_stream(proc, cycle, producer, rest)
            watcher.baseline()
        moment, detail = await_moment(
            proc, watcher, cycle.moment, self.rng, self.options.startup_timeout_s,
            self.options.moment_timeout_s, caught_up=lambda: quiet(proc, self.options.idle_s))
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

    def catch_up(self, config_file: Path, cycle: Cycle, producer: Producer, rest: int) -> None:
        if cycle.split:  # fewer kills than splits: split before the final run
            self.say(f"cycle {cycle.index}: split {producer.split('ORDERS')} before the final run")
            self.result.splits += 1
            producer.chunk(cycle, rest)
        proc = self.launch(config_file, cycle, until_caught_up=True)
        code = proc.wait(self.options.final_timeout_s)
        self.say(f"cycle {cycle.index}: ran until caught up in {time.monotonic() - proc.started:.1f}s "
                 f"(exit {code}, {proc.batches} batch lines)")
        if code != 0:
            self.result.crashes.append(f"final run exited {code}")
            self.say(proc.tail())


def quiet(proc: ConnectorProcess, idle_s: float) -> bool:
    """Caught up, as far as can be seen from outside: no batch line for `idle_s` and for
    twice the last batch's duration (a loaded machine's batch takes minutes)."""
    lines = [line for line in proc.lines[-20:] if line.startswith("batch ")]
    took = float(lines[-1].rsplit(" took=", 1)[-1].split("s")[0]) if lines and " took=" in lines[-1] else 0.0
    return proc.batches > 0 and proc.idle_for() > max(idle_s, 2 * took)


# ---------------------------------------------------------------- counting

def count_tables(spark, warehouse: Path, producer: Producer) -> list[TableCount]:
    """Per table, from the tables themselves (Spark) and the PutRecords acknowledgements."""
    if spark is None:
        from floeline.spark import get_spark

        spark = get_spark()
    expected = expected_frame(spark, producer)
    root = warehouse / DATABASE / SCHEMA
    counts = []
    for kind, (stream, _) in producer.streams.items():
        bad = sum(1 for key in producer.bad if key[0] == stream)
        count = TableCount(producer.table(kind), produced=producer.produced(stream), bad_produced=bad)
        counts.append(count_table(spark, root, count, expected.where(f"s = '{stream}'")))
    return counts


def expected_frame(spark, producer: Producer):
    """(s, shard, seq, sub, bad) of every user record produced: sub -1 for a plain record."""
    from pyspark.sql import functions as F

    placed = spark.createDataFrame(
        [(s, shard, seq, -1 if n is None else n) for (s, shard, seq), n in producer.placed.items()],
        "s string, shard string, seq string, n int")
    users = placed.select("s", "shard", "seq", F.explode(
        F.when(F.col("n") < 0, F.array(F.lit(-1))).otherwise(F.sequence(F.lit(0), F.col("n") - 1))
    ).alias("sub"))
    bad = spark.createDataFrame(sorted(producer.bad), "s string, shard string, seq string, sub int") \
        .withColumn("bad", F.lit(True))
    return users.join(bad, ["s", "shard", "seq", "sub"], "left") \
        .select("s", "shard", "seq", "sub", F.coalesce("bad", F.lit(False)).alias("bad")).cache()


def count_table(spark, root: Path, count: TableCount, expected):
    from pyspark.sql import functions as F

    frames = []
    if (root / count.table / "_delta_log").is_dir():
        frames.append(spark.read.format("delta").load(str(root / count.table)).selectExpr(
            "RECORD_METADATA:stream::string AS s", "RECORD_METADATA:shardId::string AS shard",
            "RECORD_METADATA:sequenceNumber::string AS seq",
            "coalesce(RECORD_METADATA:subSequenceNumber::int, -1) AS sub", "false AS error"))
    errors_path = root / f"{count.table}_ERRORS"
    if (errors_path / "_delta_log").is_dir():
        frames.append(spark.read.format("delta").load(str(errors_path)).selectExpr(
            "RECORD_SOURCE:stream::string AS s", "RECORD_SOURCE:shardId::string AS shard",
            "RECORD_SOURCE:sequenceNumber::string AS seq",
            "coalesce(RECORD_SOURCE:subSequenceNumber::int, -1) AS sub", "true AS error"))
    if not frames:
        count.lost = count.produced
        return count
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    rows = rows.cache()
    try:
        figures = rows.agg(F.sum(F.when(~F.col("error"), 1).otherwise(0)).alias("landed"),
                           F.sum(F.when(F.col("error"), 1).otherwise(0)).alias("dlq"),
                           F.count(F.lit(1)).alias("rows")).first()
        held = rows.groupBy("s", "shard", "seq", "sub").agg(F.max("error").alias("error"))
        keys = ["s", "shard", "seq", "sub"]
        count.landed, count.dlq = int(figures["landed"] or 0), int(figures["dlq"] or 0)
        count.duplicates = figures["rows"] - held.count()
        count.lost = expected.join(held, keys, "left_anti").count()
        count.unexpected = held.join(expected, keys, "left_anti").count()
        count.misrouted = held.join(expected, keys).where(F.col("error") != F.col("bad")).count()
    finally:
        rows.unpersist()
    return count


def run_soak(options: Options, spark=None) -> Result:
    """Run the whole soak in `options.workdir` (a fresh temporary directory if unset,
    removed afterwards when everything was exact)."""
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="floeline-kchaos-"))
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
              f"unexpected={t.unexpected} misrouted={t.misrouted}", file=out)
    print("kill moments: " + ", ".join(f"{k}={n}" for k, n in sorted(result.moments.items())),
          file=out)
    for crash in result.crashes:
        print(f"crash: {crash}", file=out)
    print(result.line(), file=out, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=Options.records)
    parser.add_argument("--kills", type=int, default=Options.kills)
    parser.add_argument("--splits", type=int, default=Options.splits)
    parser.add_argument("--checkpoint-deletes", type=int, default=Options.checkpoint_deletes)
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--per-aggregate", type=int, default=Options.per_aggregate,
                        help="user records per KPL-aggregated Kinesis record")
    parser.add_argument("--batch-records", type=int, default=Options.batch_records,
                        help="buffer.count.records of the connector (per shard)")
    parser.add_argument("--workdir", help="keep the local AWS state, warehouse and logs here")
    args = parser.parse_args(argv)
    options = Options(records=args.records, kills=args.kills, splits=args.splits,
                      checkpoint_deletes=args.checkpoint_deletes, seed=args.seed,
                      per_aggregate=args.per_aggregate, batch_records=args.batch_records,
                      workdir=args.workdir)
    for cycle in plan_cycles(options):
        print(f"plan: {cycle}", flush=True)
    result = run_soak(options)
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
