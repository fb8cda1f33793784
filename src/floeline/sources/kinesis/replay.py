"""Re-reading a batch Spark logged (readBetweenOffsets, after a failure): exactly the
records a shard's read handed out, or a clear error when they are no longer in the
stream."""

from __future__ import annotations

from floeline.errors import FloelineError, RetriesExhausted, ServiceUnavailable
from floeline.sources.base import position_after
from floeline.sources.kinesis.batches import KRecord, fetch_limit
from floeline.sources.kinesis.client import Kinesis
from floeline.sources.kinesis.cursor import Cursor
from floeline.sources.kinesis.offsets import ShardState


def replay_shard(kinesis: Kinesis, max_records: int, channel: str, first: ShardState, last: str
                 ) -> list[KRecord]:
    """Exactly the records after `first` up to and including `last`. When `first`
    has a position, reading starts AT it and checks it is still there: then nothing
    between it and `last` can have expired (retention trims from the oldest). Each
    GetRecords asks for about what a batch may hold, as read() does: the batch was
    at most `max_records` user records, and KPL aggregates hold hundreds each."""
    check = first.p
    origin = ("AT_SEQUENCE_NUMBER", check) if check else None
    cursor = Cursor(channel, first, origin)
    gone = (f"cannot re-read Kinesis shard {channel} from {check or first.start} to {last}: "
            "the records are no longer in the stream (expired after its retention period?)")
    out: list[KRecord] = []
    users = 0  # user records in `out`
    while True:
        if not cursor.pending:
            if cursor.ended:
                raise FloelineError(gone)
            limit = fetch_limit(max(1, max_records - users), cursor.users_per_record())
            try:
                caught_up = cursor.fetch(kinesis, limit)
            except (ServiceUnavailable, RetriesExhausted):
                raise
            except FloelineError as exc:  # e.g. the sequence number is not found
                raise FloelineError(f"{gone}: {exc}") from exc
            if caught_up and not cursor.pending:  # at the tip and `last` not reached
                raise FloelineError(gone)
            continue
        record = cursor.pending.popleft()
        if check is not None:
            if record.seq != check:
                raise FloelineError(gone)
            check = None
            continue
        if position_after(record.seq, last):
            raise FloelineError(gone)
        out.append(record)
        users += record.count
        if record.seq == last:
            return out
