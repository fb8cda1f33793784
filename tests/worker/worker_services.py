"""The real services the worker tests run against: the integration suite's Kafka broker
and Spark session fixtures (tests/integration/conftest.py), reused rather than copied;
and helpers to produce numbered records and check a table holds each exactly once."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from floeline.sources.kafka import produce
from floeline.warehouse.tables import read_declared

_spec = importlib.util.spec_from_file_location(
    "floeline_integration_conftest", Path(__file__).resolve().parents[1] / "integration" / "conftest.py")
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)

topic_name = _integration.topic_name


# The modules here import kafka, spark and aws from this file; a fixture a module imports
# is that module's own, so these only hand on conftest.py's, which every module shares
# (one broker and one set of local AWS services for tests/worker, not one per module).
@pytest.fixture(scope="session")
def kafka(kafka):
    return kafka


@pytest.fixture(scope="session")
def spark(spark):
    return spark


@pytest.fixture(scope="session")
def aws(aws):
    return aws


def produce_numbered(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    """Records {"n": i} for i in start..start+count, record i to partition i % partitions."""
    produce(bootstrap, topic, [{"value": {"n": start + i}, "partition": (start + i) % partitions}
                               for i in range(count)])


def worker_properties(tmp_path, warehouse: str, kafka: str) -> Path:
    """worker.properties for a worker process on any free port, this test's warehouse
    and checkpoints, and the test broker."""
    properties = tmp_path / "worker.properties"
    properties.write_text(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={warehouse}\n"
                          f"bootstrap.servers={kafka}\nfloeline.checkpoint.dir={tmp_path}/checkpoints\n")
    return properties


def table_path(warehouse: str, table: str) -> str:
    return os.path.join(warehouse, "FLOELINE", "PUBLIC", table)


def table_committed(path: str) -> bool:
    """True once the table at `path` has its first commit: Delta makes _delta_log before
    it writes that commit, and reading the table in between finds no table."""
    log = os.path.join(path, "_delta_log")
    return os.path.isdir(log) and any(name.endswith(".json") for name in os.listdir(log))


def coordinates(spark, warehouse: str, table: str) -> list[tuple[int, int]]:
    """Every (partition, offset) the table holds, from RECORD_METADATA ([] before its
    first commit)."""
    path = table_path(warehouse, table)
    if not table_committed(path):
        return []
    df = read_declared(spark, path)
    return [(r["p"], r["o"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect()]


def expected(total: int, partitions: int) -> set[tuple[int, int]]:
    """The (partition, offset) of records 0..total produced by produce_numbered."""
    return {(p, o) for p in range(partitions) for o in range(len(range(p, total, partitions)))}


def assert_exactly_once(spark, warehouse: str, table: str, total: int, partitions: int) -> None:
    coords = coordinates(spark, warehouse, table)
    assert len(coords) == len(set(coords)), f"{table}: {len(coords) - len(set(coords))} duplicated rows"
    want = expected(total, partitions)
    assert set(coords) == want, f"{table}: missing {sorted(want - set(coords))[:5]}, " \
                                f"unexpected {sorted(set(coords) - want)[:5]}"


def wait_for(what: str, predicate, timeout: float = 180.0, every: float = 0.5):
    """Poll `predicate` until it returns something true; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def wait_rows(spark, warehouse: str, table: str, count: int, timeout: float = 180.0) -> None:
    wait_for(f"{count} rows in {table}", lambda: len(coordinates(spark, warehouse, table)) >= count,
             timeout, every=1.0)
