"""The streaming job: one Spark Structured Streaming query per connector, reading its
source (sources/) in the normalized layout; each micro-batch is routed to its tables,
shaped by each table's pipe and committed with the channels' positions.

Per micro-batch (foreachBatch):
  - steady state: one pass straight into the table (onepass.py); anything unusual in
    the batch fails that pass before Delta commits and the batch goes on below;
  - the general path (general.py): decode, check, route, then per table the table sink
    (table_sink.py) and the bad-record router (bad_records.py);
  - after the commits: the source mirrors the positions (Kafka consumer group, Kinesis
    lease table) and one progress line is printed (progress.py).
A source that changed under the connector (a topic deleted and created again, a
partition gone or behind its committed offset), found at start, before a batch or when
the query fails on lost data, stops it with an error naming the fix, or is followed
(source_changes.py).
Each batch also feeds the connector's Prometheus metrics (metrics.py); the process's
entry point serves them with the /healthz and /ready probes when floeline.metrics.port
is set (it hands in `endpoints`: ops/http.py's OpsServer).
Nothing here knows which source it reads."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

from floeline import retry, startup, waits
from floeline.config import ConnectorConfig, locations
from floeline.errors import (FloelineError, QueryError, ServiceUnavailable, SourceChanged, first_lines,
                             storage_full)
from floeline.ingest.checkpoint_guard import checkpoint_follows_changes
from floeline.ingest.general import run_general_batch
from floeline.ingest.metrics import ConnectorMetrics
from floeline.ingest.onepass import batch_range, run_one_pass_batch
from floeline.ingest.onepass_merge import run_one_pass_merge
from floeline.ingest.onepass_tables import run_one_pass_tables
from floeline.ingest.pipeline import Pipeline
from floeline.ingest.progress import BatchReport
from floeline.ingest.read_tasks import at_most_read_tasks
from floeline.ingest.results import BatchResult
from floeline.ingest.source_changes import follow
from floeline.sources import source_for
from floeline.sources.base import MirrorError, total_lag
from floeline.spark import java_cause_is, java_cause_message
from floeline.warehouse import checkpoints, iceberg_mirror
from floeline.warehouse.iceberg_tables import require_iceberg_mirror

log = logging.getLogger("floeline")

# How long a Spark that ended under the connector waits for the stop signal that may
# have ended it, sent to the whole process group, to reach Python as well.
_SIGNAL_GRACE_S = 2.0
# Scrapes and readiness probes ask the source for its heads at most this often.
_HEADS_MAX_AGE_S = 1.0
# buffer.flush.time=0 (back-to-back micro-batches, a floeline extension) as a trigger:
# a batch starts as soon as the one before ends; with nothing new, Spark asks the
# source again after this, not after its 10 ms polling delay (an idle connector's JVM
# measured at 19 % of a core with "0 seconds", 9 % with this, 2 % at 1 s). Kinesis:
# every read asks each shard (GetRecords), which Kinesis allows 5 times a second.
BACK_TO_BACK_TRIGGER = {"kafka": "100 milliseconds", "kinesis": "250 milliseconds"}


def trigger_interval(flush_time_s: int, source: str = "kafka") -> str:
    """The processing-time trigger of buffer.flush.time for a connector reading `source`."""
    return f"{flush_time_s} seconds" if flush_time_s > 0 else BACK_TO_BACK_TRIGGER[source]


class Connector:
    """One connector: its config, its source, its tables, its streaming query."""

    def __init__(self, config: ConnectorConfig, spark, out=None, source=None, metrics=None,
                 clock: startup.StartupClock | None = None, endpoints=None, batch_slots=None):
        self.config = config
        # A worker's connectors share its cores: a semaphore their micro-batches hold while
        # they run (None: this connector's batches never wait).
        self.batch_slots = batch_slots
        self.spark = spark
        self.out = out or sys.stdout
        self.source = source if source is not None else source_for(config)
        # The connector's own counters (the entry point may hand them in) and the
        # process's start-up clock (the first-commit line).
        self.metrics = metrics if metrics is not None else ConnectorMetrics(
            config.name, config.database, config.schema)
        self.clock = clock if clock is not None else startup.PROCESS
        self.pipeline = Pipeline(config, spark, self.source, self.metrics)
        if config.table_settings.iceberg:  # before a table is made that no Iceberg reader opens
            require_iceberg_mirror(config.name, self.pipeline.warehouse.is_local)
        self.routes: list[str] = []  # the source's routes when the query started
        # Every route read since the process started: their tables' positions are
        # checked at each start, so a route gone since is seen (Source.changed).
        self._routes_read: set[str] = set()
        self.reports: list[BatchReport] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        # How the entry point serves /metrics, /healthz and /ready on floeline.metrics.port:
        # a callable (host, port, health, ready, before_scrape=) -> a server to .start(),
        # with .port and .close() (ops/http.py's OpsServer). The batch core serves nothing.
        self.endpoints = endpoints
        self.ops_server = None  # the started endpoints while running
        self._state = "starting"  # starting | active | ended: <why>

    @property
    def row_errors(self) -> dict[str, int]:
        """Rows rejected per table (rowsErrorCount)."""
        return self.pipeline.bad.row_errors

    # ---- the streaming query -------------------------------------------------------

    def _has_checkpoint(self) -> bool:
        checkpoint = self.config.checkpoint_dir
        return bool(self.pipeline.warehouse.storage_for(checkpoint).children(
            locations.join(checkpoint, "offsets"))[1])

    def build_stream(self):
        """The source's streaming DataFrame, each channel starting right after the
        position its table holds (a Spark checkpoint made before an offsets change of
        the tables is set aside first: checkpoint_guard.py)."""
        self.source.claim()  # a standby waits here: the positions are read after it
        channels = self.source.channels()
        self.routes = sorted({c.route for c in channels})
        committed = self._committed(channels)
        changed = self.source.changed(committed)
        if changed is not None:
            raise changed
        self.metrics.started(committed)
        self.pipeline.sink.start()  # e.g. SNOWPIPE: staged files a crash left behind
        checkpoint = self.config.checkpoint_dir
        has_checkpoint = checkpoint_follows_changes(
            self.pipeline.warehouse.storage_for(checkpoint), checkpoint,
            self.pipeline.offsets_changes(channels), self._has_checkpoint(), self.config.name)
        return self.source.open(self.spark, committed, has_checkpoint)

    def _committed(self, channels):
        """What the tables hold for `channels` and for every route named or read before."""
        self._routes_read |= {c.route for c in channels} | set(self.source.named_routes())
        return self.pipeline.committed(channels, self._routes_read)

    def run(self, until_caught_up: bool = False) -> None:
        """Run the connector: until the source is caught up, or until `stop()` (which
        the command line's SIGINT/SIGTERM handlers call). A query that fails with a
        transient error is started again (see `_run_with_restarts`); a terminal error is raised: the
        batch's own (a RecordError, TableError, ...), RetriesExhausted, or QueryError."""
        self._start_ops_server()
        try:
            with waits.working_for(self.config.name):  # its calls' waits are its own (waits.py)
                self._run_with_restarts(until_caught_up)
            self._state = "ended: the connector stopped"
        except BaseException as exc:
            self._state = f"ended: {first_lines(str(exc), 1)}"
            raise
        finally:
            self.metrics.query_active(False)
            # Its tables' checkpoints written in the background (warehouse/checkpoints.py),
            # before their owner records go.
            checkpoints.drain(state.ref.path for state in list(self.pipeline.tables.states.values()))
            self.pipeline.release()
            self.source.close()
            if self.ops_server is not None:
                self.ops_server.close()

    # ---- metrics and probes --------------------------------------------------------

    def _start_ops_server(self) -> None:
        settings = self.config.metrics
        if settings.port is None or self.ops_server is not None:
            return
        if self.endpoints is None:
            raise FloelineError(
                f"floeline.metrics.port={settings.port} is set, but connector {self.config.name} "
                f"was started without endpoints to serve it: run it with `floeline run`, or pass "
                f"Connector(..., endpoints=floeline.ops.http.OpsServer)")
        try:
            self.ops_server = self.endpoints(settings.host, settings.port, self.health, self.readiness,
                                             before_scrape=self.refresh_heads).start()
        except OSError as exc:
            raise FloelineError(f"cannot serve metrics on {settings.host}:{settings.port} "
                                f"(floeline.metrics.port): {exc.strerror or exc}") from exc
        print(f"metrics: http://{settings.host}:{self.ops_server.port}/metrics "
              f"(and /healthz, /ready)", file=self.out, flush=True)

    def health(self) -> tuple[bool, str]:
        """Liveness: the process runs and its query is starting or active."""
        return not self._state.startswith("ended"), self._state

    def readiness(self) -> tuple[bool, str]:
        """Readiness: the query is active and the source's head is at most
        floeline.metrics.ready.max.lag records ahead of the committed positions."""
        if self._state != "active":
            return False, self._state
        self.refresh_heads()
        lag, limit = self.metrics.lag(), self.config.metrics.ready_max_lag
        if lag is None:
            return True, "active (this source does not tell its lag)"
        if lag.unit == "" and lag.value > limit:
            return False, f"behind: lag {lag.value} records > {limit} (floeline.metrics.ready.max.lag)"
        return True, f"caught up: lag {lag}"

    def refresh_heads(self, max_age_s: float = _HEADS_MAX_AGE_S):
        """Ask the source for its heads when the last answer is older than `max_age_s`;
        returns the heads, or None when asking failed or was not needed."""
        if time.monotonic() - self.metrics.heads_at < max_age_s:
            return None
        try:
            heads = self.source.heads()
        except Exception as exc:  # noqa: BLE001 - lag is reporting only
            log.warning("could not read the source's latest positions: %s", first_lines(str(exc), 1))
            self.metrics.source_read_error()
            return None
        self.metrics.set_heads(heads)
        return heads

    def _run_with_restarts(self, until_caught_up: bool) -> None:
        """Run the query; when it fails with a transient error (the broker restarting
        under Spark's Kafka source, a registry still down after the batch's own
        retries), start it again: it resumes from its checkpoint, and the positions its
        tables hold make a replayed batch a no-op. Restarts back off like any retry and
        share one bound (errors.retry.timeout), counted from the first failure since
        the last batch that committed."""
        policy = self.config.retry
        failed_since, restarts, batches = None, 0, len(self.reports)
        followed, followed_at = 0, len(self.reports)
        while True:
            try:
                self._run(until_caught_up)
                return
            except SourceChanged as exc:
                if self._stop.is_set():
                    raise
                # Moved on (fail.on.data.loss=false): the query starts again at once. A
                # change that comes back without a batch between is not followed forever.
                followed = followed + 1 if len(self.reports) == followed_at else 1
                followed_at = len(self.reports)
                if followed > _FOLLOW_AT_MOST:
                    raise
                self.failure = None
                self.pipeline.tables.commits_failed()
                follow(self.pipeline, exc)
            except Exception as exc:
                if self._stop.is_set() or not retry.is_transient(exc):
                    raise
                if len(self.reports) > batches:  # progress since the last failure
                    failed_since, restarts = None, 0
                batches = len(self.reports)
                now = time.monotonic()
                failed_since = failed_since if failed_since is not None else now
                restarts += 1
                if policy.spent(now - failed_since):
                    raise retry.exhausted(
                        f"connector {self.config.name}'s streaming query", "Spark",
                        first_lines(str(exc), 1), "Check the services it reads (the log "
                        "names each failed call).", policy, restarts, now - failed_since) from exc
                delay = max(1.0, policy.delay_s(restarts))
                log.warning("connector %s: transient failure (%s); restarting its query in "
                            "%.1f s, from its checkpoint and its tables' positions (restart "
                            "%d, %s)", self.config.name, first_lines(str(exc), 1), delay,
                            restarts, retry.limit_text(policy))
                self.failure = None
                self.pipeline.tables.commits_failed()  # a commit may have landed before the failure
                if self._stop.wait(delay):
                    return

    def _run(self, until_caught_up: bool) -> None:
        writer = (self.build_stream().writeStream
                  .foreachBatch(self._process_batch_safely)
                  .option("checkpointLocation", self.config.checkpoint_dir)
                  .queryName(f"floeline-{self.config.name}"))
        if until_caught_up:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=trigger_interval(self.config.flush_time_s,
                                                                    self.config.source))
        self.clock.mark("query start")
        query = writer.start()
        self._state = "active"
        self.metrics.query_active(True)
        try:
            self._await(query)
            error = query.exception()
        except Exception as exc:
            if not spark_gone(exc):
                if self.failure is None:  # the query failed outside a batch (source, planning)
                    self.metrics.source_read_error()
                    self._raise_if_source_changed(exc)
                    raise query_failure(self.config.name, exc) from exc
                error = None
            elif self._stop.wait(_SIGNAL_GRACE_S):
                # A stop signal sent to the process group reached Spark's JVM too, and
                # it stopped first (under spark-submit the JVM is in our group).
                return
            else:
                raise QueryError(
                    f"connector {self.config.name} stopped: Spark's JVM ended under it "
                    f"({first_lines(str(exc), 1)}); every batch it committed is in the "
                    f"tables, so running it again continues from there") from None
        if self.failure is not None:
            if self._stop.is_set() and spark_gone(self.failure):
                return  # a batch cut short by the stop: nothing of it was committed
            self._raise_if_source_changed(self.failure)
            if not isinstance(self.failure, FloelineError) and is_transient_java(self.failure):
                # A Spark job of the batch failed reading the source (the broker away).
                raise query_failure(self.config.name, self.failure) from self.failure
            raise self.failure
        if error is not None:
            self._raise_if_source_changed(error)
            raise query_failure(self.config.name, error) from error

    def _raise_if_source_changed(self, exc: BaseException) -> None:
        """When the query failed on lost data (floeline's Kafka reader, Spark's source with
        failOnDataLoss=true, the check before a batch): the source's own account of what
        changed, as SourceChanged. When the tables' positions do not explain it (a
        partition that had committed nothing yet), the checkpoint's offsets are what is
        stale: under fail.on.data.loss=false it is set aside and the query starts again
        from the tables; else the reader's own error, as QueryError."""
        if not data_lost(exc):
            return
        self.pipeline.tables.commits_failed()  # a commit may have landed before the failure
        changed = self.source.changed(self._committed(self.source.channels()))
        if changed is not None:
            raise changed from exc
        if isinstance(exc, SourceChanged):
            raise exc
        cause = exc
        while isinstance(cause, FloelineError) and cause.__cause__ is not None:
            cause = cause.__cause__  # the reader's own words, not the commit's wrapping
        reason = java_cause_message(cause, DATA_LOSS_JAVA_ERRORS) or first_lines(str(cause))
        if not self.config.fail_on_data_loss:
            raise SourceChanged(f"connector {self.config.name}: {reason}") from exc
        raise QueryError(f"connector {self.config.name} stopped: {reason}") from exc

    def _await(self, query) -> None:
        """Wait until the query ends or a stop is asked for (a short wait:
        --until-caught-up returns as soon as the last batch is done); then let a
        micro-batch in flight finish its commits and stop the query."""
        try:
            while query.isActive and not self._stop.is_set():
                query.awaitTermination(0.1)
        finally:
            if query.isActive:
                deadline = time.time() + 120
                while query.isActive and query.status["isTriggerActive"] and time.time() < deadline:
                    time.sleep(0.2)
                query.stop()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """True once `stop()` was called: a run that then ends was asked to."""
        return self._stop.is_set()

    def _process_batch_safely(self, df, batch_id: int) -> None:
        try:
            # Spark calls this on a thread of its own: the batch's waits (a registry
            # away, a DLQ topic's broker) are this connector's.
            with waits.working_for(self.config.name), \
                    self.batch_slots if self.batch_slots is not None else contextlib.nullcontext():
                self.process_batch(df, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise

    # ---- one micro-batch -----------------------------------------------------------

    def process_batch(self, batch, batch_id: int) -> BatchReport:
        started = time.time()
        self.clock.mark("first batch", started)
        self.source.before_batch()
        df = self.source.normalize(batch)
        if not self.source.bounded_read_tasks:
            df = at_most_read_tasks(df)
        bounds = batch_range(self.pipeline, batch_id)
        finished: set[str] = set()
        result = None
        if bounds is not None:
            start, end = bounds
            self.metrics.processing(end.positions)
            finished = set(end.finished - start.finished)
            one_pass = run_one_pass_merge if self.config.changes.upsert else run_one_pass_batch
            result = one_pass(self.pipeline, df, batch_id, started, start, end)
            if result is None:
                result = run_one_pass_tables(self.pipeline, df, batch_id, started, start, end)
        if result is None:
            result = run_general_batch(self.pipeline, df, batch_id, started, finished, self.routes)
        return self._finish(result, started, finished)

    def _mirror_iceberg(self, report: BatchReport) -> None:
        """Write the Iceberg metadata of the tables this batch committed to (Iceberg
        tables, warehouse/iceberg_mirror.py), before the batch counts as done: a mirror
        that fails stops the connector, and its next start mirrors the commit again."""
        cfg = self.config
        for name in sorted(report.rows_written):
            ref = self.pipeline.warehouse.table(cfg.database, cfg.schema, name)
            started = time.time()
            iceberg_mirror.mirror(ref.path, ref.full_name)
            report.phases["iceberg"] = report.phases.get("iceberg", 0.0) + time.time() - started

    def _finish(self, result: BatchResult, started: float, finished: set[str]) -> BatchReport:
        """Mirror the positions to the source, measure lag and latency, print the
        progress line."""
        report, positions, ts_min = result.report, result.positions, result.ts_min
        if self.config.table_settings.iceberg:
            self._mirror_iceberg(report)
        if (positions and report.records_read) or finished:
            try:
                self.source.after_commit(positions, finished)
            except MirrorError as exc:  # a mirror only: the tables hold the truth
                log.warning("%s", exc)
                self.metrics.source_commit_error()
        if report.records_read and ts_min is not None:
            committed_ms = int(time.time() * 1000)
            # p50 over the batch: the record-weighted median of the channels' medians.
            half, running = report.records_read / 2, 0
            for mid, records in sorted((m, r) for m, r in result.latency_samples if m is not None):
                running += records
                if running >= half:
                    report.latency_p50_ms = committed_ms - mid
                    break
            report.latency_max_ms = committed_ms - ts_min
        heads = self.refresh_heads(max_age_s=0)
        report.behind = None if heads is None else total_lag(heads)
        report.duration_s = time.time() - started
        self.metrics.committed(report, positions if report.records_read else {})
        self.reports.append(report)
        print(report.line(), file=self.out, flush=True)
        if report.records_read:
            if ts_min is not None:  # on an idle source the wait was for records, not planning
                self.clock.mark("records arrived", ts_min / 1000)
            first = self.clock.summary(time.time())
            if first is not None:
                print(first, file=self.out, flush=True)
        return report


# Java exceptions that pass by themselves: Kafka's RetriableException family (its
# TimeoutException, NetworkException, NotLeaderOrFollowerException, ...: what Spark's
# Kafka source meets while a broker restarts), and the java.util.concurrent
# TimeoutException Spark's Kafka reader raises when a fetch gets nothing in
# kafkaConsumer.pollTimeoutMs.
TRANSIENT_JAVA_ERRORS = ("org.apache.kafka.common.errors.RetriableException",
                         "java.util.concurrent.TimeoutException")


# floeline's Kafka reader (resources/java/GroupedKafka.java): reading on would skip records (a
# partition's end before the batch's start, a partition gone, records deleted by retention).
DATA_LOSS_JAVA_ERRORS = ("floeline.kafka.GroupedKafka$DataLoss",)
# Spark's Kafka source with failOnDataLoss=true (its KAFKA_DATA_LOSS conditions), and what
# its Trigger.AvailableNow says of partitions gone or ending earlier than planned: the
# first words of their messages (a query's error carries the message, not the condition).
DATA_LOSS_SPARK_ERRORS = (
    "Some data may have been lost because they are not available in Kafka any more",
    "Some of partitions in Kafka topic(s) have been lost during running query with Trigger.AvailableNow",
    "Some of partitions in Kafka topic(s) report available offset which is less than end offset")
# How often in a row, without a batch between, a changed source is followed
# (fail.on.data.loss=false) before the connector stops on it.
_FOLLOW_AT_MOST = 3


def data_lost(exc: BaseException) -> bool:
    """True when a failure, or one it arose from (a commit's TableError wraps the read
    of its records), says reading on would skip records (see the lists above)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SourceChanged):
            return True
        if not isinstance(exc, FloelineError) and (
                java_cause_is(exc, DATA_LOSS_JAVA_ERRORS)
                or any(marker in str(exc) for marker in DATA_LOSS_SPARK_ERRORS)):
            return True
        exc = exc.__cause__
    return False


def query_failure(connector: str, exc: BaseException) -> Exception:
    """The connector's error for a query that failed outside floeline's own code:
    ServiceUnavailable (transient: restarted) when a Java exception in its causes is
    one of TRANSIENT_JAVA_ERRORS, StorageFull when the checkpoint's disk is full, else
    QueryError."""
    full = storage_full(exc, f"connector {connector}'s query", "its checkpoint or the warehouse")
    if full is not None:
        return full
    if is_transient_java(exc):
        return ServiceUnavailable(f"connector {connector}'s query failed: {first_lines(str(exc))}")
    return QueryError(f"connector {connector} stopped: {first_lines(str(exc))}")


def is_transient_java(exc: BaseException) -> bool:
    """True when the Java exception behind a PySpark error, or one of its causes, is
    an instance of a TRANSIENT_JAVA_ERRORS class."""
    return java_cause_is(exc, TRANSIENT_JAVA_ERRORS)


def spark_gone(exc: BaseException) -> bool:
    """True when an error says Spark itself is gone (its JVM ended, its context was
    stopped), not that the query failed: what a stop signal that also reached the JVM
    looks like from Python."""
    from py4j.protocol import Py4JError, Py4JNetworkError

    seen = set()
    while exc is not None and id(exc) not in seen:  # the error, and those it arose from
        seen.add(id(exc))
        if isinstance(exc, (Py4JNetworkError, ConnectionError)):
            return True
        try:
            text = str(exc)
        except (Py4JError, ConnectionError):
            return True  # a Java error reads its text from the JVM, and the JVM is not there
        if any(m in text for m in ("stopped SparkContext", "SparkContext was shut down",
                                   "SparkContext has been shutdown",
                                   # PySpark reading a Java error from a JVM half shut down
                                   "py4j.reflection.TypeUtil.isInstanceOf does not exist in the JVM")):
            return True
        exc = exc.__cause__ or exc.__context__
    return False

