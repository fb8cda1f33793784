"""Delta checkpoints of floeline's tables, written beside the commits instead of in them.

Delta writes a table's checkpoint (its whole state as Parquet, so readers need not
replay every JSON commit) inside the commit that reaches a multiple of the table's
`delta.checkpointInterval`, 10 by default. That commit then takes two to four times
as long: at 5,000 records/s with buffer.flush.time=1 every tenth batch took 2.5-4.4 s
against 0.6-1.2 s (bench/RESULTS.md, issue 26) and set the latency's maximum.

So the tables floeline creates carry a large interval (TABLE_CHECKPOINT_INTERVAL, the
fallback for writers other than floeline), and after each commit floeline checks
whether CHECKPOINT_EVERY commits have passed since the table's last checkpoint; if so
one background thread writes it (`DeltaLog.checkpoint()`) while the stream goes on.
CHECKPOINT_EVERY is 100, delta-rs's default interval: a checkpoint costs about 1.4 s of
Spark work on a small table, and reading a table through 100 JSON commits cost Spark no
measurable time more than through 10 (bench/RESULTS.md). A table with an interval of at
most CHECKPOINT_EVERY (made by others, or by floeline before this) keeps Delta's
checkpoints in its commits. Checkpoints hold no data and no positions: one lost to a
crash is written after a later commit."""

from __future__ import annotations

import logging
import queue
import threading
import time

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_PROPERTY = "delta.checkpointInterval"
# How often floeline checkpoints its tables (in commits).
CHECKPOINT_EVERY = 100
# The interval of the tables floeline creates: a writer other than floeline still
# checkpoints them now and then, inside its commit.
TABLE_CHECKPOINT_INTERVAL = 1000


def checkpoint_due(version: int, checkpoint_version: int, interval: int) -> bool:
    """Whether floeline writes a checkpoint after the commit of `version`, the table's
    last checkpoint being `checkpoint_version` (-1: none) and its interval `interval`
    (Delta writes one itself in its commits when that is at most CHECKPOINT_EVERY)."""
    return interval > CHECKPOINT_EVERY and version - max(checkpoint_version, 0) >= CHECKPOINT_EVERY


def after_commit(spark, path: str) -> None:
    """Queue a checkpoint of the table at `path` when one is due (checkpoint_due), from
    the snapshot its commit left in this JVM (no storage call)."""
    writer = _writer()
    try:
        delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
        snapshot = delta_log.unsafeVolatileSnapshot()
        setting = snapshot.metadata().configuration().get(CHECKPOINT_INTERVAL_PROPERTY)
        interval = int(setting.get()) if setting.isDefined() else CHECKPOINT_EVERY
        # A snapshot made from an earlier one keeps that one's checkpoint: the writer's
        # own record is the later one then.
        checkpointed = max(snapshot.checkpointProvider().version(), writer.written(path))
        due = checkpoint_due(snapshot.version(), checkpointed, interval)
    except Exception as exc:  # the commit is in; its checkpoint can wait for the next one
        log.debug("no checkpoint check for %s: %s", path, _first_line(exc))
        return
    if due:
        writer.enqueue(path, delta_log, spark._jvm.scala.Option.empty())


def drain(paths, timeout_s: float = 60.0) -> bool:
    """Wait until the queued checkpoints of the tables at `paths` are written (a
    connector that ends leaves its tables checkpointed); False when `timeout_s` passed
    first."""
    return _writer().drain(set(paths), timeout_s)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _CheckpointWriter:
    """One daemon thread writing queued checkpoints one at a time; a table already
    queued is not queued twice."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._pending: set[str] = set()
        self._written: dict[str, int] = {}
        self._lock = threading.Condition()
        threading.Thread(target=self._run, name="floeline-delta-checkpoints", daemon=True).start()

    def enqueue(self, path: str, delta_log, no_catalog_table) -> None:
        with self._lock:
            if path in self._pending:
                return
            self._pending.add(path)
        self._queue.put((path, delta_log, no_catalog_table))

    def written(self, path: str) -> int:
        """The version of the last checkpoint this writer wrote for `path` (-1: none)."""
        with self._lock:
            return self._written.get(path, -1)

    def drain(self, paths: set[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending & paths:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def _run(self) -> None:
        while True:
            path, delta_log, no_catalog_table = self._queue.get()
            started = time.monotonic()
            try:
                snapshot = delta_log.unsafeVolatileSnapshot()  # the latest this JVM committed
                delta_log.checkpoint(snapshot, no_catalog_table)
                with self._lock:
                    self._written[path] = max(self._written.get(path, -1), snapshot.version())
                log.debug("checkpoint of %s written in %.2f s", path, time.monotonic() - started)
            except Exception as exc:  # e.g. Spark stopping: a later commit queues it again
                log.info("the checkpoint of %s was not written: %s", path, _first_line(exc))
            finally:
                with self._lock:
                    self._pending.discard(path)
                    self._lock.notify_all()


_writer_instance: _CheckpointWriter | None = None
_writer_guard = threading.Lock()


def _writer() -> _CheckpointWriter:
    global _writer_instance
    with _writer_guard:
        if _writer_instance is None:
            _writer_instance = _CheckpointWriter()
        return _writer_instance
