"""Where a worker keeps its connectors, as Kafka Connect keeps its config topic: under
the warehouse, so a worker restarted after a crash (SIGKILL included) finds every
connector's config and target state again.

    <warehouse>/_floeline/worker/connectors/<name>.json   {"name", "config", "target_state", "updated_ms"}
    <warehouse>/_floeline/worker/lease.json               the worker that runs them (WorkerLease)

Each record is written whole (storage.py's write_text: temp file + rename on a local
disk, one PUT on S3), so a reader sees the old record or the new one, never a part.
Writes of different connectors run at once (a slow PUT holds up no other connector);
the herder orders the writes of one connector.
Configs are kept as the user sent them (secrets too: the warehouse is the worker's
config store, as Connect's config topic is; the REST API masks them on the way out).

The lease keeps one worker per warehouse: two workers would both run every stored
connector. It is a lease as a table's owner record is (warehouse/leases.py, one
implementation): a worker takes it by compare-and-swap and renews it every timeout/4;
it records the worker's REST URL, so a standby (standby.py) and `floeline status` can
say where the active worker is. Another worker cannot take it while the
holder lives; it can once the holder's process is gone (same host: the pid no longer
runs, or runs another program since it started later than the lease says) or the
holder has not renewed within its timeout."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from urllib.parse import quote, unquote

from floeline.config import locations
from floeline.errors import ConfigError, FloelineError
from floeline.processes import process_start_ticks
from floeline.warehouse.leases import HeldRecord, Lease
from floeline.warehouse.leases import now_ms as _now_ms
from floeline.warehouse.storage import Storage

log = logging.getLogger("floeline")

STORE_DIR = ("_floeline", "worker")
TARGET_STATES = ("RUNNING", "PAUSED", "STOPPED")


@dataclass(frozen=True)
class StoredConnector:
    name: str
    config: dict[str, str]
    target_state: str
    updated_ms: int = 0


class ConnectorStore:
    """The connectors' configs and target states under the warehouse."""

    def __init__(self, storage: Storage, warehouse: str):
        self.storage = storage
        self.folder = locations.join(warehouse, *STORE_DIR, "connectors")

    def _location(self, name: str) -> str:
        # Any connector name is one file name: quoted, so "a/b" or ".." cannot escape.
        return locations.join(self.folder, quote(name, safe="") + ".json")

    def load_all(self) -> list[StoredConnector]:
        """Every stored connector, by name; an unreadable record is an error naming it."""
        _folders, files = self.storage.children(self.folder)
        found = []
        for file in files:
            if not file.endswith(".json") or file.startswith("."):
                continue
            stored = self.load(unquote(file[:-len(".json")]))
            if stored is not None:
                found.append(stored)
        return sorted(found, key=lambda s: s.name)

    def load(self, name: str) -> StoredConnector | None:
        location = self._location(name)
        text = self.storage.read_text(location)
        if text is None:
            return None
        try:
            data = json.loads(text)
            stored = StoredConnector(str(data["name"]), {str(k): str(v) for k, v in data["config"].items()},
                                     str(data["target_state"]), int(data.get("updated_ms", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FloelineError(f"the worker's record of connector {name!r} ({location}) is not "
                                f"readable ({exc}); fix or delete the file and start the worker again") from None
        if stored.target_state not in TARGET_STATES:
            raise FloelineError(f"the worker's record of connector {name!r} ({location}) has target "
                                f"state {stored.target_state!r}; expected one of {', '.join(TARGET_STATES)}")
        return stored

    def save(self, name: str, config: dict[str, str], target_state: str) -> StoredConnector:
        if target_state not in TARGET_STATES:
            raise ValueError(target_state)
        stored = StoredConnector(name, dict(config), target_state, int(time.time() * 1000))
        self.storage.write_text(self._location(name), json.dumps(asdict(stored), indent=1, sort_keys=True))
        return stored

    def delete(self, name: str) -> None:
        self.storage.delete(self._location(name))


# ---- the worker lease ------------------------------------------------------------------


class WorkerRunning(ConfigError):
    """Another live worker holds the warehouse's lease."""


@dataclass(frozen=True)
class LeaseRecord(HeldRecord):
    host: str
    pid: int
    token: str
    started_ms: int
    heartbeat_ms: int
    timeout_ms: int
    process_start: int | None = None
    listener: str | None = None

    def describe(self, now_ms: int) -> str:
        return (f"host {self.host}, pid {self.pid}" + (f", REST {self.listener}" if self.listener else "")
                + f", last renewed {self.age_s(now_ms):.1f} s ago")


class WorkerLease(Lease):
    """This worker's hold on a warehouse (see the module doc)."""

    record_type = LeaseRecord

    def __init__(self, storage: Storage, warehouse: str, timeout_ms: int = 30000, listener: str | None = None):
        super().__init__(storage, uuid.uuid4().hex, timeout_ms)
        self.location = locations.join(warehouse, *STORE_DIR, "lease.json")
        self.listener = listener
        self.version: object | None = None
        self.lost: str | None = None  # why, once another worker took the lease
        self.taken_from: str | None = None  # whose lease try_acquire took over, and why
        self._renewing = threading.Lock()  # one compare-and-swap at a time (beat and advertise)

    def _record(self) -> LeaseRecord:
        return LeaseRecord(socket.gethostname(), os.getpid(), self.token, self.started_ms, _now_ms(),
                           self.timeout_ms, process_start_ticks(os.getpid()), self.listener)

    def _changing(self, location: str) -> Exception:
        return WorkerRunning(f"the worker lease {location} keeps changing; is another worker starting?")

    def acquire(self) -> None:
        """Take the lease, or raise WorkerRunning naming the live holder."""
        holder = self.try_acquire()
        if holder is not None:
            now = _now_ms()
            raise WorkerRunning(
                f"another floeline worker runs the connectors of this warehouse "
                f"({holder.describe(now)}); a warehouse takes one worker. Stop that worker "
                f"first, or give this one another floeline.warehouse. (A worker that stops "
                f"renewing {self.location} is taken over after {holder.timeout_ms / 1000:.0f} s.)")

    def try_acquire(self) -> LeaseRecord | None:
        """Take the lease (None), unless a live worker holds it: then its record. A dead
        or silent holder's lease is taken; `taken_from` then says whose and why."""
        for _attempt in range(10):
            current, version = self._read(self.location)
            now = _now_ms()
            self.taken_from = None
            if current is not None and current.token != self.token:
                if not current.free(now):
                    return current
                self.taken_from = f"{current.describe(now)}: " + (
                    "its process is gone" if current.gone() else
                    f"not renewed within floeline.worker.lease.timeout.ms={current.timeout_ms}")
                log.warning("taking over the worker lease of %s", self.taken_from)
            new_version = self._swap(self.location, version)
            if new_version is not None:
                self.version = new_version
                self._start_heartbeat("floeline-worker-lease")
                return None
        raise WorkerRunning(f"the worker lease {self.location} keeps changing; is another worker starting?")

    def holder(self) -> LeaseRecord | None:
        """The lease's record as it is now (None: nobody holds it)."""
        return self._read(self.location)[0]

    def advertise(self, listener: str) -> None:
        """Record this worker's REST URL in the lease now (a standby and `floeline
        status` read it), not at the next renewal."""
        self.listener = listener
        if self.version is not None:
            self.renew()

    def renew(self) -> bool:
        """Write a new heartbeat; False (and `lost` says why) when another worker took it."""
        with self._renewing:
            return self._renew()

    def _renew(self) -> bool:
        if self.lost:
            return False
        new_version = self._swap(self.location, self.version)
        if new_version is None:
            who = self._holder_now(self.location, "nobody (the lease was deleted)")
            self.lost = f"the worker lease {self.location} was taken over by {who}"
            log.error("%s: this worker no longer owns the warehouse's connectors", self.lost)
            return False
        self.version = new_version
        return True

    def _beat(self) -> bool:
        try:
            return self.renew()
        except Exception as exc:  # noqa: BLE001 - retried at the next beat
            log.warning("could not renew the worker lease %s: %s", self.location, exc)
            return True

    def release(self) -> None:
        """Stop renewing and delete the lease (a clean stop: the next worker starts at once)."""
        self._stop_heartbeat()
        if self.version is not None and not self.lost:
            self._delete(self.location, self.version, f"could not release the worker lease {self.location}")
        self.version = None
