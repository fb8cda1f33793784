"""A Delta table's log read straight from its `_delta_log` directory, without Spark:
what `floeline status` needs (the commits' userMetadata, where positions live, and a
table's row count) in a process that starts no JVM. A local table's files are read
from disk, an s3a:// table's with boto3 (storage.py).

Two readings, each right for what it answers:

- Commits, newest first: the JSON commit files `<version>.json`, read from the newest
  version down. Checkpoints hold no commitInfo (no userMetadata), so they add nothing
  here; Delta keeps each JSON commit for delta.logRetentionDuration (30 days by
  default), the same commits DeltaTable.history() reads.
- The current snapshot (its live files, and so its row count; its txn actions, where
  positions are kept for good, position_txns.py): the newest complete
  checkpoint (classic `<v>.checkpoint.parquet`, multi-part
  `<v>.checkpoint.<part>.<parts>.parquet`, or V2 `<v>.checkpoint.<uuid>.json|parquet`
  with its sidecar files), then every JSON commit after it, in order. A file is
  identified by its path and its deletion vector, as Delta does; a file's rows are
  its stats' numRecords less its deletion vector's cardinality."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from floeline.config import locations
from floeline.warehouse import storage
from floeline.warehouse.storage import Storage

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(
    r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.([0-9a-fA-F-]{36}))?\.(parquet|json)$")


@dataclass(frozen=True)
class Commit:
    """One commit's version, time (ms since the epoch) and userMetadata."""

    version: int
    timestamp_ms: int | None
    user_metadata: str | None


def log_dir(table_path: str) -> str:
    return locations.join(table_path.removeprefix("file:"), LOG_DIR)


def _files(table_path: str, files: Storage | None) -> Storage:
    return files if files is not None else storage.storage_for(table_path)


def is_table(table_path: str, files: Storage | None = None) -> bool:
    return _files(table_path, files).is_dir(log_dir(table_path))


def _names(files: Storage, directory: str) -> list[str]:
    return files.children(directory)[1]


def _commit_versions(files: Storage, directory: str) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_COMMIT.match, _names(files, directory)) if m)


def _actions(files: Storage, path: str) -> list[dict]:
    """The actions of a JSON commit (one JSON object per line); [] for a file that a
    log cleanup deleted since it was listed."""
    text = files.read_text(path)
    if text is None:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit_file(directory: str, version: int) -> str:
    return locations.join(directory, f"{version:020d}.json")


def commits_newest_first(table_path: str, files: Storage | None = None) -> Iterator[Commit]:
    """The table's commits still in its log, from the newest down."""
    files = _files(table_path, files)
    directory = log_dir(table_path)
    for version in reversed(_commit_versions(files, directory)):
        info = next((a["commitInfo"] for a in _actions(files, _commit_file(directory, version))
                     if "commitInfo" in a), None)
        if info is None:
            continue
        stamp = info.get("inCommitTimestamp", info.get("timestamp"))
        yield Commit(version, int(stamp) if stamp is not None else None, info.get("userMetadata"))


# ---- the snapshot -------------------------------------------------------------------


def _checkpoints(names: list[str], directory: str, up_to: int) -> list[tuple[int, list[str]]]:
    """Complete checkpoints at or below version `up_to`, newest first, each as its
    version and its files (one, every part of a multi-part one, or one V2 file)."""
    single: dict[int, list[str]] = {}
    parts: dict[tuple[int, int], list[str]] = {}
    for name in names:
        m = _CHECKPOINT.match(name)
        if not m:
            continue
        version = int(m.group(1))
        if version > up_to:
            continue
        if m.group(2):  # multi-part: complete when every part is there
            parts.setdefault((version, int(m.group(3))), []).append(name)
        elif m.group(4):  # V2 (any one of a version's V2 files is a whole checkpoint)
            single.setdefault(version, [name])
        else:
            single[version] = [name]
    for (version, count), files in parts.items():
        if len(files) == count and version not in single:
            single[version] = sorted(files)
    return sorted(((v, [locations.join(directory, f) for f in fs]) for v, fs in single.items()),
                  reverse=True)


# The actions of a snapshot each reading needs (a V2 checkpoint's sidecars hold only
# file actions): reading only these columns of a large table's checkpoint is what
# keeps the txn actions' reading cheap.
FILE_ACTIONS = ("add", "remove", "sidecar")
TXN_ACTIONS = ("txn",)


def _read_checkpoint_file(files: Storage, path: str, kinds: tuple[str, ...]) -> list[dict]:
    """The actions of `kinds` of one checkpoint file (parquet or JSON)."""
    if path.endswith(".json"):
        return [a for a in _actions(files, path) if set(kinds) & a.keys()]
    import io

    import pyarrow.parquet as pq

    data = files.read_bytes(path)
    if data is None:
        raise FileNotFoundError(path)
    parquet = pq.ParquetFile(io.BytesIO(data))
    wanted = [c for c in kinds if c in parquet.schema_arrow.names]
    table = parquet.read(columns=wanted)
    actions = []
    for column in wanted:
        for value in table.column(column).to_pylist():
            if value is not None:
                actions.append({column: value})
    return actions


def _checkpoint_actions(files: Storage, directory: str, paths: list[str], kinds: tuple[str, ...]) -> list[dict]:
    actions = []
    for path in paths:
        for action in _read_checkpoint_file(files, path, kinds):
            if "sidecar" in action:  # V2: the file actions are in sidecar parquet files
                sidecar = locations.join(directory, "_sidecars", action["sidecar"]["path"])
                actions.extend(_read_checkpoint_file(files, sidecar, kinds))
            else:
                actions.append(action)
    return actions


def file_key(action: dict) -> tuple[str, str | None]:
    """A data file's identity: its path and its deletion vector's id."""
    dv = action.get("deletionVector")
    dv_id = None
    if dv:
        dv_id = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}@{dv.get('offset')}"
    return action["path"], dv_id


def _snapshot_actions(table_path: str, files: Storage | None,
                      kinds: tuple[str, ...]) -> tuple[list[dict], int]:
    """The actions of `kinds` that make the table's current snapshot, in order (its
    newest complete checkpoint's, then every JSON commit's after it), and its version
    (-1: no table)."""
    store = _files(table_path, files)
    directory = log_dir(table_path)
    names = _names(store, directory)
    versions = [int(m.group(1)) for m in map(_COMMIT.match, names) if m]
    versions += [int(m.group(1)) for m in map(_CHECKPOINT.match, names) if m]
    if not versions:
        return [], -1
    latest = max(versions)
    actions: list[dict] = []
    start = 0
    for version, checkpoint in _checkpoints(names, directory, latest):
        try:
            actions = _checkpoint_actions(store, directory, checkpoint, kinds)
        except (OSError, ValueError):  # being written, or cleaned up: an older one
            continue
        start = version + 1
        break
    for version in range(start, latest + 1):
        actions.extend(a for a in _actions(store, _commit_file(directory, version)) if set(kinds) & a.keys())
    return actions, latest


def snapshot_actions(table_path: str, kinds: tuple[str, ...],
                     files: Storage | None = None) -> tuple[list[dict], int]:
    """The actions of `kinds` ("add", "remove", "metaData", ...) that make the table's
    current snapshot, in log order, and its version (-1: no table)."""
    return _snapshot_actions(table_path, files, kinds)


def live_files(table_path: str, files: Storage | None = None) -> list[dict]:
    """The add actions of the table's current snapshot (its live data files)."""
    live: dict[tuple[str, str | None], dict] = {}
    for action in _snapshot_actions(table_path, files, FILE_ACTIONS)[0]:
        if "add" in action:
            live[file_key(action["add"])] = action["add"]
        elif "remove" in action:
            live.pop(file_key(action["remove"]), None)
    return list(live.values())


@dataclass(frozen=True)
class Transactions:
    """A snapshot's txn actions: each appId's latest version and when it was set (ms
    since the epoch, None when not recorded), at the snapshot's `version`."""

    versions: dict[str, int]
    updated_ms: dict[str, int | None]
    version: int


def transactions(table_path: str, files: Storage | None = None) -> Transactions:
    """The txn actions of the table's current snapshot (the latest per appId)."""
    versions: dict[str, int] = {}
    updated: dict[str, int | None] = {}
    actions, version = _snapshot_actions(table_path, files, TXN_ACTIONS)
    for action in actions:
        txn = action.get("txn")
        if txn:
            versions[txn["appId"]] = int(txn["version"])
            stamp = txn.get("lastUpdated")
            updated[txn["appId"]] = int(stamp) if stamp is not None else None
    return Transactions(versions, updated, version)


def row_count(table_path: str, files: Storage | None = None) -> int | None:
    """The table's rows from its files' statistics, or None when a file has none."""
    total = 0
    for add in live_files(table_path, files):
        stats = add.get("stats")
        records = None
        if isinstance(stats, str) and stats:
            records = json.loads(stats).get("numRecords")
        elif isinstance(add.get("stats_parsed"), dict):
            records = add["stats_parsed"].get("numRecords")
        if records is None:
            return None
        total += int(records) - int((add.get("deletionVector") or {}).get("cardinality") or 0)
    return total
