"""The connector starts its query again after a transient failure, within the bound
(errors.retry.timeout), and stops at once on a terminal one. The faults come from a
memory source that fails after a commit (where a Kafka source mirrors offsets to its
consumer group): the table has the batch, Spark's checkpoint does not, so the
restarted query replays it and the table's positions make the replay a no-op."""

from __future__ import annotations

import json

import pytest

from floeline.errors import RetriesExhausted, ServiceUnavailable, TableError
from floeline.sources.memory import MemorySource

pytestmark = pytest.mark.integration


class FlakySource(MemorySource):
    """A memory source that raises `fault` the first `times` times it is told of a
    commit: after it (`after_commit`, by default) or before it (`before_commit`)."""

    def __init__(self, config, log, fault: Exception, times: int, before: bool = False):
        super().__init__(config, log)
        self.fault, self.times, self.before, self.raised = fault, times, before, 0

    def _fail(self):
        if self.raised < self.times:
            self.raised += 1
            raise self.fault

    def before_commit(self):
        if self.before:
            self._fail()

    def after_commit(self, positions, finished):
        if not self.before:
            self._fail()


def run(spark, config, source):
    from floeline.ingest import Connector

    connector = Connector(config, spark, source=source)
    connector.run(until_caught_up=True)
    return connector


def rows(read_table) -> list[int]:
    return sorted(r["N"] for r in read_table("ORDERS").select("N").collect())


def fill(memory_log, count: int) -> None:
    memory_log.append("orders/0", "orders",
                      [json.dumps({"n": i}).encode() for i in range(count)])


def test_transient_failure_restarts_the_query_and_the_table_ends_exact(
        spark, memory_log, make_config, read_table, caplog):
    fill(memory_log, 6)
    config = make_config(buffer__count__records=2)
    source = FlakySource(config, memory_log, ServiceUnavailable("broker restarting"), times=2)
    with caplog.at_level("WARNING", logger="floeline"):
        run(spark, config, source)
    assert source.raised == 2
    assert rows(read_table) == list(range(6))  # every record once, though a batch ran twice
    restarts = [r.getMessage() for r in caplog.records if "restarting its query" in r.getMessage()]
    assert len(restarts) == 2 and "broker restarting" in restarts[0] and "(restart 1," in restarts[0]


def test_restarts_stop_at_the_bound(spark, memory_log, make_config):
    fill(memory_log, 2)
    config = make_config(errors__retry__timeout=1500)
    source = FlakySource(config, memory_log, ServiceUnavailable("broker down"), times=1000,
                         before=True)  # every attempt fails before its commit
    with pytest.raises(RetriesExhausted, match=f"(?s)connector {config.name}'s streaming query still "
                                               f"failing after .*broker down.*errors.retry.timeout=1500"):
        run(spark, config, source)
    assert source.raised >= 2


def test_terminal_failure_is_not_restarted(spark, memory_log, make_config):
    fill(memory_log, 2)
    config = make_config()
    source = FlakySource(config, memory_log, TableError("table dropped"), times=1000)
    with pytest.raises(TableError, match="table dropped"):
        run(spark, config, source)
    assert source.raised == 1


def test_java_errors_are_classed_by_the_jvm(spark):
    """A query failure whose Java cause is a Kafka RetriableException (or a timeout) is
    transient, however deep Spark wraps it; anything else is a terminal QueryError."""
    from floeline.errors import QueryError, Transient
    from floeline.ingest.connector import is_transient_java, query_failure

    jvm = spark._jvm

    class Captured(Exception):  # what PySpark raises for a Java error: the throwable in _origin
        def __init__(self, throwable):
            super().__init__(throwable.toString())
            self._origin = throwable

    kafka_timeout = jvm.org.apache.kafka.common.errors.TimeoutException("Timed out waiting for a node")
    wrapped = jvm.org.apache.spark.SparkException("Job aborted", jvm.java.lang.RuntimeException(
        "task failed", kafka_timeout))
    assert is_transient_java(Captured(wrapped))
    assert isinstance(query_failure("c", Captured(wrapped)), Transient)
    lost = jvm.java.lang.IllegalStateException("Cannot fetch offset 5 (data loss)")
    assert not is_transient_java(Captured(lost))
    assert isinstance(query_failure("c", Captured(lost)), QueryError)
    assert not is_transient_java(ValueError("not Java"))
