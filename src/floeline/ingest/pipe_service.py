"""The pipe service (`floeline pipes run`): every auto-ingest pipe of the warehouse
(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage ...) loads the files that
land in its stage, each once.

Each pipe is a Structured Streaming query, as a connector is: its source
(sources/pipe_files.py, finding with warehouse/pipe_discovery.py) finds new files by
listing the stage or from the S3 events of the pipe's SQS queue, and its foreachBatch
loads them with COPY's own load (ingest/file_load.py): the rows of the files and their
load-history entries go into the table in one Delta commit, and a file whose content
the table already holds is skipped. So the table alone says which files are loaded,
and a restart, a SIGKILL, a duplicate or late notification or a lost Spark checkpoint
neither skips nor repeats a file; a queue message is deleted only after its batch
committed. A file that fails under the pipe's ON_ERROR (SKIP_FILE by default, as
Snowpipe) is recorded as LOAD_FAILED and not tried again until ALTER PIPE p REFRESH. A
pipe whose load or source fails is reported once, and its query is started again after
RESTART_S (its failed batch is then run again); the other pipes go on. Pipes created
or dropped while the service runs are picked up within SYNC_S seconds."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass

from floeline.errors import FloelineError, first_lines
from floeline.ingest.file_load import load_files
from floeline.sources import s3_notifications
from floeline.sources.pipe_files import FORMAT as PIPE_FILES_FORMAT
from floeline.sources.pipe_files import PipeFilesDataSource
from floeline.warehouse import load_history, pipes, stages, tables
from floeline.warehouse.catalog import Warehouse, folder_name
from floeline.warehouse.load_history import LOAD_FAILED, FileLoad
from floeline.warehouse.pipe_discovery import (MAX_FILES_PER_BATCH, Discovery, split_pipe_name, stage_of,
                                              stored_pipe)
from floeline.warehouse.stage_store import StagedFile

log = logging.getLogger("floeline")

MAX_FILES_PER_LOAD = MAX_FILES_PER_BATCH  # files per commit: bounds a load's memory and its commit's size
RESTART_S = 5.0  # a failed pipe's query starts again after this long
# --until-caught-up: a failing pipe's query runs at most this often; a failure of Spark's
# own (no floeline error: e.g. a Python worker not connecting back on a starved machine)
# is more likely to pass, and is given more runs.
CAUGHT_UP_ATTEMPTS = 3
CAUGHT_UP_SPARK_ATTEMPTS = 20
SYNC_S = 2.0  # how often the service looks for new, dropped and failed pipes


@dataclass
class PipeStatus:
    """What SYSTEM$PIPE_STATUS reports for one pipe."""

    pending: int
    last_file: str | None
    last_load_ms: int | None


class StagePipeFiles(PipeFilesDataSource):
    """The pipe source, finding a pipe's files in the warehouse (its stage, its queue)."""

    @staticmethod
    def finder(warehouse_root: str, pipe_name: str, poll_s: float) -> Discovery:
        return Discovery(Warehouse(warehouse_root), pipe_name, poll_s)


def stage_pipes(warehouse: Warehouse) -> list[tuple[str, str, pipes.Pipe]]:
    """(database, schema, pipe) of every pipe that loads staged files."""
    return [(d, s, p) for d, s, p in pipes.list_stored(warehouse) if p.loads_files]


@dataclass
class PipeTarget:
    """What one pass of a pipe loads into: its stage, its table and what the table holds."""

    name: str  # DB.SCHEMA.PIPE
    stage: stages.Stage
    ref: object  # TableRef
    loaded: load_history.Loaded
    history: list
    failed: set  # (file, size, modified_ms) this pipe failed since its last REFRESH

    def is_new(self, f: stages.StagedFile) -> bool:
        return (not self.loaded.listed(self.stage.full_name, f.name, f.size, f.modified_ms)
                and (f.name, f.size, f.modified_ms) not in self.failed)


def target_of(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe,
              cache: load_history.HistoryCache | None = None) -> PipeTarget:
    stage = stage_of(warehouse, pipe)
    ref = warehouse.table(pipe.database, pipe.schema, pipe.table)
    history = cache.read(spark, ref) if cache is not None else load_history.read_history(spark, ref)
    name = f"{database}.{schema}.{pipe.name}"
    failed = {(e.load.file, e.load.size, e.load.modified_ms) for e in history
              if e.load.status == LOAD_FAILED and e.load.pipe == name
              and e.timestamp_ms >= pipe.copy.get("refreshed_ms", 0)}
    return PipeTarget(name, stage, ref, load_history.Loaded(history), history, failed)


def pending_files(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe,
                  cache: load_history.HistoryCache | None = None):
    """The pipe's stage files it has still to load (not loaded into its table, and not
    failed by this pipe since its last REFRESH), found by listing the stage."""
    target = target_of(spark, warehouse, database, schema, pipe, cache)
    listed = stages.select_files(stages.list_files(warehouse, target.stage, pipe.copy["path"]),
                                 pipe.copy["path"], None, pipe.copy.get("pattern"))
    return target, [f for f in listed if target.is_new(f)]


def load_into(spark, warehouse: Warehouse, target: PipeTarget, pipe: pipes.Pipe, files,
              cache: load_history.HistoryCache | None = None) -> list[FileLoad]:
    """Load `files` (new ones, at most MAX_FILES_PER_LOAD) into the pipe's table."""
    if not files:
        return []
    table_schema = tables.read_schema(spark, target.ref)
    if table_schema is None:
        raise FloelineError(f"pipe {pipe.name}: its table {target.ref.full_name} was dropped; create it "
                            f"again or DROP PIPE {pipe.name}")
    stage = target.stage
    fmt = stages.resolve_format(warehouse, stage, pipe.copy.get("file_format"), stage.database, stage.schema)
    shaping_pipe = None if pipe.copy.get("match_by_column_name") else pipe
    return load_files(spark, target.ref, table_schema, stage, files[:MAX_FILES_PER_LOAD], fmt, shaping_pipe,
                      pipe.copy["on_error"], target.loaded, pipe_name=target.name,
                      on_commit=(lambda loads: cache.loaded(spark, target.ref, loads)) if cache else None)


def load_new_files(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe,
                   cache: load_history.HistoryCache | None = None) -> list[FileLoad]:
    """One listing pass of one pipe: load the files that landed since the last."""
    target, files = pending_files(spark, warehouse, database, schema, pipe, cache)
    return load_into(spark, warehouse, target, pipe, files, cache)


def pipe_status(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe) -> PipeStatus:
    target, files = pending_files(spark, warehouse, database, schema, pipe)
    mine = [e for e in target.history if e.load.pipe == target.name and e.load.loaded]
    last = mine[-1] if mine else None
    return PipeStatus(len(files), last.load.file if last else None, last.timestamp_ms if last else None)


class PipeService:
    """Runs one streaming query per auto-ingest pipe of a warehouse."""

    def __init__(self, spark, warehouse: Warehouse, poll_s: float = 1.0, report=print,
                 restart_s: float = RESTART_S):
        self.spark, self.warehouse, self.poll_s, self.report = spark, warehouse, poll_s, report
        self.restart_s = restart_s  # a failed pipe's query starts again after this long
        self.failures: dict[str, str] = {}  # pipe -> the last error it met
        self.spark_failures: set[str] = set()  # failing pipes whose error is Spark's, not floeline's
        self.queries: dict[str, object] = {}  # pipe -> its active StreamingQuery
        self.queues: dict[str, s3_notifications.NotificationQueue] = {}
        self.restart_at: dict[str, float] = {}  # failed pipe -> when its query starts again
        self.history = load_history.HistoryCache()
        self.lock = threading.Lock()  # one load at a time (queries call back on their threads)
        self.processed = 0  # files processed since the last poll()
        self._batch_error: dict[str, str] = {}
        self._stop = threading.Event()
        spark.dataSource.register(StagePipeFiles)
        warehouse.prepare_spark(spark)

    def checkpoint(self, name: str) -> str:
        return self.warehouse.path("_checkpoints", "_pipes", folder_name(name))

    # ---- queries ---------------------------------------------------------------------

    def _start(self, name: str, available_now: bool):
        stream = (self.spark.readStream.format(PIPE_FILES_FORMAT)
                  .option("warehouse", self.warehouse.location).option("pipe", name)
                  .option("poll", str(self.poll_s)).load())
        writer = (stream.writeStream
                  .foreachBatch(lambda batch, batch_id: self._load_batch(name, batch))
                  .option("checkpointLocation", self.checkpoint(name))
                  .queryName(f"floeline-pipe-{name}@{self.warehouse.location}"))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
        self._batch_error.pop(name, None)
        return writer.start()

    def sync(self, available_now: bool = False, restart_now: bool = False) -> None:
        """Note queries that ended (reporting a failure once), stop those of dropped pipes
        and start those of new pipes and of failed ones whose wait is over."""
        wanted = self._wanted()
        self._reap(wanted)
        for name in sorted(wanted - set(self.queries)):
            if restart_now or time.monotonic() >= self.restart_at.get(name, 0):
                self.queries[name] = self._start(name, available_now)

    def _wanted(self) -> set[str]:
        return {f"{d}.{s}.{p.name}" for d, s, p in stage_pipes(self.warehouse) if p.copy.get("auto_ingest")}

    def _reap(self, wanted: set[str]) -> None:
        """Forget queries that ended (reporting a failure once); stop those of dropped pipes."""
        for name, query in list(self.queries.items()):
            if not query.isActive:
                del self.queries[name]
                self._ended(name, query)
            elif name not in wanted:
                query.stop()
                del self.queries[name]

    def _ended(self, name: str, query) -> None:
        error = query.exception()
        if error is None:
            self.failures.pop(name, None)
            return
        message = self._batch_error.get(name) or source_error(str(error))
        if name in self._batch_error or FLOELINE_ERROR.search(str(error)):
            self.spark_failures.discard(name)
        else:
            self.spark_failures.add(name)
        if self.failures.get(name) != message:
            self.report(f"pipe {name}: {message}")
        self.failures[name] = message
        self.restart_at[name] = time.monotonic() + self.restart_s

    def request_stop(self) -> None:
        """Ask `run` to end after the current sync (what SIGINT/SIGTERM do)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop every query after its batch in flight (a load commits whole or not at all)."""
        for query in self.queries.values():
            if query.isActive:
                query.stop()
        self.queries.clear()

    # ---- one micro-batch: files to load ------------------------------------------------

    def _load_batch(self, name: str, batch) -> None:
        rows = batch.collect()
        files = [StagedFile(r["name"], r["location"], r["size"], r["modified_ms"]) for r in rows if r["name"]]
        receipts = [r["receipt"] for r in rows if r["receipt"]]
        try:
            loads = self._load(name, files) if files else []
            if receipts:  # after the commit: a crash before leaves the messages queued
                self._queue(name).delete([s3_notifications.Message(r, ()) for r in receipts])
        except FloelineError as exc:
            self._batch_error[name] = str(exc)
            raise  # the query stops without committing the batch: it runs again later
        self.failures.pop(name, None)
        for load in loads:
            error = f" first_error={load.first_error!r} line={load.first_error_line}" if load.errors_seen else ""
            self.report(f"pipe {name}: {load.file} {load.status} rows={load.rows_loaded} "
                        f"errors={load.errors_seen}{error}")
        self.processed += len(loads)

    def _queue(self, name: str) -> s3_notifications.NotificationQueue:
        """The pipe's notification queue, for deleting handled messages."""
        pipe = stored_pipe(self.warehouse, name)
        channel = pipe.copy.get("notification_channel") if pipe else None
        queue = self.queues.get(name)
        if channel and (queue is None or queue.arn != channel):
            stage = stage_of(self.warehouse, pipe)
            queue = self.queues[name] = s3_notifications.NotificationQueue(channel, stage.resolved_credentials(),
                                                                           stage.endpoint)
        if queue is None:
            raise FloelineError(f"pipe {name} no longer has a notification channel")
        return queue

    def _load(self, name: str, files) -> list[FileLoad]:
        database, schema, _ = split_pipe_name(name)
        pipe = stored_pipe(self.warehouse, name)
        if pipe is None:
            return []  # dropped since its files were found
        with self.lock:
            target = target_of(self.spark, self.warehouse, database, schema, pipe, self.history)
            return load_into(self.spark, self.warehouse, target, pipe,
                             [f for f in files if target.is_new(f)], self.history)

    # ---- running -----------------------------------------------------------------------

    def poll(self) -> int:
        """Start the pipes' queries (again, for failed ones) and wait until each has
        loaded what is in its stage or queue now; the number of files processed since
        the previous poll. The queries keep running between polls."""
        self.sync(restart_now=True)
        for _ in range(2):  # the second pass covers a trigger that began before the files landed
            for query in list(self.queries.values()):
                try:
                    query.processAllAvailable()
                except Exception:  # reported by sync
                    pass
        self.sync()
        processed, self.processed = self.processed, 0
        return processed

    def _run_until_caught_up(self) -> None:
        """Each pipe's query with Trigger.AvailableNow until it ends. A query that fails
        (a transient fault, e.g. Spark's Python worker not connecting back on a busy
        machine) is reported once and started again after RESTART_S, at most
        CAUGHT_UP_ATTEMPTS runs in all (CAUGHT_UP_SPARK_ATTEMPTS for a failure of Spark's
        own); the others are not run again."""
        self.sync(available_now=True, restart_now=True)
        runs = {name: 1 for name in self.queries}
        while True:
            for query in list(self.queries.values()):
                while query.isActive and not self._stop.is_set():
                    try:
                        query.awaitTermination(0.2)
                    except Exception:  # noqa: BLE001 - its failure is reported by _reap
                        break
            wanted = self._wanted()
            self._reap(wanted)
            again = [name for name in sorted(set(self.failures) & wanted)
                     if runs.get(name, 1) < (CAUGHT_UP_SPARK_ATTEMPTS if name in self.spark_failures
                                             else CAUGHT_UP_ATTEMPTS)]
            if not again or self._stop.wait(self.restart_s):
                return
            for name in again:
                runs[name] = runs.get(name, 1) + 1
                self.queries[name] = self._start(name, available_now=True)

    def run(self, until_caught_up: bool = False) -> int:
        """Run until a stop signal (or, `until_caught_up`, until every pipe has loaded
        what its stage and queue hold); exit status 1 when a pipe is failing at the end."""
        auto = [p for _, _, p in stage_pipes(self.warehouse) if p.copy.get("auto_ingest")]
        if not auto:
            self.report(f"no auto-ingest pipe in warehouse {self.warehouse.location} "
                        f"(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage)")
        try:
            if until_caught_up:
                self._run_until_caught_up()
            else:
                while not self._stop.is_set():
                    self.sync()
                    self._stop.wait(SYNC_S)
        finally:
            self.stop()
        self.processed = 0  # (reported as they loaded; poll() counts from here)
        return 1 if self.failures else 0


FLOELINE_ERROR = re.compile(r"floeline\.errors\.\w+: (.+)")


def source_error(text: str) -> str:
    """The floeline error a failed query carries (raised in its Python source), without
    Spark's and Python's traces; else the error's first lines."""
    found = FLOELINE_ERROR.findall(text)
    return found[-1].strip() if found else first_lines(text, 3)
