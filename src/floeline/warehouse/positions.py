"""Channel positions kept in the destination table.

Each commit floeline makes to a table carries, written atomically with the rows, the
last position of every channel of that connector that ever wrote to the table, and the
channels that are finished (a closed Kinesis shard). So the table alone says where to
resume: a replayed batch, a lost Spark checkpoint or a killed process never duplicates
or loses rows. They are written twice: as txn actions (position_txns.py), which Delta's
checkpoints keep for good, and in the commit's userMetadata, which DESCRIBE HISTORY
shows for as long as the log keeps the commit (30 days by default).

The connector, `floeline status` and the worker's offsets API read them from the
table's Delta log files without Spark (committed_in_log, through delta_log.py).

An offsets change (worker/offsets.py) is an empty commit whose entry holds the new
positions, the channels reset to their earliest record (`earliest`) and the change's id
(`change`), carried on by every later commit; beside the entry, OFFSETS_CHANGE_KEY
says who asked, when, and what the table held before (offsets_changes.py).

Channels are named as their source names them (`orders/0` for Kafka topic `orders`
partition 0, `events/shardId-000000000001` for a Kinesis shard); positions are digit
strings (sources/base.py). Tables written before floeline had sources hold Kafka
offsets as [topic, partition, offset] triples; they are read as `topic/partition`
channels, so those tables resume where they stopped."""

from __future__ import annotations

import json

from floeline.records.content import sql_string
from floeline.sources.base import Committed, position_after_sql
from floeline.warehouse import delta_log
from floeline.warehouse.position_txns import held_in_txns, stamp_app_id

_MARK = "floeline.channels"


def commit_entry(connector: str, committed: Committed) -> dict:
    """This connector's channel positions for the table, as one key of a commit's
    userMetadata object (a load of staged files puts its load history beside it)."""
    entry = {"connector": connector, "positions": dict(sorted(committed.positions.items()))}
    if committed.finished:
        entry["finished"] = sorted(committed.finished)
    earliest = committed.earliest - set(committed.positions) - committed.finished
    if earliest:
        entry["earliest"] = sorted(earliest)
    if committed.change is not None:
        entry["change"] = committed.change
    if committed.epochs:
        entry["epochs"] = dict(sorted(committed.epochs.items()))
    return {_MARK: entry}


def commit_metadata(connector: str, committed: Committed) -> str:
    """The userMetadata of a commit: this connector's channel positions for the table."""
    return json.dumps(commit_entry(connector, committed))


def parse_commit_metadata(text: str | None, connector: str) -> Committed | None:
    """The channel positions in a commit's userMetadata when this connector wrote it."""
    if not text or _MARK not in text:
        return None
    try:
        entry = json.loads(text)[_MARK]
    except (ValueError, KeyError, TypeError):
        return None
    if entry.get("connector") != connector:
        return None
    if "offsets" in entry:  # written before sources: Kafka [topic, partition, offset]
        return Committed({f"{t}/{int(p)}": str(int(o)) for t, p, o in entry["offsets"]})
    return Committed({str(c): str(p) for c, p in entry.get("positions", {}).items()},
                     set(entry.get("finished", [])), set(entry.get("earliest", [])),
                     entry.get("change"), {str(r): str(e) for r, e in entry.get("epochs", {}).items()})


def committed_filter_sql(committed: Committed) -> str | None:
    """SQL over `channel` and `position`: TRUE for rows a table holding `committed`
    does not hold yet (a map lookup per row, however many channels), or None when it
    holds nothing. How a replayed batch is filtered."""
    if not committed.positions:
        return None
    pairs = ", ".join(f"{sql_string(c)}, {sql_string(p)}" for c, p in sorted(committed.positions.items()))
    held = f"element_at(map({pairs}), channel)"
    return f"({held} IS NULL OR {position_after_sql('position', held)})"


def committed_in_log(table_path: str, connector: str,
                     files=None) -> tuple[Committed, delta_log.Commit | None]:
    """What this connector last committed to the table, read from its Delta log without
    Spark (`files`: the warehouse's storage), and the commit that holds it (None when no
    commit does).

    The snapshot's txn actions are the truth (position_txns.py: they outlive the log's
    clean-up); a commit with this connector's positions in its userMetadata that is
    newer than them wins: a table no commit has yet written txns to (an older floeline),
    or a MERGE statement's commit whose txns had not followed yet (commits.merge)."""
    if not delta_log.is_table(table_path, files):
        return Committed(), None
    txns = delta_log.transactions(table_path, files)
    held = held_in_txns(connector, txns.versions)
    for commit in delta_log.commits_newest_first(table_path, files):
        if held is not None and commit.version <= held.stamp:
            break
        committed = parse_commit_metadata(commit.user_metadata, connector)
        if committed is not None:
            return committed, commit
    if held is None:
        return Committed(), None
    return held.committed, delta_log.Commit(held.stamp, txns.updated_ms.get(stamp_app_id(connector)), None)
