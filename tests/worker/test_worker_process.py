"""`floeline worker` as a user runs it: a process whose connectors live in the
warehouse. SIGKILLed mid-stream and started again, every connector comes back in its
target state and every record lands exactly once; SIGTERM stops it cleanly. (A second
worker on the same warehouse waits as a standby: test_worker_standby.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.warehouse.storage import LocalStorage
from floeline.worker.store import ConnectorStore
from worker_services import (assert_exactly_once, coordinates, kafka, produce_numbered, spark,  # noqa: F401
                             topic_name, wait_for, wait_rows, worker_properties)

pytestmark = pytest.mark.integration


class WorkerProcess:
    """`python -m floeline.cli worker PROPS`, its output collected as it comes."""

    def __init__(self, properties, **env_vars: str):
        env = dict(os.environ, PYTHONUNBUFFERED="1", **env_vars)
        self.proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "worker", str(properties)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_line(self, what: str, predicate, timeout: float = 240) -> None:
        def seen():
            assert self.proc.poll() is None or predicate(), f"the worker exited:\n{self.text}"
            return predicate()
        wait_for(what, seen, timeout)

    def batches(self, name: str) -> int:
        return sum(line.startswith(f"[{name}] batch ") for line in self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def test_sigkill_mid_stream_then_restart_lands_every_record_once_in_each_target_state(
        kafka, spark, tmp_path, topic_name):
    warehouse = str(tmp_path / "warehouse")
    a, b = topic_name("pa"), topic_name("pb")
    devkafka.create_topic(kafka, a, partitions=3)
    devkafka.create_topic(kafka, b, partitions=2)
    properties = worker_properties(tmp_path, warehouse, kafka)
    # Connectors as a worker keeps them (what POST /connectors stores).
    store = ConnectorStore(LocalStorage(), warehouse)
    store.save("ka", {"name": "ka", "topics": a, "buffer.flush.time": "1", "buffer.count.records": "150"},
               "RUNNING")
    store.save("kb", {"name": "kb", "topics": b, "buffer.flush.time": "1"}, "RUNNING")
    store.save("held", {"name": "held", "topics": a, "snowflake.topic2table.map": f"{a}:HELD"}, "PAUSED")
    total_a, total_b = 1500, 1000  # a: a little over the 3 batches of ka (450 each) waited for
    produce_numbered(kafka, a, 3, 0, total_a)
    produce_numbered(kafka, b, 2, 0, total_b)

    first = WorkerProcess(properties)
    try:
        first.wait_line("rest.url", lambda: any(l.startswith("rest.url=http://127.0.0.1:") for l in first.lines))
        first.wait_line("batches of both", lambda: first.batches("ka") >= 3 and first.batches("kb") >= 1)
        produce_numbered(kafka, a, 3, total_a, 1500)
        produce_numbered(kafka, b, 2, total_b, 500)
        total_a, total_b = total_a + 1500, total_b + 500
        time.sleep(1.5)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    finally:
        first.kill()
    assert os.path.exists(os.path.join(warehouse, "_floeline", "worker", "lease.json"))  # left by the kill
    produce_numbered(kafka, a, 3, total_a, 600)
    total_a += 600

    second = WorkerProcess(properties)  # the dead worker's lease is taken at once (same host)
    try:
        second.wait_line("rest.url", lambda: any(l.startswith("rest.url=") for l in second.lines), 300)
        assert "3 connector(s) restored: held, ka, kb" in second.text
        wait_rows(spark, warehouse, a.upper(), total_a, 300)
        wait_rows(spark, warehouse, b.upper(), total_b, 300)
        assert_exactly_once(spark, warehouse, a.upper(), total_a, 3)
        assert_exactly_once(spark, warehouse, b.upper(), total_b, 2)
        assert coordinates(spark, warehouse, "HELD") == []  # PAUSED: came back paused
        assert {s.name: s.target_state for s in store.load_all()} == {
            "held": "PAUSED", "ka": "RUNNING", "kb": "RUNNING"}

        # SIGTERM: every connector stops after its batch, exit 0, the lease released.
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(180) == 0, second.text
        assert "worker: stopped" in second.text and "Traceback" not in second.text
        assert not os.path.exists(os.path.join(warehouse, "_floeline", "worker", "lease.json"))
    finally:
        second.kill()
    assert_exactly_once(spark, warehouse, a.upper(), total_a, 3)
