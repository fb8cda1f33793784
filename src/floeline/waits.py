"""What each connector waits for: the service call being retried now (a broker still
starting or not there, a Kinesis endpoint, a schema registry away), with the fix, from
the first failed try, so neither the terminal nor the worker's /status stays silent
until the retries give up (errors.retry.timeout, 2 minutes by default).

retry.call reports its failures and its success here; they count for the connector the
calling thread works for: the one named with `working_for` (`floeline run`, a
connector's batches), else the one a worker's supervisor thread is named after
(`floeline-connector-NAME`). Outside a connector nothing is recorded and retry.call
logs as it always did.

`ConnectorPrefix` puts `[NAME] ` before every floeline log line a connector's thread
writes, as the worker's progress lines carry it."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, replace

log = logging.getLogger("floeline")

# A wait still going on is said again this often (each retry is not: one line per try
# would be dozens of lines a minute).
REMIND_EVERY_S = 30.0
_WORKER_THREAD = "floeline-connector-"


@dataclass(frozen=True)
class Wait:
    """One call being retried: what, its last error, the fix, since when, tries so far."""

    what: str
    error: str
    fix: str
    limit: str  # how long the retries go on, e.g. "120 s: errors.retry.timeout=120000"
    since: float
    tries: int = 1
    said_at: float = 0.0

    def text(self, now: float | None = None) -> str:
        waited = (time.monotonic() if now is None else now) - self.since
        return (f"waiting for {self.what}: {self.error.rstrip('.')}. {self.fix} "
                f"({self.tries} tr{'ies' if self.tries != 1 else 'y'} over {waited:.0f} s; "
                f"retrying for {self.limit})")


_lock = threading.Lock()
_waits: dict[str, dict[str, Wait]] = {}  # connector -> what -> its wait
_local = threading.local()


@contextlib.contextmanager
def working_for(connector: str):
    """Calls made in this block, on this thread, are `connector`'s."""
    before = getattr(_local, "connector", None)
    _local.connector = connector
    try:
        yield
    finally:
        _local.connector = before


def current_connector() -> str | None:
    """The connector this thread works for (see the module doc), or None."""
    named = getattr(_local, "connector", None)
    if named is not None:
        return named
    thread = threading.current_thread().name
    return thread[len(_WORKER_THREAD):] if thread.startswith(_WORKER_THREAD) else None


def failed(what: str, error: str, fix: str, limit: str, connector: str | None = None) -> bool:
    """Record a failed try of `what` for the current connector, saying it on the first
    try and every REMIND_EVERY_S after; False outside a connector (nothing recorded)."""
    connector = connector or current_connector()
    if connector is None:
        return False
    now = time.monotonic()
    with _lock:
        waits = _waits.setdefault(connector, {})
        known = waits.get(what)
        wait = (Wait(what, error, fix, limit, since=now) if known is None
                else replace(known, error=error, tries=known.tries + 1))
        say = known is None or now - known.said_at >= REMIND_EVERY_S
        waits[what] = replace(wait, said_at=now) if say else wait
    if say:
        log.warning("%s", wait.text(now))
    return True


def answered(what: str, connector: str | None = None) -> None:
    """`what` answered: the connector no longer waits for it, and says so."""
    connector = connector or current_connector()
    if connector is None:
        return
    with _lock:
        wait = _waits.get(connector, {}).pop(what, None)
    if wait is not None:
        log.warning("%s answered after %d tr%s over %.0f s; going on", what, wait.tries,
                    "ies" if wait.tries != 1 else "y", time.monotonic() - wait.since)


def gave_up(what: str, connector: str | None = None) -> None:
    """`what` is no longer retried (its error stops the connector, and says why)."""
    connector = connector or current_connector()
    if connector is not None:
        with _lock:
            _waits.get(connector, {}).pop(what, None)


def waiting_for(connector: str) -> str | None:
    """What `connector` waits for now, one line per call, the longest wait first; None
    when it waits for nothing (the worker's /status shows it as the trace)."""
    with _lock:
        waits = sorted(_waits.get(connector, {}).values(), key=lambda w: w.since)
    return "\n".join(w.text() for w in waits) or None


def forget(connector: str) -> None:
    """The connector stopped: whatever it waited for is no longer its wait."""
    with _lock:
        _waits.pop(connector, None)


class ConnectorPrefix(logging.Filter):
    """Puts `[NAME] ` before a floeline log line written for connector NAME."""

    def filter(self, record: logging.LogRecord) -> bool:
        connector = current_connector()
        if connector is not None and not str(record.msg).startswith(f"[{connector}] "):
            record.msg = f"[{connector}] {record.getMessage()}"
            record.args = None
        return True


def prefix_connector_logs() -> None:
    """Install ConnectorPrefix on floeline's logger (entry points call it once)."""
    logger = logging.getLogger("floeline")
    if not any(isinstance(f, ConnectorPrefix) for f in logger.filters):
        logger.addFilter(ConnectorPrefix())
