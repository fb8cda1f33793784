"""One slow request about a connector delays no request about another (herder.py's two
locks), with a real broker and the real Spark session: a store write that hangs (as an
S3 PUT can) and a DELETE waiting for its connector's batch in flight, while requests
about the other connector and the list are answered at once; and a second request about
the same connector waits its turn, so the store and the herder agree after both."""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from floeline.dev import kafka as devkafka
from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import NotFound
from floeline.worker.herder import Herder
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import kafka, produce_numbered, spark, topic_name, wait_for, wait_rows  # noqa: F401

pytestmark = pytest.mark.integration

PROMPT_S = 5.0  # a request about another connector: far under the seconds the slow one is held


class HangingStorage(LocalStorage):
    """A local disk whose writes and deletes of paths containing `hold` wait until
    `release` is set: a store that hangs on one connector's record, in real time."""

    def __init__(self):
        super().__init__()
        self.hold: str | None = None
        self.entered, self.release = threading.Event(), threading.Event()

    def _wait(self, location: str) -> None:
        if self.hold is not None and self.hold in location:
            self.entered.set()
            assert self.release.wait(120), "the test never released the held store call"

    def write_text(self, location: str, text: str) -> None:
        self._wait(location)
        super().write_text(location, text)

    def delete(self, location: str) -> bool:
        self._wait(location)
        return super().delete(location)


def timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


def test_a_slow_store_write_and_a_delete_waiting_for_its_batch_hold_up_no_other_connector(
        spark, kafka, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    a, b = topic_name("orda"), topic_name("ordb")
    devkafka.create_topic(kafka, a)
    devkafka.create_topic(kafka, b)
    produce_numbered(kafka, a, 1, 0, 20)
    produce_numbered(kafka, b, 1, 0, 20)
    storage = HangingStorage()
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse, "bootstrap.servers": kafka,
                                          "floeline.worker.batch.slots": "2"})
    herder = Herder(spark, settings, ConnectorStore(storage, warehouse), out=io.StringIO())
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        herder.create("a", {"topics": a, "buffer.flush.time": "1"})
        herder.create("b", {"topics": b, "buffer.flush.time": "1"})
        wait_rows(spark, warehouse, a.upper(), 20)
        wait_rows(spark, warehouse, b.upper(), 20)

        # 1. a's store write hangs (pause a): b, the list and a's own status answer at once.
        storage.hold = "/a.json"
        first_run = herder._runners["a"].connector
        pausing = pool.submit(herder.pause, "a")
        assert storage.entered.wait(30)
        assert timed(herder.connectors)[1] < PROMPT_S
        assert timed(herder.status, "a")[0]["connector"]["state"] == "RUNNING"  # not stored yet: unchanged
        for call in (herder.pause, herder.resume):  # b's own store writes go on
            assert timed(call, "b")[1] < PROMPT_S
        assert timed(herder.status, "b")[1] < PROMPT_S
        # A second request about a waits for the first: the store and memory agree after each.
        resuming = pool.submit(herder.resume, "a")
        time.sleep(1.0)
        assert not pausing.done() and not resuming.done()
        storage.release.set()
        pausing.result(30)
        resuming.result(30)
        storage.hold = None
        assert herder._runners["a"].target == "RUNNING" and herder.store.load("a").target_state == "RUNNING"
        wait_for("a running again", lambda: herder._runners["a"].connector not in (None, first_run)
                 and herder.status("a")["connector"]["state"] == "RUNNING")

        # 2. a DELETE waits for a's batch in flight: every batch slot is taken here, so a's
        # next batch (it has records) cannot finish until they are given back.
        slots, taken = herder.batch_slots(), 0
        try:
            for _ in range(2):  # b's batch in flight gives its slot back within seconds
                assert slots.acquire(timeout=120)
                taken += 1
            produce_numbered(kafka, a, 1, 20, 10)
            query = wait_for("a's query", lambda: next(
                (q for q in spark.streams.active if q.name == "floeline-a"), None), 60)
            wait_for("a's batch waiting for a slot", lambda: _busy_for(query, 2.0), 120)
            deleting = pool.submit(herder.delete, "a")
            time.sleep(1.0)
            assert not deleting.done()
            assert timed(herder.connectors)[1] < PROMPT_S
            assert timed(herder.status, "b")[1] < PROMPT_S
            assert timed(herder.pause, "b")[1] < PROMPT_S
            assert timed(herder.resume, "b")[1] < PROMPT_S
            assert not deleting.done()
        finally:
            for _ in range(taken):
                slots.release()
        deleting.result(180)
        assert herder.connectors() == ["b"] and herder.store.load("a") is None
        with pytest.raises(NotFound):
            herder.status("a")
        produce_numbered(kafka, b, 1, 20, 10)
        wait_rows(spark, warehouse, b.upper(), 30)  # b lands on
    finally:
        storage.release.set()
        pool.shutdown(wait=False)
        herder.close()


def _busy_for(query, seconds: float) -> bool:
    """True when the query's trigger stays active `seconds` (a batch, not an empty trigger)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not query.status["isTriggerActive"]:
            return False
        time.sleep(0.1)
    return True
