"""Chaos soak of the pipe service: every staged file loads once under SIGKILLs and
duplicate S3 event notifications.

floeline promises that an auto-ingest pipe loads each file that lands in its stage
once, whatever the notifications say and whatever happens to `floeline pipes run`.
This script tries hard to break that on the local AWS (moto's S3 and SQS, started by
the dev tooling on free ports in a temporary directory):

- an S3 stage with an auto-ingest pipe EVENTS_PIPE (ON_ERROR=CONTINUE) fed by the
  bucket's ObjectCreated events through the pipe's SQS queue; mid-stream a second
  table and pipe (LATE_PIPE, ON_ERROR=SKIP_FILE, a prefix of its own) are created
  while the service runs;
- files land continuously while the service runs: JSON lines, some gzip, some with
  bad lines (row errors: CONTINUE loads the rest, SKIP_FILE fails the file) and a few
  truncated gzip files (they fail whole);
- `--kills` times the service's process group (driver, Spark's JVM, Python workers) is
  SIGKILLed at a moment watched from outside (chaos_common.py's watcher):
    create    the first load commit into a table created just before (EVENTS at the
              first launch; LATE_PIPE's table, its pipe picked up by the running service)
    write     new data files appeared in a table (inside a Delta commit)
    commit    a load's Delta commit appeared (before the queue messages are deleted)
    progress  a load line was printed (after commit and delete, before Spark's
              checkpoint commit: the batch is replayed)
    random    a random time: during Spark's start, or 0-5 s after the first load line
  (a moment that does not come within --moment-timeout of the first load line, or
  before the cycle's files are loaded and the service idle for 20 s, is replaced by a
  kill at once, reported as `<kind>-fallback`);
- duplicate notifications: while the service runs, events of files already landed are
  sent again (some twice); after each kill the events of the last files landed are
  re-delivered, and the queues' visibility timeout is cut to --visibility seconds so
  that the messages the killed process had taken come back; after everything loaded a
  late duplicate of every file's event is sent and the service runs once more.
Then the tables and their load histories are read with Spark: files put, rows
produced, rows landed, rows in error (bad lines), rows skipped by the rule (good rows
of failed files), duplicates (a file's row twice) and lost (a row that should have
loaded and did not); every file must appear once in its table's load history, with the
status its content calls for, and the late run must change nothing. Last line:

  files=N rows=N landed=N errors=N skipped=N duplicates=0 lost=0 ... kills=10 seconds=S

Exit status 1 if anything is off or a service run crashed.
tests/integration/test_chaos_pipes.py runs a short version of the same code.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote_plus

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_common import SRC, ConnectorProcess, TableWatcher, chunk_sizes, spread  # noqa: E402

from floeline.dev import aws as devaws  # noqa: E402
from floeline.dev.services import free_port  # noqa: E402

DATABASE, SCHEMA = "FLOELINE", "PUBLIC"
CREDENTIALS = {"aws_access_key_id": "floeline-chaos", "aws_secret_access_key": "floeline-chaos"}
REGION = "us-east-1"
# pipe -> (table, prefix in the stage, ON_ERROR)
PIPES = {"EVENTS_PIPE": ("EVENTS", "a/", "CONTINUE"), "LATE_PIPE": ("LATE", "b/", "SKIP_FILE")}
MOMENTS = ("commit", "write", "progress", "random")
LOAD_LINE = re.compile(r"^pipe (\S+): (\S+) (LOADED|PARTIALLY_LOADED|LOAD_FAILED) rows=")


# ---------------------------------------------------------------- the plan

@dataclass
class Options:
    files: int = 1100
    rows: int = 220_000
    kills: int = 10
    seed: int = 17
    gzip_share: float = 0.25  # files gzip-compressed
    bad_share: float = 0.08  # files with 1-3 bad lines
    truncated_share: float = 0.01  # gzip files cut short (they fail whole)
    duplicate_share: float = 0.15  # per cycle: events of landed files sent again
    land_seconds: float = 20.0  # a cycle's files land over this long
    visibility_s: int = 20  # the queues' visibility timeout: taken messages come back
    poll_s: float = 0.5
    startup_timeout_s: float = 900.0
    moment_timeout_s: float = 120.0
    idle_s: float = 20.0  # the cycle's files landed and no load since: the moment will not come
    final_timeout_s: float = 1800.0
    workdir: str | None = None
    log: object = sys.stdout


@dataclass
class Cycle:
    """One service launch ended by a SIGKILL (the last one runs until caught up)."""
    index: int
    moment: str  # create | commit | write | progress | random | final
    create_late_pipe: bool = False  # LATE_PIPE and its table are created in this cycle


def plan_cycles(options: Options) -> list[Cycle]:
    """The first launch is killed at EVENTS's first load; the late pipe's creation gets a
    cycle in the middle; the others rotate the other moments in a seeded order."""
    kills = options.kills
    cycles = [Cycle(i, "") for i in range(kills)] + [Cycle(kills, "final")]
    if kills:
        cycles[0].moment = "create"
    late = spread(1, list(range(1, kills)))
    late_cycle = cycles[late[0]] if late else cycles[0]
    late_cycle.create_late_pipe, late_cycle.moment = True, "create"
    order = list(MOMENTS)
    random.Random(options.seed).shuffle(order)
    for n, cycle in enumerate(c for c in cycles[:kills] if not c.moment):
        cycle.moment = order[n % len(order)]
    return cycles


# ---------------------------------------------------------------- files

@dataclass
class StagedFile:
    """A file the soak puts, and what its content calls for."""
    key: str  # S3 key: in/<prefix>c03/f000123.json[.gz]
    name: str  # its path in the stage (METADATA$FILENAME)
    pipe: str
    rows: int  # lines written (good and bad)
    bad: frozenset  # line numbers (0-based) that are bad JSON
    truncated: bool = False
    size: int = 0

    @property
    def failed(self) -> bool:
        """LOAD_FAILED: unreadable, or a bad line under SKIP_FILE."""
        return self.truncated or (bool(self.bad) and PIPES[self.pipe][2] == "SKIP_FILE")

    def status(self) -> str:
        return "LOAD_FAILED" if self.failed else "PARTIALLY_LOADED" if self.bad else "LOADED"

    def expected_rows(self) -> set[int]:
        return set() if self.failed else set(range(self.rows)) - self.bad


def file_body(f: StagedFile, compress: bool, rng: random.Random) -> bytes:
    lines = []
    for r in range(f.rows):
        if r in f.bad:
            lines.append(f'{{"f": "{f.name}", "r": {r}, oops}}')  # invalid JSON: a row error
        else:
            lines.append(json.dumps({"f": f.name, "r": r, "amount": round(r * 0.37, 2),
                                     "note": "x" * rng.randint(0, 40)}))
    body = ("\n".join(lines) + "\n").encode()
    if not compress:
        return body
    packed = gzip.compress(body)
    return packed[:len(packed) // 2] if f.truncated else packed


class Lander:
    """Puts each cycle's files into the bucket, paced over `land_seconds`, and sends
    duplicate notifications; remembers every file put (the truth for the count)."""

    def __init__(self, s3, sqs, bucket: str, options: Options):
        self.s3, self.sqs, self.bucket, self.options = s3, sqs, bucket, options
        self.rng = random.Random(options.seed * 7 + 1)
        self.files: list[StagedFile] = []
        self.lock = threading.Lock()
        self.queue_urls: dict[str, str] = {}  # pipe -> its queue's URL
        self.duplicates_sent = 0
        self.thread: threading.Thread | None = None

    def plan(self, cycle: Cycle, count: int, rows: int, pipes: list[str]) -> list[tuple[StagedFile, bool]]:
        """This cycle's files over the active pipes: (file, gzip)."""
        planned, per_file = [], max(1, rows // max(1, count))
        for k in range(count):
            pipe = pipes[k % len(pipes)]
            prefix = PIPES[pipe][1]
            n = len(self.files) + len(planned)
            size = rows - per_file * (count - 1) if k == count - 1 else per_file
            size = max(1, size)
            compress = self.rng.random() < self.options.gzip_share
            truncated = compress and self.rng.random() < self.options.truncated_share / self.options.gzip_share
            bad = frozenset()
            if not truncated and size > 3 and self.rng.random() < self.options.bad_share:
                bad = frozenset(self.rng.sample(range(size), self.rng.randint(1, 3)))
            name = f"{prefix}c{cycle.index:02d}/f{n:06d}.json" + (".gz" if compress else "")
            planned.append((StagedFile(f"in/{name}", name, pipe, size, bad, truncated), compress))
        return planned

    def start(self, planned: list[tuple[StagedFile, bool]], seconds: float) -> None:
        """Land the files over `seconds`, in a thread of their own."""
        self.thread = threading.Thread(target=self._land, args=(planned, seconds), daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def _land(self, planned, seconds: float) -> None:
        pause = seconds / max(1, len(planned))
        for n, (f, compress) in enumerate(planned):
            body = file_body(f, compress, self.rng)
            self.s3.put_object(Bucket=self.bucket, Key=f.key, Body=body)
            f.size = len(body)
            with self.lock:
                self.files.append(f)
            if n % 10 == 9:  # now and then: events of files landed before, again
                self.send_duplicates(self.sample(int(10 * self.options.duplicate_share) or 1))
            time.sleep(pause)

    def sample(self, count: int) -> list[StagedFile]:
        with self.lock:
            landed = [f for f in self.files if f.pipe in self.queue_urls]
        return self.rng.sample(landed, min(count, len(landed)))

    def last(self, count: int) -> list[StagedFile]:
        with self.lock:
            return [f for f in self.files if f.pipe in self.queue_urls][-count:]

    def send_duplicates(self, files: list[StagedFile], times: int = 1) -> int:
        """The files' ObjectCreated events again, as S3 would deliver them (some twice)."""
        sent = 0
        for f in files:
            for _ in range(times + (1 if self.rng.random() < 0.3 else 0)):
                self.sqs.send_message(QueueUrl=self.queue_urls[f.pipe],
                                      MessageBody=event_body(self.bucket, f.key, f.size))
                sent += 1
        self.duplicates_sent += sent
        return sent


def event_body(bucket: str, key: str, size: int) -> str:
    return json.dumps({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": REGION,
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
               "object": {"key": quote_plus(key), "size": size}}}]})


# ---------------------------------------------------------------- the service process

class PipesProcess(ConnectorProcess):
    """`python -m floeline.cli pipes run` in a process group of its own (see
    ConnectorProcess); `batches` counts its load lines."""

    def __init__(self, warehouse: Path, log_file: Path, cwd: Path, poll_s: float,
                 until_caught_up: bool = False):
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "floeline.cli", "pipes", "run", "--warehouse", str(warehouse),
               "--poll", str(poll_s)]
        if until_caught_up:
            cmd.append("--until-caught-up")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, text=True, cwd=cwd,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.batches = 0
        self.last_load_at = self.started
        self.log = open(log_file, "w")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.append(line)
            if LOAD_LINE.match(line):
                self.batches += 1
                self.last_load_at = time.monotonic()

    def caught_up(self) -> bool:
        return False  # a running service is never done: moments fall back on the timeout


# ---------------------------------------------------------------- the soak

@dataclass
class Figures:
    files: int = 0
    rows: int = 0
    landed: int = 0
    errors: int = 0  # bad lines
    skipped: int = 0  # good rows of failed files
    duplicates: int = 0  # a file's row held twice
    lost: int = 0  # a row that should have loaded, missing
    unexpected: int = 0  # rows that should not be there (a failed file's, or never written)
    misplaced: int = 0  # rows whose METADATA$FILENAME is not the file they were written in
    history_missing: int = 0  # files without a load-history entry
    history_repeated: int = 0  # files with more than one
    status_wrong: int = 0  # an entry whose status or counts are not what the content calls for
    statuses: Counter = field(default_factory=Counter)

    def bad(self) -> int:
        return (self.duplicates + self.lost + self.unexpected + self.misplaced + self.history_missing
                + self.history_repeated + self.status_wrong)


@dataclass
class Result:
    figures: Figures = field(default_factory=Figures)
    late: Figures | None = None  # after the late duplicates
    queue_left: int = -1  # messages left in the queues after the late run
    kills: int = 0
    moments: Counter = field(default_factory=Counter)
    duplicates_sent: int = 0
    late_duplicates_sent: int = 0
    crashes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (not self.crashes and self.figures.bad() == 0 and self.late is not None
                and self.late == self.figures and self.queue_left == 0)

    def line(self) -> str:
        f = self.figures
        return (f"files={f.files} rows={f.rows} landed={f.landed} errors={f.errors} skipped={f.skipped} "
                f"duplicates={f.duplicates} lost={f.lost} unexpected={f.unexpected} misplaced={f.misplaced} "
                f"history_missing={f.history_missing} history_repeated={f.history_repeated} "
                f"status_wrong={f.status_wrong} late_run_changed={int(self.late != f)} "
                f"queue_left={self.queue_left} duplicate_notifications={self.duplicates_sent} "
                f"late_duplicates={self.late_duplicates_sent} kills={self.kills} "
                f"crashes={len(self.crashes)} seconds={self.seconds:.0f}")


class Soak:
    def __init__(self, options: Options, workdir: Path, spark):
        self.options, self.workdir, self.spark = options, workdir, spark
        self.rng = random.Random(options.seed)
        self.warehouse_root = workdir / "warehouse"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.aws_state = workdir / "aws"
        self.result = Result()
        self.running: PipesProcess | None = None
        self.lander: Lander | None = None
        self.channels: dict[str, str] = {}  # pipe -> its queue's ARN

    def say(self, text: str) -> None:
        print(text, file=self.options.log, flush=True)

    def run(self) -> Result:
        import boto3

        from floeline.warehouse.catalog import Warehouse

        started = time.monotonic()
        cycles = plan_cycles(self.options)
        endpoint = devaws.start(self.aws_state, kinesis_port=free_port(), moto_port=free_port())["s3"]
        try:
            self.endpoint = endpoint
            self.s3, self.sqs = (boto3.client(s, endpoint_url=endpoint, region_name=REGION, **CREDENTIALS)
                                 for s in ("s3", "sqs"))
            self.bucket = f"chaos-pipes-{self.options.seed}"
            self.s3.create_bucket(Bucket=self.bucket)
            self.warehouse = Warehouse(self.warehouse_root)
            self.lander = Lander(self.s3, self.sqs, self.bucket, self.options)
            self.create_pipe("EVENTS_PIPE")
            files = chunk_sizes(self.options.files, len(cycles))
            rows = chunk_sizes(self.options.rows, len(cycles))
            for cycle, count, row_count in zip(cycles, files, rows):
                if cycle.moment == "final":
                    self.catch_up(cycle, count, row_count)
                else:
                    self.kill_cycle(cycle, count, row_count)
            self.result.figures = self.count()
            self.say(f"after the final run: {self.result.figures}")
            self.late_duplicates()
        finally:
            if self.lander is not None:
                self.lander.join()
            if self.running is not None and self.running.alive():
                self.running.kill()
            devaws.stop(self.aws_state)
        self.result.duplicates_sent = self.lander.duplicates_sent - self.result.late_duplicates_sent
        self.result.seconds = time.monotonic() - started
        return self.result

    # ---- set-up

    def create_pipe(self, pipe: str) -> None:
        """The pipe's table (and, the first time, the stage), the pipe, its queue's
        visibility timeout cut short and the bucket's events pointed at every queue."""
        from floeline.sql.script import run_script

        table, prefix, on_error = PIPES[pipe]
        stage = (f"CREATE STAGE s3s URL='s3://{self.bucket}/in/' ENDPOINT='{self.endpoint}' "
                 f"CREDENTIALS=(AWS_KEY_ID='{CREDENTIALS['aws_access_key_id']}' "
                 f"AWS_SECRET_KEY='{CREDENTIALS['aws_secret_access_key']}') FILE_FORMAT=(TYPE=JSON);"
                 if not self.lander.queue_urls else "")
        run_script(self.spark, f"""
            CREATE TABLE {table} (file_name VARCHAR, row_no NUMBER, amount FLOAT, src VARCHAR);
            {stage}
            CREATE PIPE {pipe} AUTO_INGEST=TRUE AS COPY INTO {table} FROM (
              SELECT $1:f, $1:r, $1:amount, METADATA$FILENAME FROM @s3s/{prefix}) ON_ERROR={on_error}""",
                   self.warehouse)
        shown = run_script(self.spark, "SHOW PIPES", self.warehouse)[-1][1].collect()
        channel = next(r["notification_channel"] for r in shown if r["name"] == pipe)
        url = self.sqs.get_queue_url(QueueName=channel.rsplit(":", 1)[1])["QueueUrl"]
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": str(self.options.visibility_s)})
        self.lander.queue_urls[pipe] = url
        self.channels[pipe] = channel
        self.s3.put_bucket_notification_configuration(Bucket=self.bucket, NotificationConfiguration={
            "QueueConfigurations": [
                {"QueueArn": arn, "Events": ["s3:ObjectCreated:*"],
                 "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": f"in/{PIPES[p][1]}"}]}}}
                for p, arn in self.channels.items()]})

    def launch(self, log_name: str, until_caught_up: bool = False) -> PipesProcess:
        self.running = PipesProcess(self.warehouse_root, self.logs / log_name, self.workdir,
                                    self.options.poll_s, until_caught_up)
        return self.running

    # ---- cycles

    def kill_cycle(self, cycle: Cycle, count: int, rows: int) -> None:
        watcher = TableWatcher(self.warehouse_root)
        watcher.baseline()
        proc = self.launch(f"cycle-{cycle.index:02d}.log")
        seconds = self.options.land_seconds
        target = PIPES["EVENTS_PIPE"][0] if cycle.moment == "create" else None
        if cycle.create_late_pipe:
            # Half the files land for the first pipe; once the service loads, the late
            # pipe is created and the other half lands over both.
            self.lander.start(self.lander.plan(cycle, count // 2, rows // 2, ["EVENTS_PIPE"]), seconds / 2)
            self.wait_for(proc, lambda: proc.batches >= 1, "its first load")
            self.lander.join()
            self.create_pipe("LATE_PIPE")
            self.say(f"cycle {cycle.index}: created LATE_PIPE and its table while the service runs")
            target = PIPES["LATE_PIPE"][0]
            count, rows, seconds = count - count // 2, rows - rows // 2, seconds / 2
        self.lander.start(self.lander.plan(cycle, count, rows, sorted(self.lander.queue_urls)), seconds)
        moment, detail = self.await_moment(proc, watcher, cycle.moment, target)
        if not proc.alive():
            self.result.crashes.append(f"cycle {cycle.index}: exited {proc.proc.returncode}")
            self.say(f"cycle {cycle.index}: the service exited by itself ({proc.proc.returncode}):\n{proc.tail()}")
            proc.kill()
        else:
            proc.kill()
            self.result.kills += 1
            self.result.moments[moment] += 1
            self.say(f"cycle {cycle.index}: SIGKILL at {moment} ({detail}) "
                     f"{time.monotonic() - proc.started:.1f}s after launch, {proc.batches} load lines")
        self.lander.join()
        # S3 delivers at least once: the last files' events come again after the kill.
        sent = self.lander.send_duplicates(self.lander.last(10))
        self.say(f"cycle {cycle.index}: re-delivered {sent} events of the last files landed")

    def await_moment(self, proc: PipesProcess, watcher: TableWatcher, moment: str,
                     target: str | None) -> tuple[str, str]:
        """Poll until the cycle's moment comes (or the service exits, or --moment-timeout
        passed since its first load line: then `<moment>-fallback`)."""
        nth = self.rng.randint(1, 2)  # a cycle often has few batches: its files land in seconds
        random_after_start = self.rng.random() < 0.5
        random_delay = self.rng.uniform(3.0, 30.0) if random_after_start else self.rng.uniform(0.0, 5.0)
        first_line_at = None
        seen = 0
        deadline = time.monotonic() + self.options.startup_timeout_s
        while proc.alive():
            now = time.monotonic()
            if proc.batches and first_line_at is None:
                first_line_at, deadline = now, now + self.options.moment_timeout_s
            if moment == "random":
                base = proc.started if random_after_start else first_line_at
                if base is not None and now >= base + random_delay:
                    return moment, f"{random_delay:.1f}s after " + ("launch" if random_after_start
                                                                    else "the first load line")
            if moment == "progress" and proc.batches >= nth:
                return moment, f"load line {proc.batches}: " + proc.lines[-1].strip()[:100]
            for kind, table, detail in watcher.events():
                if moment == "create" and kind == "commit" and table == target:
                    return moment, f"{table} {detail}: its first load"
                if kind == moment and moment in ("commit", "write") and (seen := seen + 1) >= nth:
                    return moment, f"{table} {detail}"
            if now > deadline:
                return f"{moment}-fallback", "moment did not come"
            if moment != "random" and first_line_at is not None and self.lander.done() and (
                    now - proc.last_load_at > self.options.idle_s):
                return f"{moment}-fallback", f"no load for {self.options.idle_s:.0f}s: nothing left to load"
            time.sleep(0.01)
        return moment, "exited"

    def wait_for(self, proc: PipesProcess, condition, what: str) -> None:
        deadline = time.monotonic() + self.options.startup_timeout_s
        while not condition():
            if not proc.alive():
                raise RuntimeError(f"the service exited before {what}:\n{proc.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {self.options.startup_timeout_s:.0f}s:\n{proc.tail()}")
            time.sleep(0.05)

    def catch_up(self, cycle: Cycle, count: int, rows: int) -> None:
        """The last files land first; then a run until caught up."""
        self.lander.start(self.lander.plan(cycle, count, rows, sorted(self.lander.queue_urls)), 0.0)
        self.lander.join()
        self.run_until_caught_up("final")

    def run_until_caught_up(self, what: str) -> None:
        proc = self.launch(f"{what}.log", until_caught_up=True)
        code = proc.wait(self.options.final_timeout_s)
        self.say(f"{what} run: until caught up in {time.monotonic() - proc.started:.1f}s "
                 f"(exit {code}, {proc.batches} load lines)")
        if code != 0:
            self.result.crashes.append(f"{what} run exited {code}")
            self.say(proc.tail())

    def late_duplicates(self) -> None:
        """Every file's event once more, after everything loaded (and after the messages
        a killed service had taken came back); a run must change nothing and leave the
        queues empty."""
        time.sleep(self.options.visibility_s + 1)
        with self.lander.lock:
            files = list(self.lander.files)
        self.result.late_duplicates_sent = self.lander.send_duplicates(files)
        self.say(f"late: sent {self.result.late_duplicates_sent} duplicate events of loaded files")
        self.run_until_caught_up("late")
        self.result.late = self.count()
        left = 0
        for url in self.lander.queue_urls.values():
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            left += int(attributes["ApproximateNumberOfMessages"]) + int(
                attributes["ApproximateNumberOfMessagesNotVisible"])
        self.result.queue_left = left

    # ---- counting

    def count(self) -> Figures:
        """The tables and their load histories against the files put."""
        from floeline.warehouse import load_history

        with self.lander.lock:
            files = list(self.lander.files)
        figures = Figures(files=len(files), rows=sum(f.rows for f in files))
        figures.errors = sum(len(f.bad) for f in files)
        figures.skipped = sum(f.rows - len(f.bad) for f in files if f.failed)
        by_name = {f.name: f for f in files}
        for pipe, (table, _, _) in PIPES.items():
            mine = {f.name: f for f in files if f.pipe == pipe}
            if pipe not in self.lander.queue_urls:
                continue
            ref = self.warehouse.table(DATABASE, SCHEMA, table)
            rows = self.spark.read.format("delta").load(ref.path).selectExpr(
                "file_name", "CAST(row_no AS INT) AS r", "src").collect()
            held = Counter((r["file_name"], r["r"]) for r in rows)
            figures.landed += len(rows)
            figures.duplicates += sum(n - 1 for n in held.values())
            figures.misplaced += sum(1 for r in rows if r["src"] != r["file_name"])
            expected = {(f.name, r) for f in mine.values() for r in f.expected_rows()}
            figures.lost += len(expected - held.keys())
            figures.unexpected += len(held.keys() - expected)
            entries = Counter()
            for entry in load_history.read_history(self.spark, ref):
                load = entry.load
                if load.status == load_history.SKIPPED:
                    continue  # a version read again and found loaded: not a load
                entries[load.file] += 1
                figures.statuses[load.status] += 1
                f = mine.get(load.file) or by_name.get(load.file)
                if f is None or f.pipe != pipe or load.status != f.status() or (
                        not f.failed and (load.rows_loaded, load.errors_seen) != (len(f.expected_rows()), len(f.bad))):
                    figures.status_wrong += 1
            figures.history_missing += sum(1 for name in mine if entries[name] == 0)
            figures.history_repeated += sum(n - 1 for n in entries.values() if n > 1)
        return figures


def run_soak(options: Options, spark=None) -> Result:
    """Run the whole soak in `options.workdir` (a fresh temporary directory if unset,
    removed afterwards when everything was exact)."""
    if spark is None:
        from floeline.spark import get_spark

        spark = get_spark()
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="floeline-chaos-pipes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = Soak(options, workdir, spark).run()
    if result.ok and not options.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"state and service logs kept in {workdir}", file=options.log, flush=True)
    return result


def report(result: Result, out=sys.stdout) -> None:
    print("kill moments: " + ", ".join(f"{k}={n}" for k, n in sorted(result.moments.items())), file=out)
    print("load history statuses: " + ", ".join(f"{k}={n}" for k, n in sorted(result.figures.statuses.items())),
          file=out)
    if result.late is not None and result.late != result.figures:
        print(f"the late run changed the figures: {result.late}", file=out)
    for crash in result.crashes:
        print(f"crash: {crash}", file=out)
    print(result.line(), file=out, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=Options.files)
    parser.add_argument("--rows", type=int, default=Options.rows)
    parser.add_argument("--kills", type=int, default=Options.kills)
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--land-seconds", type=float, default=Options.land_seconds)
    parser.add_argument("--visibility", type=int, default=Options.visibility_s,
                        help="the queues' visibility timeout (s): taken messages come back after it")
    parser.add_argument("--moment-timeout", type=float, default=Options.moment_timeout_s)
    parser.add_argument("--workdir", help="keep the local AWS state, warehouse and logs here")
    args = parser.parse_args(argv)
    options = Options(files=args.files, rows=args.rows, kills=args.kills, seed=args.seed,
                      land_seconds=args.land_seconds, visibility_s=args.visibility,
                      moment_timeout_s=args.moment_timeout, workdir=args.workdir)
    for cycle in plan_cycles(options):
        print(f"plan: {cycle}", flush=True)
    result = run_soak(options)
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
