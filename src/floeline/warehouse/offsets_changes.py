"""An offsets change in a table's Delta log: where a connector's channels resume, set
by the worker's offsets API (worker/offsets.py) while the connector is stopped, or by
the connector itself when its source changed under it and it is told to go on
(ingest/source_changes.py: floeline.kafka.fail.on.data.loss=false; the record's
`reason` says why).

The change is one commit of no rows whose userMetadata holds, as every commit does,
the connector's positions for the table (warehouse/positions.py), now the new ones,
with the channels reset to their earliest record and the change's id; and beside
them, under OFFSETS_CHANGE_KEY, who asked, when, and what the table held before. So
the normal read of positions picks the change up, the exactly-once rule (rows the
table holds are dropped as replays) holds from the new positions on, and DESCRIBE
HISTORY shows who moved them. Later commits carry the change's id on, so a Spark
checkpoint made before the change is known at start and set aside
(ingest/checkpoint_guard.py)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from floeline.sources.base import Committed
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.commits import commit

OFFSETS_CHANGE_KEY = "floeline.offsets.changed"


@dataclass(frozen=True)
class OffsetsChange:
    """One request to move a connector's positions: its id (the same in every table
    it changes), who asked, when (epoch ms), how ("alter" or "reset") and, when the
    connector made it, why."""

    requested_by: str
    kind: str
    reason: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))


def changed_positions(held: Committed, change: OffsetsChange, positions: dict[str, str | None],
                      finished: set[str] = frozenset(), epochs: dict[str, str] | None = None) -> Committed:
    """The table's positions after `change` sets `positions` (channel -> the last
    position taken as committed; None: start at the channel's earliest record) and
    marks `finished` channels done (a Kinesis shard read to its end); `epochs`: the
    routes' epochs the new positions belong to (a Kafka topic created again)."""
    after = Committed(dict(held.positions), set(held.finished), set(held.earliest), change.id,
                      {**held.epochs, **(epochs or {})})
    for channel, position in positions.items():
        after.finished.discard(channel)
        if position is None:
            after.positions.pop(channel, None)
            after.earliest.add(channel)
        else:
            after.positions[channel] = position
            after.earliest.discard(channel)
    for channel in finished:
        after.finished.add(channel)
        after.earliest.discard(channel)
    return after


def commit_offsets_change(spark, ref: TableRef, connector: str, held: Committed, after: Committed,
                          change: OffsetsChange) -> None:
    """Commit `after` as `connector`'s positions in the table `ref` (which held `held`),
    in a commit of no rows that records `change`."""
    record = {"id": change.id, "kind": change.kind, "requested_by": change.requested_by,
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(change.at_ms / 1000)),
              "at_ms": change.at_ms, "connector": connector,
              "previous": _positions_record(held)}
    if change.reason:
        record["reason"] = change.reason
    no_rows = spark.read.format("delta").load(ref.path).limit(0)
    commit(no_rows, ref, connector, after, extra={OFFSETS_CHANGE_KEY: record},
           what=f"recording connector {connector}'s offsets change in table {ref.full_name}")


def _positions_record(committed: Committed) -> dict:
    record: dict = {"positions": dict(sorted(committed.positions.items()))}
    if committed.finished:
        record["finished"] = sorted(committed.finished)
    if committed.earliest:
        record["earliest"] = sorted(committed.earliest)
    return record


def offsets_changes(spark, ref: TableRef, connector: str) -> list[dict]:
    """The offsets changes of `connector` in the table's history, newest first: each
    the record OFFSETS_CHANGE_KEY holds, with the commit's `version`."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, ref.path):
        return []
    rows = (DeltaTable.forPath(spark, ref.path).history()
            .where(f"userMetadata LIKE '%{OFFSETS_CHANGE_KEY}%'")
            .select("version", "userMetadata").orderBy("version", ascending=False).collect())
    changes = []
    for row in rows:
        try:
            record = json.loads(row["userMetadata"])[OFFSETS_CHANGE_KEY]
        except (ValueError, KeyError, TypeError):
            continue
        if record.get("connector") == connector:
            changes.append({**record, "version": row["version"]})
    return changes
