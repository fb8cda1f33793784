"""Delta checkpoints of floeline's tables, written beside the commits instead of in them.

Delta writes a table's checkpoint (its whole state as Parquet, so readers need not
replay every JSON commit) inside the commit that reaches a multiple of the table's
`delta.checkpointInterval`, 10 by default. That commit then takes two to four times
as long: at 5,000 records/s with buffer.flush.time=1 every tenth batch took 2.5-4.4 s
against 0.6-1.2 s (bench/RESULTS.md, issue 26) and set the latency's maximum.

So the tables connectors create carry a large interval (TABLE_CHECKPOINT_INTERVAL:
Delta still checkpoints inside each 1,000th commit, whoever writes), and after each
commit floeline checks whether CHECKPOINT_EVERY commits have passed since the table's
last checkpoint; if so one background thread writes it (`DeltaLog.checkpoint()`) while
the stream goes on, and a connector that ends, or the process, waits for it (bounded).
CHECKPOINT_EVERY is 100, delta-rs's default interval: a checkpoint costs about 1.4 s of
Spark work on a small table, and reading a table through 100 JSON commits cost Spark no
measurable time more than through 10 (bench/RESULTS.md). A table with an interval of at
most CHECKPOINT_EVERY (made by others, by `floeline sql`, or by a connector before this) keeps Delta's
checkpoints in its commits. Checkpoints hold no data and no positions: one lost to a
crash is written after a later commit."""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time

from floeline.errors import first_lines
from floeline.spark import java_class

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
    try:
        delta_log_class = java_class(spark, "org.apache.spark.sql.delta.DeltaLog")
        delta_log = delta_log_class.forTable(spark._jsparkSession, path)
        snapshot = delta_log.unsafeVolatileSnapshot()
        setting = snapshot.metadata().configuration().get(CHECKPOINT_INTERVAL_PROPERTY)
        interval = int(setting.get()) if setting.isDefined() else CHECKPOINT_EVERY
        table_id, version = snapshot.metadata().id(), snapshot.version()
        provided = snapshot.checkpointProvider().version()
    except Exception as exc:  # the commit is in; its checkpoint can wait for the next one
        log.debug("no checkpoint check for %s: %s", path, first_lines(str(exc), 1))
        return
    after_commit_of(spark, path, table_id, version, provided, interval, delta_log)


def after_commit_of(spark, path: str, table_id: str, version: int, provided: int,
                    interval: int | None, delta_log=None) -> None:
    """after_commit for a commit whose snapshot was read already: the table's id, the
    committed `version`, the snapshot's checkpoint (`provided`) and the table's interval
    (None: Delta's default). `delta_log` is looked up only when a checkpoint may be due."""
    interval = CHECKPOINT_EVERY if interval is None else interval
    if not checkpoint_due(version, provided, interval):
        return  # (the writer decides again under its lock when it may be due)
    writer = _writer()
    try:
        if delta_log is None:
            delta_log = java_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
                spark._jsparkSession, path)
        no_catalog_table = java_class(spark, "scala.Option").empty()
    except Exception as exc:  # the commit is in; its checkpoint can wait for the next one
        log.debug("no checkpoint for %s: %s", path, first_lines(str(exc), 1))
        return
    # A snapshot made from an earlier one keeps that one's checkpoint: the writer's own
    # record is the later one then (for this table: a table made again at the same path
    # has another id).
    writer.enqueue_if_due((path, table_id), version, provided, interval, delta_log, no_catalog_table)


def drain(paths=None, timeout_s: float = 30.0) -> bool:
    """Wait until the queued checkpoints of the tables at `paths` (None: all) are
    written, so a connector that ends leaves its tables checkpointed; False, logged,
    when `timeout_s` passed first (those left are written after a later commit)."""
    done = _writer().drain(None if paths is None else set(paths), timeout_s)
    if not done:
        log.info("Delta checkpoints still queued after %.0f s; a later commit queues them again",
                 timeout_s)
    return done


class _CheckpointWriter:
    """One daemon thread writing queued checkpoints one at a time; a table (path, Delta
    table id) already queued is not queued twice."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._pending: set[tuple[str, str]] = set()
        self._written: dict[tuple[str, str], int] = {}
        self._lock = threading.Condition()
        threading.Thread(target=self._run, name="floeline-delta-checkpoints", daemon=True).start()

    def enqueue_if_due(self, table: tuple[str, str], version: int, provided: int, interval: int,
                       delta_log, no_catalog_table) -> None:
        """Queue `table`'s checkpoint when checkpoint_due says so after the commit of
        `version`, its snapshot's checkpoint being `provided`. Decided under the lock
        with what this writer wrote: decided outside it, a checkpoint finishing between
        the decision and the queueing was queued again a few versions later."""
        with self._lock:
            written = self._written.get(table, -1)
            if table in self._pending or not checkpoint_due(version, max(provided, written), interval):
                return
            self._pending.add(table)
        log.debug("checkpoint of %s due at version %d (the snapshot's checkpoint %d, written %d)",
                  table[0], version, provided, written)
        self._queue.put((table, delta_log, no_catalog_table))

    def drain(self, paths: set[str] | None, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while any(paths is None or path in paths for path, _id in self._pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def _run(self) -> None:
        while True:
            table, delta_log, no_catalog_table = self._queue.get()
            started = time.monotonic()
            try:
                snapshot = delta_log.unsafeVolatileSnapshot()  # the latest this JVM committed
                delta_log.checkpoint(snapshot, no_catalog_table)
                with self._lock:
                    self._written[table] = max(self._written.get(table, -1), snapshot.version())
                log.debug("checkpoint of %s at version %d written in %.2f s", table[0], snapshot.version(),
                          time.monotonic() - started)
            except Exception as exc:  # e.g. Spark stopping: a later commit queues it again
                log.info("the checkpoint of %s was not written: %s", table[0], first_lines(str(exc), 1))
            finally:
                with self._lock:
                    self._pending.discard(table)
                    self._lock.notify_all()


_writer_instance: _CheckpointWriter | None = None
_writer_guard = threading.Lock()


def _writer() -> _CheckpointWriter:
    global _writer_instance
    with _writer_guard:
        if _writer_instance is None:
            _writer_instance = _CheckpointWriter()
            # Made once Spark runs, so this runs before PySpark's own exit handler stops
            # the JVM: a short process (floeline sql's COPY INTO) ends checkpointed too.
            atexit.register(drain)
        return _writer_instance
