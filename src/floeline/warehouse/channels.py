"""Channels and their offset tokens, kept in the destination table.

A channel is one source partition feeding one table, named `{connector}_{topic}_{partition}`
like Snowflake's. Each commit floeline makes to a table carries, in the Delta commit's
userMetadata (written atomically with the rows), the last offset of every channel of
that connector that ever wrote to the table. So the table alone says where to resume:
a replayed batch, a lost Spark checkpoint or a killed process never duplicates rows."""

from __future__ import annotations

import json

from floeline.warehouse.catalog import TableRef

_MARK = "floeline.channels"


def channel_name(connector: str, topic: str, partition: int) -> str:
    return f"{connector}_{topic}_{partition}"


def commit_metadata(connector: str, offsets: dict[tuple[str, int], int]) -> str:
    """The userMetadata of a commit: this connector's channel offsets for the table."""
    return json.dumps({_MARK: {"connector": connector,
                               "offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())]}})


def parse_commit_metadata(text: str | None, connector: str) -> dict[tuple[str, int], int] | None:
    """The channel offsets in a commit's userMetadata when this connector wrote it."""
    if not text or _MARK not in text:
        return None
    try:
        entry = json.loads(text)[_MARK]
    except (ValueError, KeyError, TypeError):
        return None
    if entry.get("connector") != connector:
        return None
    return {(t, int(p)): int(o) for t, p, o in entry["offsets"]}


def read_offsets(spark, ref: TableRef, connector: str) -> dict[tuple[str, int], int]:
    """The last committed offset per (topic, partition) this connector wrote to the
    table, from the newest commit that carries them; {} for a new table."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, ref.path):
        return {}
    rows = (DeltaTable.forPath(spark, ref.path).history()
            .where(f"userMetadata LIKE '%{_MARK}%'")
            .select("version", "userMetadata").orderBy("version", ascending=False).collect())
    for row in rows:
        offsets = parse_commit_metadata(row["userMetadata"], connector)
        if offsets is not None:
            return offsets
    return {}
