"""The pipe service (`floeline pipes run`): every auto-ingest pipe of the warehouse
(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage ...) loads the files that
land in its stage, each once.

It finds new files in one of two ways:
- listing: the stage (a directory, an internal stage, or an S3 prefix) is listed each
  poll, and files the table has not loaded are loaded;
- notifications: a pipe on an S3 stage has its own SQS queue (its
  notification_channel); the bucket's ObjectCreated events name the new files, and a
  message is deleted only after its file's commit. The stage is listed once when the
  service starts and after each ALTER PIPE p REFRESH, so files that landed while no
  event reached the queue are not left behind.
Files are loaded with COPY's own load (sql/copy.py): the rows of the files and their
load-history entries go into the table in one Delta commit, so the table alone says
which files are loaded, and a restart, a SIGKILL, a duplicate or late notification or a
lost state directory neither skips nor repeats a file. (There is no Spark checkpoint
to lose: the load history is the only state.) A file that fails under the pipe's
ON_ERROR (SKIP_FILE by default, as Snowpipe) is recorded as LOAD_FAILED and not tried
again until ALTER PIPE p REFRESH."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from floeline.errors import FloelineError
from floeline.ingest.file_load import load_files
from floeline.sources import s3_notifications
from floeline.warehouse import load_history, pipes, stage_store, stages, tables
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.load_history import LOAD_FAILED, FileLoad

log = logging.getLogger("floeline")

MAX_FILES_PER_LOAD = 500  # files per commit: bounds a load's memory and its commit's size


@dataclass
class PipeStatus:
    """What SYSTEM$PIPE_STATUS reports for one pipe."""

    pending: int
    last_file: str | None
    last_load_ms: int | None


def stage_pipes(warehouse: Warehouse) -> list[tuple[str, str, pipes.Pipe]]:
    """(database, schema, pipe) of every pipe that loads staged files."""
    return [(d, s, p) for d, s, p in pipes.list_stored(warehouse) if p.loads_files]


def _stage_of(warehouse: Warehouse, pipe: pipes.Pipe) -> stages.Stage:
    database, schema, name = pipe.copy["stage"]
    stage = stages.load_stage(warehouse, database, schema, name)
    if stage is None:
        raise FloelineError(f"pipe {pipe.name}: its stage {database}.{schema}.{name} was dropped; "
                            f"create it again or DROP PIPE {pipe.name}")
    return stage


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
    stage = _stage_of(warehouse, pipe)
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


def notified_files(warehouse: Warehouse, stage: stages.Stage, pipe: pipes.Pipe,
                   messages: list[s3_notifications.Message]) -> list[stages.StagedFile]:
    """The stage's files that the messages name, as they are now (a file gone since
    its event is left out; one named twice is there once)."""
    store = stage_store.store_for(warehouse, stage)
    names = {o.key[len(store.prefix):] for m in messages for o in m.objects
             if o.bucket == store.bucket and o.key.startswith(store.prefix)}
    names = {n for n in names if n.startswith(pipe.copy["path"].lstrip("/")) and not stage_store.hidden(n)}
    found = [f for f in (store.file(n) for n in sorted(names)) if f is not None]
    return stages.select_files(found, pipe.copy["path"], None, pipe.copy.get("pattern"))


def pipe_status(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe) -> PipeStatus:
    target, files = pending_files(spark, warehouse, database, schema, pipe)
    mine = [e for e in target.history if e.load.pipe == target.name and e.load.loaded]
    last = mine[-1] if mine else None
    return PipeStatus(len(files), last.load.file if last else None, last.timestamp_ms if last else None)


class PipeService:
    """Polls every auto-ingest pipe of a warehouse."""

    def __init__(self, spark, warehouse: Warehouse, poll_s: float = 1.0, report=print):
        self.spark, self.warehouse, self.poll_s, self.report = spark, warehouse, poll_s, report
        self.failures: dict[str, str] = {}  # pipe -> the last error it met
        self.queues: dict[str, s3_notifications.NotificationQueue] = {}
        self.listed_for: dict[str, int] = {}  # notified pipe -> the REFRESH its last listing served
        self.wait_s = 0  # how long a queue is long-polled: >0 once a poll found nothing
        self.history = load_history.HistoryCache()

    def poll(self) -> int:
        """Load what landed for every auto-ingest pipe; the number of files processed."""
        processed = 0
        for database, schema, pipe in stage_pipes(self.warehouse):
            if not pipe.copy.get("auto_ingest"):
                continue
            name = f"{database}.{schema}.{pipe.name}"
            try:
                loads = self._poll_pipe(database, schema, pipe, name)
            except FloelineError as exc:
                if self.failures.get(name) != str(exc):
                    self.report(f"pipe {name}: {exc}")
                self.failures[name] = str(exc)
                continue
            self.failures.pop(name, None)
            for load in loads:
                error = f" first_error={load.first_error!r} line={load.first_error_line}" if load.errors_seen else ""
                self.report(f"pipe {name}: {load.file} {load.status} rows={load.rows_loaded} "
                            f"errors={load.errors_seen}{error}")
            processed += len(loads)
        self.wait_s = 0 if processed else max(1, round(self.poll_s))
        return processed

    def _poll_pipe(self, database: str, schema: str, pipe: pipes.Pipe, name: str) -> list[FileLoad]:
        channel = pipe.copy.get("notification_channel")
        refreshed = pipe.copy.get("refreshed_ms", 0)
        if not channel or self.listed_for.get(name) != refreshed:
            loads = load_new_files(self.spark, self.warehouse, database, schema, pipe, self.history)
            if channel and len(loads) < MAX_FILES_PER_LOAD:  # the listing is done
                self.listed_for[name] = refreshed
            return loads
        stage = _stage_of(self.warehouse, pipe)
        queue = self.queues.get(name)
        if queue is None or queue.arn != channel:
            queue = self.queues[name] = s3_notifications.NotificationQueue(channel, stage.credentials,
                                                                           stage.endpoint)
        messages = queue.receive(wait_s=self.wait_s, max_messages=MAX_FILES_PER_LOAD)
        if not messages:
            return []
        files = notified_files(self.warehouse, stage, pipe, messages)
        loads = []
        if files:
            target = target_of(self.spark, self.warehouse, database, schema, pipe, self.history)
            loads = load_into(self.spark, self.warehouse, target, pipe, [f for f in files if target.is_new(f)],
                              self.history)
        queue.delete(messages)  # after the commit: a crash before it leaves them queued
        return loads

    def run(self, until_caught_up: bool = False) -> int:
        """Poll until interrupted (or, `until_caught_up`, until a poll finds nothing new);
        exit status 1 when a pipe is failing at the end."""
        auto = [p for _, _, p in stage_pipes(self.warehouse) if p.copy.get("auto_ingest")]
        if not auto:
            self.report(f"no auto-ingest pipe in warehouse {self.warehouse.root} "
                        f"(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage)")
        while True:
            processed = self.poll()
            if until_caught_up and not processed:
                return 1 if self.failures else 0
            # A notified pipe waits on its queue (long polling); only listing sleeps.
            if not processed and not any(p.copy.get("notification_channel") for p in auto):
                time.sleep(self.poll_s)
