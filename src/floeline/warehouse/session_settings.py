"""Session settings held for one statement: Delta takes a commit's userMetadata for a
MERGE only from the session (spark.databricks.delta.commitInfo.userMetadata), so a
MERGE sets it, runs, and puts it back. Connectors on threads may share one session:
one such statement at a time per session."""

from __future__ import annotations

import threading
from contextlib import contextmanager

USER_METADATA_SETTING = "spark.databricks.delta.commitInfo.userMetadata"

_session_locks: dict[int, threading.Lock] = {}
_session_locks_guard = threading.Lock()


@contextmanager
def session_settings(session, settings: dict[str, str]):
    """The session's statements run with `settings` while inside (one at a time per
    session: the commit's userMetadata is among them)."""
    with _session_locks_guard:
        lock = _session_locks.setdefault(session._jsparkSession.hashCode(), threading.Lock())
    with lock:
        before = {key: session.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            session.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    session.conf.unset(key)
                else:
                    session.conf.set(key, value)
