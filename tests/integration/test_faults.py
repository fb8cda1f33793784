"""Transient faults ridden through: the connector started while its broker is still
starting, the broker restarted mid-stream, the schema registry stopped mid-stream while
a batch needs it. Each ends with every record in the table exactly once.

The connectors here retry with errors.retry.delay.max.ms=500 (1000 for the registry)
instead of the default 5000: the same retries, backed off to a lower cap, so a service
that is back is tried again within a second instead of up to 5 s later (the behaviour
checked, retried and not raised, is the same; only the wait after the service is back
is shorter).

The broker and the registry here are this module's own (other ports, other state
directories), so stopping them never disturbs the session's broker and registry that
the other tests share; both are stopped when the module ends."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from floeline.dev.services import free_port
from floeline.dev import kafka as devkafka
from floeline.dev import registry as devregistry
from floeline.config import config_from_dict
from floeline.config.decoding import AVRO_CONVERTER
from floeline.dev.services import port_accepts
from floeline.sources.kafka import produce
from records_io import avro, register, wire

pytestmark = pytest.mark.integration

ROW = {"type": "record", "name": "Row", "namespace": "faults",
       "fields": [{"name": "n", "type": "long"}]}
# How long the registry stays down once a batch that needs it runs (see the test).
REGISTRY_DOWN_S = 8
ROW_V2 = {**ROW, "fields": ROW["fields"] + [{"name": "note", "type": "string", "default": ""}]}


class OwnBroker:
    """A broker of this module's own, which its tests stop and start."""

    def __init__(self, state, port: int):
        self.state, self.port = state, port
        self.bootstrap = devkafka.start(state, port)

    def stop(self) -> None:
        devkafka.stop(self.state)

    def start(self) -> None:
        devkafka.start(self.state, self.port)


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory):
    broker = OwnBroker(tmp_path_factory.mktemp("own_kafka"), free_port())
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def own_registry(tmp_path_factory):
    """A registry that keeps its schemas across a restart (devregistry persistent)."""
    state, port = tmp_path_factory.mktemp("own_registry"), free_port()
    url = devregistry.start(state, port, persistent=True)
    yield state, port, url
    devregistry.stop(state)


def connector_config(bootstrap: str, warehouse: str, topic: str, **settings):
    base = {"name": f"f{uuid.uuid4().hex[:6]}", "bootstrap.servers": bootstrap, "topics": topic,
            "floeline.warehouse": warehouse, "buffer.flush.time": "1"}
    base.update({k.replace("__", "."): str(v) for k, v in settings.items()})
    return config_from_dict(base)


def assert_exactly_once(df, expected_per_partition: dict[int, int]) -> None:
    coords = [(r["p"], r["o"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o").collect()]
    assert len(coords) == len(set(coords)), "duplicate rows"
    expected = {(p, o) for p, n in expected_per_partition.items() for o in range(n)}
    assert set(coords) == expected, f"missing {sorted(expected - set(coords))[:5]}"


def numbered(start: int, count: int, partitions: int = 2) -> list[dict]:
    return [{"value": {"n": start + i}, "partition": (start + i) % partitions} for i in range(count)]


class Running:
    """A connector running in a thread (processing-time trigger), as `floeline run` does."""

    def __init__(self, spark, config):
        from floeline.ingest import Connector

        self.connector = Connector(config, spark)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.connector.run()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.connector.stop()
        self.thread.join(timeout=180)
        assert not self.thread.is_alive(), "the connector did not stop"
        if self.error is not None:
            raise self.error


    def rows_written(self) -> int:
        """Rows its batches committed so far (from their reports: no Spark job, which
        would wait for the task slots a batch blocked on a fault holds)."""
        return sum(sum(r.rows_written.values()) for r in list(self.connector.reports))

    def wait_for_a_batch_reading(self, spark, timeout_s: float = 150) -> None:
        """Until a batch after the last one reported runs tasks (that batch has ended in
        the query's progress, a trigger is active with data, and a stage has tasks
        running): the new records it reads are being decoded."""
        tracker = spark.sparkContext.statusTracker()
        last = max(r.batch_id for r in self.connector.reports)
        name = f"floeline-{self.connector.config.name}"
        deadline = time.monotonic() + timeout_s
        while True:
            queries = [q for q in spark.streams.active if q.name == name]
            ended = [(q.lastProgress or {}).get("batchId", -1) for q in queries]
            statuses = [q.status for q in queries]
            if any(b >= last for b in ended) and any(
                    s["isTriggerActive"] and s["isDataAvailable"] for s in statuses) and any(
                    (info := tracker.getStageInfo(stage)) is not None and info.numActiveTasks > 0
                    for stage in tracker.getActiveStageIds()):
                return
            if not self.thread.is_alive():
                self.stop()  # raises the connector's error
                pytest.fail("the connector stopped early")
            assert time.monotonic() < deadline, f"no batch reading records after {timeout_s} s"
            time.sleep(0.1)

    def wait_for_rows(self, count: int, timeout_s: float = 150) -> None:
        deadline = time.monotonic() + timeout_s
        while self.rows_written() < count:
            if not self.thread.is_alive():
                self.stop()  # raises the connector's error
                pytest.fail("the connector stopped early")
            assert time.monotonic() < deadline, f"{self.rows_written()} of {count} rows after {timeout_s} s"
            time.sleep(0.2)


def test_connector_started_while_the_broker_is_still_starting(own_broker, spark, warehouse,
                                                              read_table):
    """The issue's `make bench` after a fresh broker start: the connector's first calls
    meet a broker that is not up (connection refused), then one that is loading its
    consumer-group coordinator; they are retried, not raised."""
    from floeline.ingest import Connector

    topic = f"starting_{uuid.uuid4().hex[:8]}"
    devkafka.create_topic(own_broker.bootstrap, topic, partitions=2)
    produce(own_broker.bootstrap, topic, numbered(0, 200))
    config = connector_config(own_broker.bootstrap, warehouse, topic,
                              errors__retry__delay__max__ms=500)
    own_broker.stop()
    starting = threading.Thread(target=own_broker.start)
    starting.start()
    try:
        assert not port_accepts(own_broker.port), "the broker answered before the connector started"
        Connector(config, spark).run(until_caught_up=True)
    finally:
        starting.join()
    assert_exactly_once(read_table(topic.upper()), {0: 100, 1: 100})


def test_broker_restarted_mid_stream(own_broker, spark, warehouse, read_table):
    topic = f"restart_{uuid.uuid4().hex[:8]}"
    table = topic.upper()
    devkafka.create_topic(own_broker.bootstrap, topic, partitions=2)
    produce(own_broker.bootstrap, topic, numbered(0, 100))
    running = Running(spark, connector_config(own_broker.bootstrap, warehouse, topic,
                                              buffer__count__records=25,
                                              errors__retry__delay__max__ms=500))
    try:
        running.wait_for_rows(1)
        own_broker.stop()  # mid-stream: batches are still to come
        own_broker.start()
        produce(own_broker.bootstrap, topic, numbered(100, 100))
        running.wait_for_rows(200)
    finally:
        running.stop()
    assert_exactly_once(read_table(table), {0: 100, 1: 100})


def test_registry_stopped_mid_stream_while_a_batch_needs_it(own_registry, kafka, spark, warehouse,
                                                            read_table):
    """Records whose schema the connector has not fetched yet arrive while the registry
    is down: their batch waits (retrying) until it is back, and none goes to a DLQ or
    error table.

    The registry stays down until that batch's tasks run, then REGISTRY_DOWN_S more
    (was a flat 30 s from the stop, whether or not a batch had started by then): its
    retries (0.1, 0.2, 0.4, 0.8 s, then every errors.retry.delay.max.ms=1000) go on
    at their cap for most of it, and nothing of v2 is written meanwhile."""
    state, port, url = own_registry
    topic = f"registry_{uuid.uuid4().hex[:8]}"
    table = topic.upper()
    v1 = register(url, f"{topic}-value", json.dumps(ROW))
    v2 = register(url, f"{topic}-value", json.dumps(ROW_V2))
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": wire(v1, avro(ROW, {"n": i})), "partition": i % 2}
                           for i in range(50)])
    running = Running(spark, connector_config(
        kafka, warehouse, topic, value__converter=AVRO_CONVERTER,
        value__converter__schema__registry__url=url, errors__tolerance="all",
        errors__retry__delay__max__ms=1000))
    try:
        running.wait_for_rows(50)
        devregistry.stop(state)
        produce(kafka, topic, [{"value": wire(v2, avro(ROW_V2, {"n": i, "note": "v2"})),
                                "partition": i % 2} for i in range(50, 100)])
        running.wait_for_a_batch_reading(spark)  # the v2 batch: its decoding needs the registry
        time.sleep(REGISTRY_DOWN_S)
        assert running.rows_written() == 50  # nothing of v2 could be decoded meanwhile
        devregistry.start(state, port, persistent=True)
        running.wait_for_rows(100)
    finally:
        running.stop()
    df = read_table(table)
    assert_exactly_once(df, {0: 50, 1: 50})
    assert df.where("NOTE = 'v2'").count() == 50
    assert not any(name.endswith("_ERRORS") for name in _tables(warehouse))


def _tables(warehouse: str) -> list[str]:
    import os

    root = os.path.join(warehouse, "FLOELINE", "PUBLIC")
    return os.listdir(root) if os.path.isdir(root) else []
