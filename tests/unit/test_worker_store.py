"""The worker's store (connector configs and target states under the warehouse) and its
lease (one worker per warehouse)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from floeline.errors import FloelineError
from floeline.warehouse.storage import LocalStorage
from floeline.worker.store import ConnectorStore, WorkerLease, WorkerRunning


def test_configs_and_target_states_round_trip_and_survive_a_new_store(tmp_path):
    store = ConnectorStore(LocalStorage(), str(tmp_path))
    store.save("orders", {"name": "orders", "topics": "o", "password": "s3cret"}, "RUNNING")
    store.save("a/b ..", {"name": "a/b .."}, "PAUSED")
    again = ConnectorStore(LocalStorage(), str(tmp_path))
    loaded = {s.name: s for s in again.load_all()}
    assert sorted(loaded) == ["a/b ..", "orders"]
    assert loaded["orders"].config["password"] == "s3cret"
    assert loaded["a/b .."].target_state == "PAUSED"
    folder = tmp_path / "_floeline" / "worker" / "connectors"
    assert sorted(os.listdir(folder)) == ["a%2Fb%20...json", "orders.json"]  # no temp files left
    again.delete("orders")
    assert [s.name for s in ConnectorStore(LocalStorage(), str(tmp_path)).load_all()] == ["a/b .."]


def test_an_unreadable_record_is_an_error_naming_it(tmp_path):
    store = ConnectorStore(LocalStorage(), str(tmp_path))
    store.save("x", {}, "STOPPED")
    (tmp_path / "_floeline" / "worker" / "connectors" / "x.json").write_text("{not json")
    with pytest.raises(FloelineError, match="connector 'x'.*x.json.*not readable"):
        store.load_all()


def test_a_second_worker_is_refused_naming_host_and_pid(tmp_path):
    first = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=30000, listener="http://127.0.0.1:1")
    first.acquire()
    try:
        with pytest.raises(WorkerRunning) as err:
            WorkerLease(LocalStorage(), str(tmp_path)).acquire()
        assert f"host {socket.gethostname()}, pid {os.getpid()}" in str(err.value)
    finally:
        first.release()
    second = WorkerLease(LocalStorage(), str(tmp_path))
    second.acquire()  # a clean stop released it
    second.release()


def test_the_lease_of_a_process_that_is_gone_is_taken_at_once(tmp_path):
    code = ("import sys; from floeline.warehouse.storage import LocalStorage; "
            "from floeline.worker.store import WorkerLease; "
            f"WorkerLease(LocalStorage(), {str(tmp_path)!r}, timeout_ms=600000).acquire()")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
    record = json.loads((tmp_path / "_floeline" / "worker" / "lease.json").read_text())
    assert record["timeout_ms"] == 600000  # not stale: only the dead pid lets us in
    lease = WorkerLease(LocalStorage(), str(tmp_path))
    lease.acquire()
    lease.release()


def test_a_reused_pid_is_not_the_holder(tmp_path):
    """Same host, the pid runs, but it started after the lease said: another process."""
    holder = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=600000)
    holder.acquire()
    holder._stop.set()
    path = tmp_path / "_floeline" / "worker" / "lease.json"
    record = json.loads(path.read_text())
    record["process_start"] -= 1
    path.write_text(json.dumps(record))
    WorkerLease(LocalStorage(), str(tmp_path)).acquire()


def test_a_lease_not_renewed_within_its_timeout_is_taken_and_the_holder_learns_it(tmp_path):
    holder = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=3000)
    holder.acquire()
    holder._stop.set()  # it stalls: no more renewals
    path = tmp_path / "_floeline" / "worker" / "lease.json"
    record = json.loads(path.read_text())
    record["host"] = "elsewhere"  # not this machine: only staleness counts
    path.write_text(json.dumps(record))
    holder.version = LocalStorage().version(str(path))
    with pytest.raises(WorkerRunning, match="host elsewhere"):
        WorkerLease(LocalStorage(), str(tmp_path)).acquire()
    time.sleep(3.2)
    taker = WorkerLease(LocalStorage(), str(tmp_path))
    taker.acquire()
    assert holder.renew() is False and "taken over" in holder.lost
    taker.release()
