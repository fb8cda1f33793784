"""A lease: a small JSON record in the warehouse saying which process holds something,
renewed from a thread, taken over once its holder is dead or silent. The worker's hold
on a warehouse (worker/store.py) and a table's owner record (owners.py) are both one.

Why one implementation: the hard parts are the same. The record changes only by
compare-and-swap (storage.put_if: S3 conditional writes on the ETag, a local flock), so
two processes racing for it cannot both win; a record is read with the version it had
while read; a holder renews it every timeout/4 and learns from a failed swap that it
was taken over; a clean stop deletes it only if it is still ours (delete_if). What
each holder records besides the common fields, and its rule for a live holder (refuse,
wait, stand by), stay with it."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict

from floeline.errors import FloelineError
from floeline.processes import gone_here
from floeline.warehouse.storage import Storage

log = logging.getLogger("floeline")

READ_ATTEMPTS = 5


def now_ms() -> int:
    return int(time.time() * 1000)


class HeldRecord:
    """What every lease record holds, for frozen dataclasses with the fields host, pid,
    token, started_ms, heartbeat_ms and timeout_ms (in their own JSON order)."""

    JSON_INDENT: int | None = None  # the record files' layout, kept as each kind has it
    process_start: int | None = None  # records without the holder's start time: pid only

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=self.JSON_INDENT)

    @classmethod
    def from_json(cls, text: str):
        return cls(**json.loads(text))

    def age_s(self, now: int) -> float:
        """Seconds since the last renewal."""
        return max(0, now - self.heartbeat_ms) / 1000

    def stale(self, now: int) -> bool:
        return now - self.heartbeat_ms > self.timeout_ms

    def gone(self) -> bool:
        """True when the holder ran on this machine and that process no longer runs
        (with process_start, a reused pid counts as gone too)."""
        return gone_here(self.host, self.pid, self.process_start)

    def free(self, now: int) -> bool:
        """True when another process may take it over: stale or its holder gone."""
        return self.stale(now) or self.gone()


class Lease:
    """The mechanics a holder of lease records shares: read, swap, delete, heartbeat.
    A subclass says which record it writes (`record_type`, `_record`) and what a beat
    does (`_beat`)."""

    record_type: type[HeldRecord]

    def __init__(self, storage: Storage, token: str, timeout_ms: int):
        self.storage, self.token, self.timeout_ms = storage, token, timeout_ms
        self.started_ms = now_ms()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> HeldRecord:
        raise NotImplementedError

    def _beat(self) -> bool:
        """One renewal from the heartbeat thread; False stops the thread."""
        raise NotImplementedError

    def _changing(self, location: str) -> Exception:
        """The error when a record keeps changing while read."""
        return FloelineError(f"the lease record {location} keeps changing; try again")

    def _read(self, location: str) -> tuple[HeldRecord | None, object | None]:
        """The record and the version it had while read; (None, None) when there is
        none, (None, version) when it is unreadable (taken over like a stale one)."""
        for _attempt in range(READ_ATTEMPTS):
            version = self.storage.version(location)
            if version is None:
                return None, None
            text = self.storage.read_text(location)
            if text is not None and self.storage.version(location) == version:
                try:
                    return self.record_type.from_json(text), version
                except (ValueError, TypeError):
                    return None, version
        raise self._changing(location)

    def _swap(self, location: str, version: object | None) -> object | None:
        """Write this holder's record with a new heartbeat if the file is still at
        `version`; the new version, or None when someone else wrote it meanwhile."""
        return self.storage.put_if(location, self._record().to_json(), version)

    def _holder_now(self, location: str, nobody: str) -> str:
        """Who holds the record now, for the message of a holder that lost it."""
        current, _version = self._read(location)
        return current.describe(now_ms()) if current else nobody

    def _delete(self, location: str, version: object, failed: str) -> None:
        """Delete the record if still ours; on failure log `failed` (it goes stale)."""
        try:
            self.storage.delete_if(location, version)
        except Exception as exc:  # noqa: BLE001 - it goes stale by itself
            log.warning("%s: %s", failed, exc)

    def _start_heartbeat(self, name: str) -> None:
        if self._thread is not None:
            return

        def beat():
            while not self._stop.wait(self.timeout_ms / 4000):
                if not self._beat():
                    return

        self._thread = threading.Thread(target=beat, name=name, daemon=True)
        self._thread.start()

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._stop, self._thread = threading.Event(), None
