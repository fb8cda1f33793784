"""One writer per table on S3: each table a connector writes has an owner record, so a
second connector writing the same table is refused with an error naming the owner.

Why: Delta's log on S3 (S3SingleDriverLogStore) is safe with one writer per table
only: S3 had no put-if-absent when Delta chose it, so two processes committing the
same version would overwrite each other's commit. (A local disk's atomic rename keeps
concurrent writers safe, so local warehouses need no owner: see `needed`.)

The record is `<warehouse>/<DB>/<SCHEMA>/_owners/<TABLE>.json`: the connector's name,
host, pid, a token of this run, when it started, its last heartbeat and its timeout. It
is a lease (leases.py: changed only by compare-and-swap, so two connectors racing for a
table cannot both win; the worker's lease is the same implementation). The rule:

- A table without a record, or whose record's heartbeat is older than its timeout
  (floeline.warehouse.owner.timeout.ms, default 60 s), is taken.
- A record of this machine whose pid no longer runs (a SIGKILLed connector restarted
  on the same host) is taken at once.
- A record of the same connector (by name) on another host: a previous run that may
  be dead (a rescheduled pod). The new run watches it for up to the timeout: if its
  heartbeat moves, that run is alive and the new one is refused; if not, it is taken.
- Any other live record: refused at once with TableOwned, naming the owner.
- A source with a standby mode (Kinesis: a second run of a connector waits until the
  first releases its shard leases) waits the same way for a live record of its own
  connector, until it is released or goes stale, instead of being refused.

The owner renews its record every timeout/4 from a thread; before each commit the
connector checks it still owns its tables (`check`): a record taken over by someone
else, or not renewed within the timeout (the owner was stalled, so another may have
taken it), stops the connector before it commits. A clean stop deletes the records.
Clocks of the machines writing a warehouse must agree to within a few seconds."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from floeline.errors import ConfigError, FloelineError, Terminal
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.leases import HeldRecord, Lease
from floeline.warehouse.leases import now_ms as _now_ms

log = logging.getLogger("floeline")

OWNERS_DIR = "_owners"
DEFAULT_TIMEOUT_MS = 60000


class TableOwned(ConfigError):
    """Another connector owns the table (S3 warehouses: one writer per table). Terminal."""


class OwnershipLost(FloelineError, Terminal):
    """This connector's owner record of a table was taken over or not renewed in time."""


@dataclass(frozen=True)
class Owner(HeldRecord):
    JSON_INDENT = 1

    connector: str
    host: str
    pid: int
    token: str
    started_ms: int
    heartbeat_ms: int
    timeout_ms: int

    def describe(self, now_ms: int) -> str:
        return (f"connector {self.connector!r} (host {self.host}, pid {self.pid}, "
                f"last heartbeat {self.age_s(now_ms):.1f} s ago)")


def needed(warehouse: Warehouse) -> bool:
    """Whether tables in this warehouse need an owner (S3: Delta's one-writer rule)."""
    return warehouse.storage.single_writer


def record_location(warehouse: Warehouse, ref: TableRef) -> str:
    from urllib.parse import quote

    return warehouse.schema_path(ref.database, ref.schema, OWNERS_DIR, quote(ref.name, safe="") + ".json")


class TableOwners(Lease):
    """The owner records one connector run holds, renewed from a thread."""

    record_type = Owner

    def __init__(self, warehouse: Warehouse, connector: str, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 poll_s: float = 1.0, standby: bool = False):
        super().__init__(warehouse.storage, uuid.uuid4().hex, timeout_ms)
        self.warehouse, self.connector = warehouse, connector
        self.standby = standby
        self.poll_s = poll_s
        self.held: dict[str, tuple[TableRef, object, int]] = {}  # name -> (ref, version, renewed ms)
        self.lost: dict[str, str] = {}
        self._lock = threading.Lock()

    def _record(self) -> Owner:
        return Owner(self.connector, socket.gethostname(), os.getpid(), self.token,
                     self.started_ms, _now_ms(), self.timeout_ms)

    def _changing(self, location: str) -> Exception:
        return OwnershipLost(f"the owner record {location} keeps changing; try again")

    def acquire(self, ref: TableRef) -> None:
        """Own `ref` or raise TableOwned naming its owner (see the module's rule)."""
        with self._lock:
            if ref.full_name in self.held:
                return
        location = record_location(self.warehouse, ref)
        watched: Owner | None = None
        deadline = None
        while True:
            current, version = self._read(location)
            now = _now_ms()
            if current is not None and current.token != self.token and not current.free(now):
                if current.connector != self.connector:
                    raise self._refusal(ref, current, now)
                # The same connector's record: a previous run (maybe dead) or a live copy.
                if watched is None:
                    watched, deadline = current, time.monotonic() + current.timeout_ms / 1000 + 2
                    log.warning("table %s: owner record of another run of this connector (%s); "
                                "%s", ref.full_name, current.describe(now),
                                "waiting as a standby until it is released or goes stale"
                                if self.standby else f"waiting up to {current.timeout_ms / 1000:.0f} "
                                "s for it to go stale")
                elif not self.standby and (current.heartbeat_ms != watched.heartbeat_ms
                                           or current.token != watched.token):
                    raise self._refusal(ref, current, now)
                if not self.standby and time.monotonic() > deadline:
                    raise self._refusal(ref, current, now)
                time.sleep(self.poll_s)
                continue
            if current is not None and current.token != self.token:
                log.warning("table %s: taking over from %s (%s)", ref.full_name, current.describe(now),
                            "its process is gone" if current.gone() else "stale")
            new_version = self._swap(location, version)
            if new_version is not None:
                with self._lock:
                    self.held[ref.full_name] = (ref, new_version, _now_ms())
                self._start_heartbeat(f"floeline-owner-{self.connector}")
                return
            # Someone wrote the record between our read and our write: read it again.

    def _refusal(self, ref: TableRef, owner: Owner, now_ms: int) -> TableOwned:
        return TableOwned(
            f"table {ref.full_name} is being written by {owner.describe(now_ms)}: a Delta table "
            f"on S3 takes one writer only, so connector {self.connector!r} cannot write it. "
            f"Stop that connector first (a clean stop releases the table), or map this "
            f"connector's topics to another table. An owner that stops renewing its record "
            f"({record_location(self.warehouse, ref)}) is taken over after "
            f"{owner.timeout_ms / 1000:.0f} s (floeline.warehouse.owner.timeout.ms)")

    def check(self) -> None:
        """Before a commit: raise OwnershipLost unless every held record is still ours
        and was renewed within the timeout."""
        now = _now_ms()
        with self._lock:
            lost = dict(self.lost)
            for name, (_ref, _version, renewed) in self.held.items():
                if now - renewed > self.timeout_ms and name not in lost:
                    lost[name] = (f"its owner record was not renewed for "
                                  f"{(now - renewed) / 1000:.0f} s (timeout {self.timeout_ms / 1000:.0f} s)")
        if lost:
            name, why = next(iter(sorted(lost.items())))
            raise OwnershipLost(f"connector {self.connector!r} no longer owns table {name}: {why}; "
                                f"it stopped before committing (a restart resumes from the table's positions)")

    def renew(self) -> None:
        """Write a new heartbeat into every held record (compare-and-swap)."""
        with self._lock:
            items = list(self.held.items())
        for name, (ref, version, _renewed) in items:
            if name in self.lost:
                continue
            location = record_location(self.warehouse, ref)
            try:
                new_version = self._swap(location, version)
            except Exception as exc:  # noqa: BLE001 - retried at the next beat; check() bounds it
                log.warning("could not renew the owner record of table %s: %s", name, exc)
                continue
            with self._lock:
                if new_version is None:
                    who = self._holder_now(location, "nobody (the record was deleted)")
                    self.lost[name] = f"its owner record was taken over by {who}"
                else:
                    self.held[name] = (ref, new_version, _now_ms())

    def _beat(self) -> bool:
        self.renew()
        return True

    def release(self) -> None:
        """Stop renewing and delete the records still ours (a clean stop)."""
        self._stop_heartbeat()
        with self._lock:
            items, self.held = list(self.held.items()), {}
        for name, (ref, version, _renewed) in items:
            if name in self.lost:
                continue
            self._delete(record_location(self.warehouse, ref), version,
                         f"could not release table {name} (its record goes stale after "
                         f"{self.timeout_ms / 1000:.0f} s)")
