"""SIGINT/SIGTERM for a process that runs a connector or the pipe service: they ask it
to stop after its current batch instead of ending the process. The process's own
business, so its entry point (`floeline run`, `floeline pipes`, `floeline demo`)
installs them, not the batch code."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def stop_signals(stop):
    """While inside: SIGINT/SIGTERM call `stop()` (the connector or the pipe service
    stops after its current batch) instead of ending the process. Outside the main
    thread (where Python allows no handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
