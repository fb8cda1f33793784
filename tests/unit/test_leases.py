"""The one lease implementation (warehouse/leases.py) the worker's lease and the tables'
owner records share: the record files keep the layout the code before it wrote, and the
compare-and-swap mechanics, on the local storage (put_if under an flock)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from floeline.errors import FloelineError
from floeline.processes import process_start_ticks
from floeline.warehouse.leases import Lease, now_ms
from floeline.warehouse.owners import Owner
from floeline.warehouse.storage import LocalStorage
from floeline.worker.store import LeaseRecord

HOST = socket.gethostname()


def test_record_files_keep_their_layout():
    """The JSON of an owner record (indented, connector first) and of the worker lease
    (one line), as the code before the shared lease wrote them, read back the same."""
    owner = Owner("conn", "h", 7, "t", 1, 2, 3)
    assert owner.to_json() == json.dumps({"connector": "conn", "host": "h", "pid": 7, "token": "t",
                                          "started_ms": 1, "heartbeat_ms": 2, "timeout_ms": 3}, indent=1)
    assert Owner.from_json(owner.to_json()) == owner
    worker = LeaseRecord("h", 7, "t", 1, 2, 3, 99, "http://x:1")
    assert worker.to_json() == json.dumps({"host": "h", "pid": 7, "token": "t", "started_ms": 1,
                                           "heartbeat_ms": 2, "timeout_ms": 3, "process_start": 99,
                                           "listener": "http://x:1"})
    assert LeaseRecord.from_json(worker.to_json()) == worker
    assert LeaseRecord.from_json('{"host": "h", "pid": 7, "token": "t", "started_ms": 1, '
                                 '"heartbeat_ms": 2, "timeout_ms": 3}').process_start is None


def test_a_record_is_free_when_stale_or_its_process_is_gone():
    now = now_ms()
    me = os.getpid()
    live = Owner("c", HOST, me, "t", 0, now, 1000)
    assert not live.free(now) and not live.stale(now + 1000) and live.stale(now + 1001)
    assert live.free(now + 1001)
    assert Owner("c", HOST, me, "t", 0, now, 1000).age_s(now + 1500) == 1.5
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert Owner("c", HOST, gone.pid, "t", 0, now, 60000).free(now)
    assert not Owner("c", "elsewhere", gone.pid, "t", 0, now, 60000).free(now)  # never known gone
    # With the holder's start time (the worker lease), a pid reused by another process is gone.
    ticks = process_start_ticks(me)
    assert not LeaseRecord(HOST, me, "t", 0, now, 60000, ticks).free(now)
    if ticks is not None:
        assert LeaseRecord(HOST, me, "t", 0, now, 60000, ticks - 1).free(now)


class Holder(Lease):
    """The smallest holder: one record, renewed by the heartbeat until told to stop."""

    record_type = Owner

    def __init__(self, storage, location, timeout_ms=60000):
        super().__init__(storage, f"token-{id(self)}", timeout_ms)
        self.location, self.beats, self.stop_after = location, 0, None
        self.beaten = threading.Event()

    def _record(self):
        return Owner("c", HOST, os.getpid(), self.token, self.started_ms, now_ms(), self.timeout_ms)

    def _beat(self):
        self.beats += 1
        self.beaten.set()
        return self.beats != self.stop_after


def test_swap_wins_only_from_the_version_it_read_and_delete_spares_another_holder(tmp_path):
    storage, location = LocalStorage(), str(tmp_path / "x" / "lease.json")
    first, second = Holder(storage, location), Holder(storage, location)
    assert first._read(location) == (None, None)
    version = first._swap(location, None)
    assert version is not None
    assert second._swap(location, None) is None  # the file exists: the second loses
    record, read_version = second._read(location)
    assert (record.token, read_version) == (first.token, version)
    taken = second._swap(location, version)  # as a take-over of a free record does
    assert taken is not None and first._swap(location, version) is None
    assert first._holder_now(location, "nobody").startswith(f"connector 'c' (host {HOST}, pid {os.getpid()}")
    first._delete(location, version, "not ours")  # an old version: the record stays
    assert second._read(location)[0].token == second.token
    second._delete(location, taken, "ours")
    assert storage.read_text(location) is None
    assert first._holder_now(location, "nobody") == "nobody"


def test_an_unreadable_record_reads_as_none_with_its_version(tmp_path):
    storage, location = LocalStorage(), str(tmp_path / "lease.json")
    storage.write_text(location, "{not json")
    record, version = Holder(storage, location)._read(location)
    assert record is None and version == storage.version(location)
    storage.write_text(location, json.dumps({"host": "h"}))  # fields missing
    assert Holder(storage, location)._read(location)[0] is None


def test_a_record_that_keeps_changing_is_an_error(tmp_path):
    storage, location = LocalStorage(), str(tmp_path / "lease.json")
    storage.write_text(location, "{}")

    class Moving(LocalStorage):
        def read_text(self, where):
            text = super().read_text(where)
            storage.write_text(where, text + " ")  # another writer between every two looks
            return text

    with pytest.raises(FloelineError, match="lease record .*lease.json keeps changing"):
        Holder(Moving(), location)._read(location)


def test_the_heartbeat_beats_every_quarter_timeout_until_stopped_or_told_to_stop(tmp_path):
    holder = Holder(LocalStorage(), str(tmp_path / "lease.json"), timeout_ms=200)
    holder._start_heartbeat("test-beat")
    thread = holder._thread
    holder._start_heartbeat("test-beat")  # one thread only
    assert holder._thread is thread
    assert holder.beaten.wait(5)
    holder._stop_heartbeat()
    assert not thread.is_alive() and holder._thread is None
    beats = holder.beats
    holder.stop_after = beats + 2  # _beat answers False at its second beat: the thread ends
    holder._start_heartbeat("test-beat")
    holder._thread.join(5)
    assert not holder._thread.is_alive() and holder.beats == beats + 2
