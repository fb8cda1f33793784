"""Where a user's wait for the first rows goes: the time from this process's launch to
a connector's first commit, in its parts, printed once per process after that commit:

  first commit 14.2 s after launch: before Spark 1.1 s, Spark start 6.3 s (jars:
  listed, Ivy skipped), connector set-up 0.4 s, source planning 2.1 s, first batch
  4.3 s (table creation 1.2 s)

The clock is process-wide, as the launch it measures from: spark.py marks the Spark
start, the connector its query's start and first batch, tables.py the time spent
creating tables. Later connectors in the same process (tests, benchmarks) print nothing."""

from __future__ import annotations

import contextlib
import os
import time

_marks: dict[str, float] = {}  # event -> epoch seconds, first time only
_spans: dict[str, float] = {}  # part -> seconds, summed
_notes: dict[str, str] = {}
_printed = False


def process_started_at() -> float | None:
    """This process's launch, epoch seconds, from Linux's /proc (None elsewhere)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as stat:
            booted = next(int(line.split()[1]) for line in stat if line.startswith("btime "))
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def mark(event: str, at: float | None = None) -> None:
    """Note when `event` first happened (later calls change nothing)."""
    _marks.setdefault(event, time.time() if at is None else at)


def note(key: str, text: str) -> None:
    _notes.setdefault(key, text)


@contextlib.contextmanager
def span(part: str):
    """Add the time spent inside to `part` (until the summary is printed)."""
    started = time.time()
    try:
        yield
    finally:
        if not _printed:
            _spans[part] = _spans.get(part, 0.0) + time.time() - started


def summary(committed_at: float) -> str | None:
    """The line (see the module doc) for a first commit at `committed_at`, once per
    process: None after the first, or when the process's launch is unknown."""
    global _printed
    launched = process_started_at()
    if _printed or launched is None or not {"spark start", "spark ready", "query start",
                                            "first batch"} <= _marks.keys():
        return None
    _printed = True
    m = _marks
    jars = f" (jars: {_notes['jars']})" if "jars" in _notes else ""
    tables = f" (table creation {_spans['table creation']:.1f} s)" if _spans.get("table creation") else ""
    parts = [("before Spark", m["spark start"] - launched, ""),
             ("Spark start", m["spark ready"] - m["spark start"], jars),
             ("connector set-up", m["query start"] - m["spark ready"], ""),
             ("source planning", m["first batch"] - m["query start"], ""),
             ("first batch", committed_at - m["first batch"], tables)]
    text = ", ".join(f"{name} {seconds:.1f} s{detail}" for name, seconds, detail in parts)
    return f"first commit {committed_at - launched:.1f} s after launch: {text}"
