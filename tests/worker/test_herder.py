"""The herder through its Python API, with a real broker and the real Spark session:
several connectors in one session, each landing its rows exactly once; one failing
beside one that keeps going; pause, resume, stop, restart and config updates."""

from __future__ import annotations

import io
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce
from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import AlreadyExists, BadRequest, NotFound
from floeline.worker.herder import Herder
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import (assert_exactly_once, coordinates, kafka, produce_numbered, spark,  # noqa: F401
                             topic_name, wait_for, wait_rows)

pytestmark = pytest.mark.integration


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "warehouse")


@pytest.fixture
def herder(spark, kafka, warehouse):
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka,
                                          "listeners": "http://127.0.0.1:0"})
    out = io.StringIO()
    herder = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=out)
    herder.output = out
    yield herder
    herder.close()


def state(herder, name):
    return herder.status(name)["connector"]["state"]


def wait_state(herder, name, wanted, timeout=180):
    wait_for(f"{name} {wanted}", lambda: state(herder, name) == wanted, timeout)


def test_two_connectors_in_one_session_land_exactly_once_through_pause_resume_stop_and_updates(
        herder, kafka, spark, warehouse, topic_name):
    a, b = topic_name("wa"), topic_name("wb")
    devkafka.create_topic(kafka, a, partitions=2)
    devkafka.create_topic(kafka, b)
    produce_numbered(kafka, a, 2, 0, 200)
    produce_numbered(kafka, b, 1, 0, 100)
    # Each config as a user posts it: no broker, no warehouse (the worker's).
    herder.create("a", {"topics": a, "buffer.flush.time": "1"})
    herder.create("b", {"name": "b", "topics": b, "buffer.flush.time": "1"})
    assert herder.connectors() == ["a", "b"]
    assert herder.config("a") == {"name": "a", "topics": a, "buffer.flush.time": "1"}
    with pytest.raises(AlreadyExists, match="Connector a already exists"):
        herder.create("a", {"topics": a})
    wait_state(herder, "a", "RUNNING")
    wait_state(herder, "b", "RUNNING")
    wait_rows(spark, warehouse, a.upper(), 200)
    wait_rows(spark, warehouse, b.upper(), 100)
    assert herder.topics("a") == [a]
    # /metrics (the REST listener's) refreshes lag first: every connector's, labelled.
    from prometheus_client import REGISTRY

    herder.before_scrape()
    for name, topic in (("a", a), ("b", b)):
        assert REGISTRY.get_sample_value("floeline_channel_lag_records",
                                         {"connector": name, "channel": f"{topic}/0"}) == 0

    # pause: asynchronous; the query stops after its batch, the other goes on.
    started = time.monotonic()
    herder.pause("a")
    assert time.monotonic() - started < 1.0
    wait_state(herder, "a", "PAUSED")
    produce_numbered(kafka, a, 2, 200, 50)
    produce_numbered(kafka, b, 1, 100, 50)
    wait_rows(spark, warehouse, b.upper(), 150)
    time.sleep(3)
    assert len(coordinates(spark, warehouse, a.upper())) == 200, "a paused connector landed rows"
    herder.resume("a")
    wait_rows(spark, warehouse, a.upper(), 250)

    # stop: Connect's STOPPED (no task); resume starts it again.
    herder.stop("a")
    wait_state(herder, "a", "STOPPED")
    assert herder.status("a")["tasks"] == [] and herder.info("a")["tasks"] == []
    produce_numbered(kafka, a, 2, 250, 10)
    herder.resume("a")
    wait_rows(spark, warehouse, a.upper(), 260)

    # A pause and a resume at once, while it runs: its run ends after the resume (the
    # stop the pause asked for), and the connector runs again; it is not FAILED.
    wait_state(herder, "a", "RUNNING")
    runner_a = herder._runners["a"]
    paused = runner_a.connector
    assert paused is not None
    herder.pause("a")
    herder.resume("a")

    def running_again():
        assert state(herder, "a") != "FAILED", herder.status("a")
        return runner_a.connector not in (None, paused) and state(herder, "a") == "RUNNING"

    wait_for("a running again after a pause and a resume at once", running_again)
    produce_numbered(kafka, a, 2, 260, 10)
    wait_rows(spark, warehouse, a.upper(), 270)

    # A config update restarts the connector with the new config.
    runner = herder._runners["b"]
    before = runner.connector
    merged = herder.patch_config("b", {"buffer.flush.time": "2"})
    assert merged["buffer.flush.time"] == "2" and herder.config("b")["buffer.flush.time"] == "2"
    wait_for("b restarted", lambda: runner.connector is not None and runner.connector is not before)
    assert runner.connector.config.flush_time_s == 2
    wait_state(herder, "b", "RUNNING")
    produce_numbered(kafka, b, 1, 150, 30)
    wait_rows(spark, warehouse, b.upper(), 180)
    assert herder.put_config("b", {"topics": b, "buffer.flush.time": "1"}) is False

    assert_exactly_once(spark, warehouse, a.upper(), 270, 2)
    assert_exactly_once(spark, warehouse, b.upper(), 180, 1)
    output = herder.output.getvalue()
    assert "[a] batch " in output and "[b] batch " in output
    assert "after the connector started" in output  # each its own start-up clock

    herder.delete("b")
    assert herder.connectors() == ["a"]
    with pytest.raises(NotFound, match="Connector b not found"):
        herder.status("b")
    assert [s.name for s in herder.store.load_all()] == ["a"]


def test_an_invalid_config_is_refused_naming_every_key_and_nothing_is_created(herder):
    with pytest.raises(BadRequest) as err:
        herder.create("bad", {"topics": "t", "buffer.flush.time": "soon", "snowflake.topic2tabel.map": "x"})
    assert "buffer.flush.time='soon'" in str(err.value) and "snowflake.topic2tabel.map" in str(err.value)
    assert herder.connectors() == [] and herder.store.load_all() == []
    with pytest.raises(BadRequest, match="doesn't match connector name"):
        herder.create("x", {"name": "y", "topics": "t"})
    with pytest.raises(NotFound, match="Connector nope not found"):
        herder.pause("nope")


def test_a_failing_connector_goes_failed_with_its_trace_while_the_other_keeps_landing(
        herder, kafka, spark, warehouse, topic_name):
    good, bad = topic_name("good"), topic_name("bad")
    devkafka.create_topic(kafka, good)
    devkafka.create_topic(kafka, bad)
    produce_numbered(kafka, good, 1, 0, 50)
    produce(kafka, bad, [{"id": 1}, b'{"id": 2,', {"id": 3}])
    herder.create("good", {"topics": good, "buffer.flush.time": "1"})
    herder.create("bad", {"topics": bad, "buffer.flush.time": "1"})
    wait_state(herder, "bad", "FAILED")
    status = herder.status("bad")
    trace = status["connector"]["trace"]
    assert "RecordError" in trace and "not valid JSON" in trace and f"topic={bad}" in trace
    assert status["tasks"][0]["state"] == "FAILED" and status["tasks"][0]["trace"] == trace

    wait_rows(spark, warehouse, good.upper(), 50)
    produce_numbered(kafka, good, 1, 50, 50)
    wait_rows(spark, warehouse, good.upper(), 100)
    assert state(herder, "good") == "RUNNING"

    # A restart retries it (the record is still bad: FAILED again).
    reply = herder.restart("bad", include_tasks=True, only_failed=True)
    assert reply["connector"]["state"] == "RESTARTING" and reply["tasks"][0]["state"] == "RESTARTING"
    wait_for("bad retried", lambda: herder._runners["bad"].connector is not None
             or state(herder, "bad") != "RESTARTING", 60)
    wait_state(herder, "bad", "FAILED")
    # only_failed leaves a running one alone.
    assert herder.restart("good", include_tasks=True, only_failed=True)["connector"]["state"] == "RUNNING"
    # The fix: tolerate and route bad records; the update retries it and it lands.
    herder.patch_config("bad", {"errors.tolerance": "all"})
    wait_state(herder, "bad", "RUNNING")
    wait_rows(spark, warehouse, bad.upper(), 2)
    assert sorted(r["ID"] for r in spark.read.format("delta").load(
        f"{warehouse}/FLOELINE/PUBLIC/{bad.upper()}").collect()) == [1, 3]
    produce_numbered(kafka, good, 1, 100, 10)
    wait_rows(spark, warehouse, good.upper(), 110)
    assert_exactly_once(spark, warehouse, good.upper(), 110, 1)


def test_stored_connectors_come_back_in_their_target_states(spark, kafka, warehouse, topic_name):
    """A new herder on the same warehouse (the worker restarted): RUNNING ones run on
    from their tables' positions, PAUSED ones stay paused."""
    topic = topic_name("back")
    devkafka.create_topic(kafka, topic)
    produce_numbered(kafka, topic, 1, 0, 40)
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka})
    first = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=io.StringIO())
    first.create("runs", {"topics": topic, "buffer.flush.time": "1"})
    first.create("paused", {"topics": topic, "buffer.flush.time": "1",
                            "snowflake.topic2table.map": f"{topic}:PAUSED_COPY"}, initial_state="PAUSED")
    wait_rows(spark, warehouse, topic.upper(), 40)
    assert state(first, "paused") == "PAUSED"
    first.close()

    produce_numbered(kafka, topic, 1, 40, 20)
    second = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=io.StringIO())
    try:
        assert second.start() == ["paused", "runs"]
        wait_rows(spark, warehouse, topic.upper(), 60)
        assert state(second, "paused") == "PAUSED"
        assert coordinates(spark, warehouse, "PAUSED_COPY") == []
        assert_exactly_once(spark, warehouse, topic.upper(), 60, 1)
    finally:
        second.close()
