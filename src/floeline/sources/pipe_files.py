"""An auto-ingest pipe's new files as a Spark streaming source (`floeline pipes run`).

    spark.dataSource.register(PipeFilesDataSource)
    spark.readStream.format("floeline_pipe_files").option("warehouse", root)
        .option("pipe", "DB.SCHEMA.PIPE").load()

Each micro-batch is a list of staged files (name, location, size, modified_ms) that
the pipe may have to load; the pipe service's foreachBatch loads them with COPY's load
(ingest/file_load.py), skipping what the table's load history already holds. The
history, committed with the rows, is what makes a file load once: this source only
has to never *miss* a file, so after a restart or a lost checkpoint it may hand out
files again and they are skipped.

How files are found (`read`, in Spark's long-lived Python process on the driver) is
the finder's business: a subclass of PipeFilesDataSource names it (the pipe service's
reads the warehouse: warehouse/pipe_discovery.py), so this source knows files and
queue messages, not stages. A message rides in the batch (a row with its receipt
handle) and the pipe service deletes it after the batch's files are committed (Spark's
`commit(end)` comes only when the next batch starts, too late for a queue): a crash
before leaves the message queued, and it comes back after the queue's visibility timeout.

The end offset of a batch holds its files, so a batch Spark re-runs after a failure
(`readBetweenOffsets`) is exactly the batch it logged:

    {"batch": 12, "files": [["in/f001.json", "s3a://b/in/f001.json", 17, 1763891000000]]}
"""

from __future__ import annotations

import logging
from typing import Iterator, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from floeline.errors import ConfigError

log = logging.getLogger("floeline")

FORMAT = "floeline_pipe_files"
SCHEMA = "name string, location string, size bigint, modified_ms bigint, receipt string"
_ARROW_SCHEMA = pa.schema([("name", pa.string()), ("location", pa.string()), ("size", pa.int64()),
                          ("modified_ms", pa.int64()), ("receipt", pa.string())])


class FileFinder(Protocol):
    """What the reader asks for new files: (files, messages), each file with `name`,
    `location`, `size` and `modified_ms`, each message with its `receipt` handle.
    `wait` False (Trigger.AvailableNow): no waiting."""

    def next_files(self, wait: bool) -> tuple[list, list]: ...


def encode_files(files) -> list[list]:
    """Files as an offset holds them: [name, location, size, modified_ms]."""
    return [[f.name, f.location, f.size, f.modified_ms] for f in files]


def arrow_batch(encoded: list[list], receipts: list[str] = ()) -> pa.RecordBatch:
    """A row per file (as encode_files wrote it), and a row per queue message (its
    receipt handle) to delete once the files are committed."""
    return pa.RecordBatch.from_pylist(
        [{"name": str(n), "location": str(loc), "size": int(size), "modified_ms": int(ms)}
         for n, loc, size, ms in encoded] + [{"receipt": r} for r in receipts], schema=_ARROW_SCHEMA)


class PipeFilesDataSource(DataSource):
    """`spark.readStream.format("floeline_pipe_files")`: see the module. A subclass
    says how files are found (`finder`); that subclass is the one to register."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @staticmethod
    def finder(warehouse_root: str, pipe_name: str, poll_s: float) -> FileFinder:
        raise NotImplementedError("register a PipeFilesDataSource subclass that names its finder")

    def schema(self):
        return SCHEMA

    def simpleStreamReader(self, schema) -> "PipeFilesReader":
        for option in ("warehouse", "pipe"):
            if option not in self.options:
                raise ConfigError(f"the {FORMAT} source needs the {option!r} option")
        return PipeFilesReader(type(self), self.options["warehouse"], self.options["pipe"],
                               float(self.options.get("poll", "1")))


class PipeFilesReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Discovery on the driver. Runtime state (the finder: its queue client, what was
    handed out, messages waiting for their batch's commit) lives in the process that
    reads and is never pickled; `source` (the registered data source class, pickled by
    reference) makes it there."""

    def __init__(self, source: type[PipeFilesDataSource], warehouse_root: str, pipe_name: str,
                 poll_s: float = 1.0):
        self.source = source
        self.warehouse_root, self.pipe_name, self.poll_s = warehouse_root, pipe_name, poll_s
        self.available_now = False
        self._finder: FileFinder | None = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_finder"] = None
        return state

    def discovery(self) -> FileFinder:
        if self._finder is None:
            self._finder = self.source.finder(self.warehouse_root, self.pipe_name, self.poll_s)
        return self._finder

    def initialOffset(self) -> dict:
        return {"batch": 0, "files": []}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True  # no waiting: a read finding nothing ends the run

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        files, messages = self.discovery().next_files(wait=not self.available_now)
        if not files and not messages:
            return iter([]), start
        end = {"batch": int(start.get("batch", 0)) + 1, "files": encode_files(files)}
        return iter([arrow_batch(end["files"], [m.receipt for m in messages])]), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        """A logged batch again: its files. (Its messages, if any, were not deleted and
        come back after the queue's visibility timeout, to find their files loaded.)"""
        files = end.get("files", [])
        return iter([arrow_batch(files)] if files else [])

    def commit(self, end: dict) -> None:
        """Nothing to do: the pipe service deletes a batch's messages after its commit
        (Spark calls this only when the next batch starts)."""
