"""A table's load history: which staged files were loaded into it, kept in the Delta
commit that added their rows (the commit's userMetadata), so a file's rows and its
history entry land together or not at all.

A file is identified by its path and content: the stage, the path in it, its size and
the MD5 of its bytes (an S3 ETag for a single-part upload). A file already loaded
(LOADED or PARTIALLY_LOADED) is skipped by COPY INTO unless FORCE=TRUE; a file replaced
under the same name with other content is new. Failed files (LOAD_FAILED) are recorded
too (in a commit without rows) so that COPY_HISTORY shows them; COPY INTO tries them
again, an auto-ingest pipe does not (as Snowpipe) until ALTER PIPE ... REFRESH.

Like Snowflake's load metadata, the history lasts as long as the table's commit log
(Delta keeps 30 days by default, Snowflake 64)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from floeline.warehouse.catalog import TableRef

_MARK = "floeline.files"
LOADED, PARTIALLY_LOADED, LOAD_FAILED = "LOADED", "PARTIALLY_LOADED", "LOAD_FAILED"
# A file read again (its path, size or modification time changed) whose content the
# table already holds: recorded so that later listings know this version, and not
# shown by COPY or COPY_HISTORY.
SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class FileLoad:
    """One file's load into a table: what COPY INTO prints and COPY_HISTORY shows."""

    stage: str  # DB.SCHEMA.STAGE
    file: str  # the path in the stage
    size: int
    md5: str
    modified_ms: int
    status: str  # LOADED | PARTIALLY_LOADED | LOAD_FAILED | SKIPPED
    rows_parsed: int
    rows_loaded: int
    errors_seen: int
    first_error: str | None = None
    first_error_line: int | None = None
    pipe: str | None = None  # DB.SCHEMA.PIPE for an auto-ingest pipe's load

    @property
    def identity(self) -> tuple[str, str, int, str]:
        return self.stage, self.file, self.size, self.md5

    @property
    def loaded(self) -> bool:
        return self.status in (LOADED, PARTIALLY_LOADED)


def commit_metadata(loads: list[FileLoad], extra: dict | None = None) -> str:
    """The userMetadata of the commit that loads these files; `extra`: other keys of
    the same object (a connector's channel positions, warehouse/positions.py)."""
    return json.dumps({_MARK: [asdict(load) for load in loads], **(extra or {})}, ensure_ascii=False)


def parse_commit_metadata(text: str | None) -> list[FileLoad]:
    if not text or _MARK not in text:
        return []
    try:
        return [FileLoad(**entry) for entry in json.loads(text)[_MARK]]
    except (ValueError, KeyError, TypeError):
        return []


@dataclass(frozen=True)
class HistoryEntry:
    load: FileLoad
    version: int
    timestamp_ms: int


def read_history(spark, ref: TableRef) -> list[HistoryEntry]:
    """Every file load recorded in the table's commits, oldest first."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, ref.path):
        return []
    return _read(DeltaTable.forPath(spark, ref.path).history())[2]


def _read(history) -> tuple[int, int, list[HistoryEntry]]:
    """(first version, last version, file loads) of a Delta history DataFrame."""
    rows = (history.selectExpr("version", "unix_millis(timestamp) AS ts",
                               f"CASE WHEN userMetadata LIKE '%{_MARK}%' THEN userMetadata END AS meta")
            .orderBy("version").collect())
    entries = [HistoryEntry(load, row["version"], row["ts"])
               for row in rows for load in parse_commit_metadata(row["meta"])]
    return (rows[0]["version"], rows[-1]["version"], entries) if rows else (-1, -1, [])


class HistoryCache:
    """Tables' load histories kept across the polls of a long-running loader (the pipe
    service). Reading a history is a Spark job of about half a second, most of a small
    file's load otherwise; here a table's history is read whole once, then only the
    commits since, and not at all while the table's version (tables.latest_version, no
    Spark job) is the one the cache holds or the cache's own load made it."""

    def __init__(self):
        # path -> ((table id, version), the loads recorded up to that version)
        self._tables: dict[str, tuple[tuple[str, int], list[HistoryEntry]]] = {}

    def read(self, spark, ref: TableRef) -> list[HistoryEntry]:
        """The table's load history now (as read_history)."""
        from delta.tables import DeltaTable

        from floeline.warehouse.tables import latest_version

        latest = latest_version(spark, ref)
        cached = self._tables.pop(ref.path, None)
        if latest is None:
            return read_history(spark, ref)
        if cached is not None and cached[0] == latest:
            self._tables[ref.path] = cached
            return cached[1]
        (table, version), entries = cached if cached is not None else ((None, -1), [])
        if table == latest[0] and version < latest[1]:
            # The last commits, used when they reach back to the cached version.
            first, last, new = _read(DeltaTable.forPath(spark, ref.path).history(latest[1] - version))
            if first == version + 1:
                self._tables[ref.path] = ((table, last), entries + new)
                return entries + new
        _, last, entries = _read(DeltaTable.forPath(spark, ref.path).history())
        self._tables[ref.path] = ((latest[0], last), entries)
        return entries

    def loaded(self, spark, ref: TableRef, loads: list[FileLoad]) -> None:
        """Note the commit that just recorded `loads`: when it is the only commit since
        the cached version, it is the cache's next version (else the next read reads)."""
        from floeline.warehouse.tables import latest_version

        cached = self._tables.get(ref.path)
        latest = latest_version(spark, ref)
        if cached is None or latest != (cached[0][0], cached[0][1] + 1):
            return
        now = int(time.time() * 1000)
        self._tables[ref.path] = (latest, cached[1] + [HistoryEntry(load, latest[1], now) for load in loads])


class Loaded:
    """The files a table holds, asked two ways: before reading a file (same path, size
    and modification time: the same file, unread) and after (same content)."""

    def __init__(self, history: list[HistoryEntry]):
        loads = [e.load for e in history if e.load.loaded]
        self.by_content = {load.identity for load in loads}
        self.by_listing = {(e.load.stage, e.load.file, e.load.size, e.load.modified_ms)
                           for e in history if e.load.loaded or e.load.status == SKIPPED}

    def listed(self, stage: str, file: str, size: int, modified_ms: int) -> bool:
        return (stage, file, size, modified_ms) in self.by_listing

    def holds(self, stage: str, file: str, size: int, md5: str) -> bool:
        return (stage, file, size, md5) in self.by_content
