"""Kafka topics that changed under a connector, told from what the tables hold and what
the cluster says now, without Spark (KafkaSource.changed asks the cluster; the rules
here are plain functions).

A partition the connector holds a place in (its committed offset, or where this run
started it) changed when reading on from there would skip or misread records:

  recreated  its topic was deleted and created again: the topic's id (Kafka's topic
             UUID, Committed.epochs) is not the one the positions were read from
  gone       its topic is still subscribed but no longer exists, or has fewer partitions
  behind     the partition now ends before the next offset to read (recreated before
             floeline kept topic ids, or truncated by an unclean leader election)
  lost       its first record now comes after the next offset to read: retention
             deleted records before they were read

By default the connector stops with `changes_error`'s message; with
floeline.kafka.fail.on.data.loss=false it resumes each partition where `resume_after`
says (ingest/source_changes.py): a recreated, gone or emptied partition at its earliest
record, a truncated one (same topic id) at its new end."""

from __future__ import annotations

import json

from floeline.errors import SourceChanged
from floeline.sources.base import ChannelChange

TopicPartition = tuple[str, int]


def find_changes(held: dict[TopicPartition, int], committed: dict[str, str],
                 epochs_then: dict[str, str], ids_now: dict[str, str],
                 partitions_now: dict[str, int], earliest: dict[TopicPartition, int],
                 latest: dict[TopicPartition, int]) -> list[ChannelChange]:
    """The partitions among `held` (the next offset to read of each partition of a
    subscribed topic the connector holds a place in) that changed, given `committed`
    (channel -> last committed offset), the topic ids the positions were read from
    (`epochs_then`) and now (`ids_now`), the subscribed topics' partition counts now, and
    the partitions' first and next offsets now."""
    changes = []
    for (topic, partition), next_offset in sorted(held.items()):
        change = _change(topic, partition, next_offset, epochs_then.get(topic), ids_now.get(topic),
                         partitions_now.get(topic), earliest, latest)
        if change is not None:
            what, available, resume_after = change
            channel = f"{topic}/{partition}"
            changes.append(ChannelChange(channel, topic, what, committed.get(channel), available,
                                         resume_after, ids_now.get(topic)))
    return changes


def _change(topic: str, partition: int, next_offset: int, then: str | None, now: str | None,
            count: int | None, earliest, latest) -> tuple[str, str, str | None] | None:
    """How one partition changed (what, what it holds now, where it resumes), or None."""
    if count is None or partition >= count:
        what = f"the topic has {count} partitions now" if count is not None else "the topic was deleted"
        return f"gone: {what}", "none: the partition does not exist", None
    first, end = earliest[(topic, partition)], latest[(topic, partition)]
    available = f"offsets {first}-{end - 1}" if end > first else f"none (the next record will have offset {end})"
    if then is not None and now is not None and then != now:
        return (f"recreated: the topic was deleted and created again (topic id {then} is now {now})",
                available, None)
    if end < next_offset:
        known = then is not None and then == now
        why = ("truncated (an unclean leader election?)" if known
               else "the topic was deleted and created again, or the partition truncated")
        return (f"behind: the partition now ends at offset {end}, before the next offset to read, "
                f"{next_offset}: {why}", available, str(end - 1) if known and end > 0 else None)
    if first > next_offset:
        return (f"lost: offsets {next_offset}-{first - 1} were deleted (retention) before they were read",
                available, None)
    return None


def changes_error(connector: str, changes: list[ChannelChange]) -> SourceChanged:
    """The error that stops the connector: each changed partition, its committed and
    available offsets, and the two ways on."""
    lines = []
    for c in changes:
        topic, _, partition = c.channel.rpartition("/")
        held = (f"committed offset {c.committed}" if c.committed is not None
                else "nothing committed yet")
        lines.append(f"  topic {topic} partition {partition}: {c.what}; {held}; available: {c.available}")
    example = json.dumps({"offsets": [
        {"partition": {"kafka_topic": c.route, "kafka_partition": int(c.channel.rpartition("/")[2])},
         "offset": None if c.resume_after is None else {"kafka_offset": int(c.resume_after) + 1}}
        for c in changes]})
    return SourceChanged(
        f"connector {connector} stopped: its Kafka topics changed under it, and reading on from "
        f"the offsets its tables hold would skip or misread records; nothing was committed past "
        f"them.\n" + "\n".join(lines) + "\n"
        f"Choose where each partition resumes: with `floeline worker`, stop the connector (PUT "
        f"/connectors/{connector}/stop), PATCH /connectors/{connector}/offsets with {example} "
        f"(null: the partition's first record; docs/worker-offsets.md), then resume it. Or set "
        f"floeline.kafka.fail.on.data.loss=false: the connector then reads a recreated, gone or "
        f"emptied partition from its first record (a truncated one from its new end) and records "
        f"that in the tables' history (docs/kafka.md#topics-that-change).", changes)
