"""How an auto-ingest pipe finds its new staged files: the finder behind the pipe
source (sources/pipe_files.py), reading the pipe's definition, its stage and, for a
pipe with a notification channel, its SQS queue (sources/s3_notifications.py).

- listing: the stage is listed every `poll` seconds; files not handed out before by
  this process (name, size, modification time) are new;
- notifications: a pipe on an S3 stage with a notification_channel receives its SQS
  queue's ObjectCreated events (long polling) and hands out the files they name. The
  stage is also listed once when the source starts and after each ALTER PIPE REFRESH,
  so files that landed while no event reached the queue are not left behind."""

from __future__ import annotations

import time

from floeline.errors import FloelineError
from floeline.sources import s3_notifications
from floeline.warehouse import pipes, stage_store, stages
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.stage_store import StagedFile

MAX_FILES_PER_BATCH = 500  # files per micro-batch (and per commit): bounds a load's memory


def split_pipe_name(full_name: str) -> tuple[str, str, str]:
    database, schema, name = full_name.split(".")
    return database, schema, name


def stored_pipe(warehouse: Warehouse, full_name: str) -> pipes.Pipe | None:
    """The auto-ingest pipe DB.SCHEMA.PIPE as stored now (None once dropped)."""
    database, schema, name = split_pipe_name(full_name)
    pipe = pipes.load(warehouse, database, schema, "pipe", name)
    return pipe if pipe is not None and pipe.loads_files and pipe.copy.get("auto_ingest") else None


def stage_of(warehouse: Warehouse, pipe: pipes.Pipe) -> stages.Stage:
    database, schema, name = pipe.copy["stage"]
    stage = stages.load_stage(warehouse, database, schema, name)
    if stage is None:
        raise FloelineError(f"pipe {pipe.name}: its stage {database}.{schema}.{name} was dropped; "
                            f"create it again or DROP PIPE {pipe.name}")
    return stage


def notified_files(warehouse: Warehouse, stage: stages.Stage, pipe: pipes.Pipe,
                   messages: list[s3_notifications.Message]) -> list[StagedFile]:
    """The stage's files that the messages name, as they are now (a file gone since
    its event is left out; one named twice is there once)."""
    store = stage_store.store_for(warehouse, stage)
    names = {o.key[len(store.prefix):] for m in messages for o in m.objects
             if o.bucket == store.bucket and o.key.startswith(store.prefix)}
    names = {n for n in names if n.startswith(pipe.copy["path"].lstrip("/")) and not stage_store.hidden(n)}
    found = [f for f in (store.file(n) for n in sorted(names)) if f is not None]
    return stages.select_files(found, pipe.copy["path"], None, pipe.copy.get("pattern"))


def decode_files(rows) -> list[StagedFile]:
    return [StagedFile(str(n), str(loc), int(size), int(ms)) for n, loc, size, ms in rows]


class Discovery:
    """What one pipe's reader has found and handed out."""

    def __init__(self, warehouse: Warehouse, pipe_name: str, poll_s: float):
        self.warehouse, self.pipe_name, self.poll_s = warehouse, pipe_name, poll_s
        self.handed: set[tuple[str, int, int]] = set()  # (name, size, modified_ms)
        self.listed_for: int | None = None  # the REFRESH the last full listing served
        self.last_listing = 0.0
        self.queue: s3_notifications.NotificationQueue | None = None
        self.backlog: list[StagedFile] = []  # found but over a batch's size

    def next_files(self, wait: bool) -> tuple[list[StagedFile], list[s3_notifications.Message]]:
        """New files (at most MAX_FILES_PER_BATCH) and the messages they came from.
        `wait` False (Trigger.AvailableNow): no waiting, and a listed stage is listed
        once; a queue is read until it is empty."""
        if self.backlog:
            return self._take([]), []
        pipe = stored_pipe(self.warehouse, self.pipe_name)
        if pipe is None:
            return [], []  # dropped: the service stops this query
        refreshed = pipe.copy.get("refreshed_ms", 0)
        if self.listed_for != refreshed:
            self.handed.clear()  # REFRESH: files failed before may be tried again
        channel = pipe.copy.get("notification_channel")
        if not channel and not wait and self.listed_for == refreshed:
            return [], []  # Trigger.AvailableNow: what the stage held when the run began
        if not channel or self.listed_for != refreshed:
            if wait and not channel:  # a listed stage is listed every poll_s
                time.sleep(max(0.0, self.last_listing + self.poll_s - time.monotonic()))
            self.last_listing = time.monotonic()
            stage = stage_of(self.warehouse, pipe)
            listed = stages.select_files(stages.list_files(self.warehouse, stage, pipe.copy["path"]),
                                         pipe.copy["path"], None, pipe.copy.get("pattern"))
            self.listed_for = refreshed
            return self._take(listed), []
        stage = stage_of(self.warehouse, pipe)
        if self.queue is None or self.queue.arn != channel:
            self.queue = s3_notifications.NotificationQueue(channel, stage.resolved_credentials(), stage.endpoint)
        # An idle queue is long-polled (whole seconds); a shorter poll sleeps instead.
        wait_s = int(self.poll_s) if wait else 0
        messages = self.queue.receive(wait_s=wait_s, max_messages=MAX_FILES_PER_BATCH)
        if not messages:
            if wait and not wait_s:
                time.sleep(self.poll_s)
            return [], []
        return self._take(notified_files(self.warehouse, stage, pipe, messages)), messages

    def _take(self, found: list[StagedFile]) -> list[StagedFile]:
        new = list({(f.name, f.size, f.modified_ms): f for f in self.backlog + found
                    if (f.name, f.size, f.modified_ms) not in self.handed}.values())
        batch, self.backlog = new[:MAX_FILES_PER_BATCH], new[MAX_FILES_PER_BATCH:]
        self.handed.update((f.name, f.size, f.modified_ms) for f in batch)
        return batch
