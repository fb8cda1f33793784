"""Where a user's wait for the first rows goes: the time from this process's launch to
a connector's first commit, in its parts, printed once per process after that commit:

  first commit 14.2 s after launch: before Spark 1.1 s, Spark start 6.3 s (jars:
  listed, Ivy skipped), connector set-up 0.4 s, source planning 2.1 s, first batch
  4.3 s (table creation 1.2 s)

The clock (StartupClock) is the process's, as the launch it measures from: spark.py
marks the Spark start, tables.py the time spent creating tables, and a connector its
query's start, its first batch and when that batch's first record arrived (a source
idle at start: `waiting for records N s`, not planning) on the clock it was given (the
process's by default).
Later connectors on the same clock (tests, benchmarks) print nothing. A connector
started in a warm process (the worker: Spark started long before) gets a clock of its
own that measures from its own start (`StartupClock(launched_at=...)`):

  first commit 1.1 s after the connector started: connector set-up 0.2 s, source
  planning 0.4 s, first batch 0.5 s"""

from __future__ import annotations

import contextlib
import os
import time

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


class StartupClock:
    """The marks, spans and notes of one launch, and whether its line was printed."""

    def __init__(self, launched_at: float | None = None):
        # None: the process's launch (Spark's start is part of the wait); else when the
        # connector started in an already warm process (epoch seconds).
        self.launched_at = launched_at
        self.marks: dict[str, float] = {}  # event -> epoch seconds, first time only
        self.spans: dict[str, float] = {}  # part -> seconds, summed
        self.notes: dict[str, str] = {}
        self.printed = False

    def mark(self, event: str, at: float | None = None) -> None:
        """Note when `event` first happened (later calls change nothing)."""
        self.marks.setdefault(event, time.time() if at is None else at)

    def note(self, key: str, text: str) -> None:
        self.notes.setdefault(key, text)

    @contextlib.contextmanager
    def span(self, part: str):
        """Add the time spent inside to `part` (until the summary is printed)."""
        started = time.time()
        try:
            yield
        finally:
            if not self.printed:
                self.spans[part] = self.spans.get(part, 0.0) + time.time() - started

    def summary(self, committed_at: float) -> str | None:
        """The line (see the module doc) for a first commit at `committed_at`, once:
        None after the first, or when the process's launch is unknown."""
        if self.launched_at is not None:
            return self._warm_summary(committed_at)
        launched = process_started_at()
        if self.printed or launched is None or not {"spark start", "spark ready", "query start",
                                                    "first batch"} <= self.marks.keys():
            return None
        self.printed = True
        m, spans = self.marks, self.spans
        jars = f" (jars: {self.notes['jars']})" if "jars" in self.notes else ""
        tables = f" (table creation {spans['table creation']:.1f} s)" if spans.get("table creation") else ""
        parts = [("before Spark", m["spark start"] - launched, ""),
                 ("Spark start", m["spark ready"] - m["spark start"], jars),
                 ("connector set-up", m["query start"] - m["spark ready"], ""),
                 *[(name, seconds, "") for name, seconds in self._until_first_batch()],
                 ("first batch", committed_at - m["first batch"], tables)]
        text = ", ".join(f"{name} {seconds:.1f} s{detail}" for name, seconds, detail in parts)
        return f"first commit {committed_at - launched:.1f} s after launch: {text}"

    def _until_first_batch(self) -> list[tuple[str, float]]:
        """From the query's start to its first batch with records: source planning, and
        the wait for the first record when it arrived after the query started (an idle
        source: the time is the source's, not floeline's planning)."""
        m = self.marks
        whole = m["first batch"] - m["query start"]
        idle = min(whole, max(0.0, m.get("records arrived", 0.0) - m["query start"]))
        if idle < 0.05:
            return [("source planning", whole)]
        return [("source planning", whole - idle), ("waiting for records", idle)]

    def _warm_summary(self, committed_at: float) -> str | None:
        """The line of a connector started in a warm process, measured from its start."""
        if self.printed or not {"query start", "first batch"} <= self.marks.keys():
            return None
        self.printed = True
        m, launched = self.marks, self.launched_at
        parts = [("connector set-up", m["query start"] - launched), *self._until_first_batch(),
                 ("first batch", committed_at - m["first batch"])]
        text = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in parts)
        return f"first commit {committed_at - launched:.1f} s after the connector started: {text}"


# This process's clock: its launch and its Spark are the process's (spark.py and
# tables.py mark it); a connector marks it unless handed a clock of its own.
PROCESS = StartupClock()
mark, note, span, summary = PROCESS.mark, PROCESS.note, PROCESS.span, PROCESS.summary
