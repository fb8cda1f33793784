"""What the chaos soaks (bench/chaos.py for Kafka, bench/chaos_kinesis.py for Kinesis)
share: `floeline run` in a process group of its own killed with SIGKILL, the tables
watched from outside for the moment to kill at, and how a cycle's moment is awaited.

Kill moments (`await_moment`), watched from outside the connector:
    create    a table's first Delta commit appeared (its creation: with its first rows when the connector creates it)
    evolve    a schema change of an existing table appeared (ALTER TABLE ADD COLUMNS,
              before the rows that need it)
    commit    a table's data commit appeared (between the Delta commit and the source's
              mirror: the consumer-group offsets or the Kinesis lease table)
    write     new data files appeared in a table (inside a Delta commit: files written,
              log entry not yet)
    progress  a "batch N" line appeared (after the mirror, before Spark's checkpoint
              commit: the batch is replayed)
    random    a random time: during Spark's start, or 0-5 s after the 1st or 2nd batch line
A moment that does not come within `moment_timeout_s` of the first batch line (or before
the connector caught up) is replaced by a kill at once (reported as `<kind>-fallback`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

DATABASE, SCHEMA = "FLOELINE", "PUBLIC"
MOMENTS = ("commit", "write", "progress", "random")  # the kinds any cycle may get


def spread(count: int, slots: list[int]) -> list[int]:
    """`count` slots evenly spread over `slots` (in order)."""
    if count <= 0 or not slots:
        return []
    count = min(count, len(slots))
    return [slots[int((j + 0.5) * len(slots) / count)] for j in range(count)]


def chunk_sizes(records: int, cycles: int) -> list[int]:
    return [records // cycles + (1 if i < records % cycles else 0) for i in range(cycles)]


@dataclass
class TableCount:
    """One table's figures after a soak."""
    table: str
    produced: int = 0
    landed: int = 0
    dlq: int = 0
    bad_produced: int = 0
    duplicates: int = 0
    lost: int = 0
    unexpected: int = 0  # rows at a position that was never produced
    misrouted: int = 0  # |rows in the error table - bad records produced|


def row(table: str, i: int, new_key: str | None) -> dict:
    """Record `i` of a table whose stem is ORDERS, CLICKS or USERS; every 7th carries
    `new_key` when a chunk evolves the schema."""
    if table == "ORDERS":
        value = {"order_id": i, "amount": round(i % 10000 / 7, 2), "currency": "USD",
                 "paid": i % 3 == 0}
    elif table == "CLICKS":
        value = {"click_id": i, "url": f"/page/{i % 517}", "user_id": i % 9973}
    else:
        value = {"user_id": i, "name": f"user-{i}", "country": ("NO", "DE", "FR")[i % 3]}
    if new_key and i % 7 == 0:
        value[new_key] = f"v{i}"
    return value


# ---------------------------------------------------------------- watching the tables

class TableWatcher:
    """Sees, from outside the connector, a table's new Delta commits and data files."""

    def __init__(self, warehouse: Path):
        self.root = warehouse / DATABASE / SCHEMA
        self.commits: set[tuple[str, str]] = set()
        self.files: set[tuple[str, str]] = set()

    def baseline(self) -> None:
        self.commits, self.files = set(), set()
        for _ in self.events():
            pass

    def events(self):
        """(moment, table, detail) for what appeared since the last call."""
        if not self.root.is_dir():
            return
        for table in sorted(os.listdir(self.root)):
            log = self.root / table / "_delta_log"
            try:
                names = os.listdir(log)
            except FileNotFoundError:
                names = []
            for name in sorted(names):
                if len(name) == 25 and name.endswith(".json") and (table, name) not in self.commits:
                    self.commits.add((table, name))
                    yield self._commit_moment(log / name), table, f"v{int(name[:20])}"
            try:
                data = os.listdir(self.root / table)
            except FileNotFoundError:
                data = []
            for name in data:
                if name.endswith(".parquet") and (table, name) not in self.files:
                    self.files.add((table, name))
                    yield "write", table, name

    @staticmethod
    def _commit_moment(path: Path) -> str:
        try:
            actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return "commit"
        kinds = {key for action in actions for key in action}
        if "add" in kinds:
            return "commit"
        if "metaData" in kinds:
            return "create" if path.name.startswith("0" * 20) else "evolve"
        return "other"


# ---------------------------------------------------------------- the connector process

class ConnectorProcess:
    """`python -m floeline.cli run CONFIG` in a process group of its own, so a SIGKILL
    takes its JVM and Python workers down at the same instant."""

    def __init__(self, config_file: Path, log_file: Path, until_caught_up: bool = False):
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "floeline.cli", "run", str(config_file)]
        if until_caught_up:
            cmd.append("--until-caught-up")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.batches = 0
        self.last_batch_at: float | None = None
        self.log = open(log_file, "w")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.append(line)
            if line.startswith("batch "):
                self.batches += 1
                self.last_batch_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def caught_up(self) -> bool:
        """Its last batch line said nothing is left to read (Kafka's lag)."""
        batch_lines = [l for l in self.lines[-20:] if l.startswith("batch ")]
        return bool(batch_lines) and " behind=0 " in batch_lines[-1]

    def idle_for(self) -> float:
        """Seconds since its last batch line (0 before the first): a source whose
        running lag is unknown (Kinesis) has caught up when no batch comes."""
        return 0.0 if self.last_batch_at is None else time.monotonic() - self.last_batch_at

    def kill(self) -> None:
        """SIGKILL to the whole group, then wait until every member is gone (a JVM that
        outlived its driver would still be writing)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self.reader.join(10)
        self.log.close()

    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.reader.join(30)
        self.log.close()
        return code

    def tail(self, n: int = 30) -> str:
        return "".join(self.lines[-n:])


# ---------------------------------------------------------------- awaiting a moment

def await_moment(proc: ConnectorProcess, watcher: TableWatcher, moment: str,
                 rng: random.Random, startup_timeout_s: float, moment_timeout_s: float,
                 caught_up=None) -> tuple[str, str]:
    """Poll until the cycle's moment comes (or the connector exits; or it caught up,
    or `moment_timeout_s` passed since its first batch line: then `<moment>-fallback`).
    Spark's start is slow on a busy machine, so it is not counted. `caught_up` says
    when nothing is left to read (default: the process's Kafka lag is 0)."""
    caught_up = caught_up or proc.caught_up
    nth = rng.randint(1, 3)  # which commit / file / batch line
    # random: during Spark's start, or a few seconds after the 1st or 2nd batch line
    random_after = rng.randint(0, 2)
    random_delay = rng.uniform(3.0, 30.0) if random_after == 0 else rng.uniform(0.0, 5.0)
    batches_before = proc.batches
    line_at: dict[int, float] = {}
    seen = 0
    deadline = time.monotonic() + startup_timeout_s
    while proc.alive():
        now = time.monotonic()
        if proc.batches > batches_before and not line_at:
            deadline = now + moment_timeout_s
        for n in range(1, 3):
            if proc.batches - batches_before >= n:
                line_at.setdefault(n, now)
        if moment == "random":
            base = proc.started if random_after == 0 else line_at.get(random_after)
            if base is not None and now >= base + random_delay:
                return moment, f"{random_delay:.1f}s after " + (
                    "launch" if random_after == 0 else f"batch line {random_after}")
        if moment == "progress" and proc.batches - batches_before >= nth:
            return moment, proc.lines[-1].split(":")[0] if proc.lines else "?"
        for kind, table, detail in watcher.events():
            if kind == moment and (moment in ("create", "evolve") or (seen := seen + 1) >= nth):
                return moment, f"{table} {detail}"
        if now > deadline or (caught_up() and moment != "random"):
            return f"{moment}-fallback", "moment did not come"
        if moment == "random" and caught_up():
            return f"{moment}-fallback", "caught up first"
        time.sleep(0.01)
    return moment, "exited"


def wait_for(proc: ConnectorProcess, condition, what: str, timeout_s: float) -> None:
    """Poll `condition` while the connector lives; an error if it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not proc.alive():
            raise RuntimeError(f"the connector exited before {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout_s:.0f}s:\n{proc.tail()}")
        time.sleep(0.05)
