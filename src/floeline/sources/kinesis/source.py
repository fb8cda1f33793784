"""The Kinesis source: Kinesis Data Streams read by floeline's Spark data source
(reader.py), in the normalized layout, with KCL's DynamoDB lease table kept as the
mirror of what is committed (leases.py).

A channel is a shard, `stream/shardId`; a position is the Kinesis sequence number
(up to 128 bits and more: a digit string, compared as a number). The user records of
a KPL-aggregated Kinesis record share its sequence number; a batch never splits one,
so the sequence number stays a correct commit point. A shard closed by a split or
merge is finished once read to its end, and recorded as finished in the table.

Where each shard starts without a Spark checkpoint: right after the position its
table holds; at TRIM_HORIZON when an offsets change reset it to its earliest record;
else after the lease table's checkpoint (as a Kafka connector falls back to its
consumer group); else kinesis.initial.position (LATEST is taken as the time the
connector starts, so a replayed first batch reads the same records).

Leases: at start the connector takes the lease of every shard of its streams in the
application's lease table. If another live connector with the same application name
holds them, this one waits as a standby, logging once who holds them, until they are
released (a clean stop) or expire (failover, FAILOVER_S after the other process died),
then continues from the tables' positions. While running, the leases are renewed in
the background; a lost lease stops the connector before its next commit."""

from __future__ import annotations

import json
import logging
import time

from floeline.errors import ConfigError, RetriesExhausted, ServiceUnavailable
from floeline.records.metadata import kinesis_metadata_sql
from floeline.sources import aws as aws_calls
from floeline.sources.base import BatchEnd, Channel, Committed, FixedRoutes, Head, Lag, MirrorError
from floeline.sources.kinesis.leases import LeaseTable, ShardLease, default_worker_id
from floeline.sources.kinesis.offsets import channel_id, decode_offset, split_channel
from floeline.sources.kinesis.reader import KinesisDataSource
from floeline.sources.kinesis.spec import FORMAT

log = logging.getLogger("floeline")

FAILOVER_S = 10.0  # KCL's default failoverTimeMillis
# The reader's columns in the normalized layout (sources/base.py).
NORMALIZED_KINESIS = (
    "channel", "position", "stream AS route", "CAST(partitionKey AS BINARY) AS key",
    "data AS value", "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers",
    "approximateArrivalTimestamp AS timestamp",
    "named_struct('stream', stream, 'shardId', shardId, 'sequenceNumber', sequenceNumber, "
    "'subSequenceNumber', subSequenceNumber, 'partitionKey', partitionKey) AS source",
)


def table_name_for_stream(stream: str) -> str:
    """The spec's rule: the table is named like the stream, in uppercase."""
    return stream.upper()


class KinesisSource(FixedRoutes):
    kind = "kinesis"
    has_headers = False
    has_standby = True
    bounded_read_tasks = False  # a task per shard

    def __init__(self, config, worker_id: str | None = None):
        self.config = config
        self.settings = config.kinesis
        self.kinesis = aws_calls.client("kinesis", self.settings.aws)
        self.leases = LeaseTable(self.settings.application_name, self.settings.aws,
                                 worker_id or default_worker_id(), failover_s=FAILOVER_S,
                                 initial_sentinel=self.settings.initial_position)
        self._shards: dict[str, tuple[str, ...]] | None = None  # channel -> parent channels
        self._lease_keys: dict[str, str] = {}  # channel -> lease key
        self._first: BatchEnd | None = None
        self._leased = False

    # ---- channels and names -----------------------------------------------------

    def _list_shards(self) -> dict[str, tuple[str, ...]]:
        """Every shard of the streams, with its parents (channel ids)."""
        shards: dict[str, tuple[str, ...]] = {}
        endpoint = self.settings.aws.kinesis_endpoint
        for stream in self.settings.streams:
            what = f"Kinesis ListShards of stream {stream!r}"
            kwargs: dict = {"StreamName": stream}
            while True:
                try:
                    page = aws_calls.call(what, self.kinesis.list_shards, endpoint=endpoint,
                                          passthrough=frozenset({"ResourceNotFoundException"}),
                                          **kwargs)
                except Exception as exc:
                    if aws_calls.error_code(exc) == "ResourceNotFoundException":
                        raise ConfigError(
                            f"Kinesis stream {stream!r} does not exist (region "
                            f"{self.settings.aws.region or 'default'}, endpoint {endpoint or 'AWS'}): "
                            f"create it or fix kinesis.stream.name") from None
                    raise
                for shard in page.get("Shards", []):
                    parents = tuple(channel_id(stream, p) for p in
                                    (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
                    shards[channel_id(stream, shard["ShardId"])] = parents
                token = page.get("NextToken")
                if not token:
                    break
                kwargs = {"NextToken": token}
        return shards

    def channels(self) -> list[Channel]:
        if self._shards is None:
            self._shards = self._list_shards()
        return [Channel(c, split_channel(c)[0]) for c in sorted(self._shards)]

    def table_name(self, route: str) -> str:
        return table_name_for_stream(route)

    def route_of(self, channel: str) -> str:
        return split_channel(channel)[0]

    # ---- leases ---------------------------------------------------------------------

    def _lease_key(self, channel: str) -> str:
        """KCL's lease key: the shard id for one stream; for several streams KCL's
        multi-stream key `account:stream:creationEpoch:shardId`."""
        key = self._lease_keys.get(channel)
        if key is None:
            stream, shard = split_channel(channel)
            if len(self.settings.streams) == 1:
                key = shard
            else:
                summary = aws_calls.call(
                    f"Kinesis DescribeStreamSummary of {stream!r}", self.kinesis.describe_stream_summary,
                    endpoint=self.settings.aws.kinesis_endpoint, StreamName=stream)["StreamDescriptionSummary"]
                account = summary["StreamARN"].split(":")[4]
                epoch = int(summary["StreamCreationTimestamp"].timestamp())
                key = f"{account}:{stream}:{epoch}:{shard}"
            self._lease_keys[channel] = key
        return key

    def _take_leases(self, channels, wait_s: float | None) -> None:
        shards = self._shards or {}
        leases = [ShardLease(self._lease_key(c), tuple(self._lease_key(p) for p in shards.get(c, ())))
                  for c in channels]
        self.leases.take(leases, wait_s=wait_s)

    # ---- the stream -----------------------------------------------------------------

    def claim(self) -> None:
        """Take every shard's lease; a standby waits here (see the module doc). The
        connector reads the tables' positions after this: the run that held the leases
        may have committed until the moment it stopped."""
        channels = [c.id for c in self.channels()]
        self.leases.ensure_table()
        self._take_leases(channels, wait_s=None)
        self.leases.start_renewing()
        self._leased = True

    def open(self, spark, committed: Committed, has_checkpoint: bool):
        if not self._leased:
            self.claim()
        channels = [c.id for c in self.channels()]
        positions, finished = dict(committed.positions), set(committed.finished)
        by_key = {self._lease_key(c): c for c in channels}
        for key, checkpoint in self.leases.checkpoints().items():
            channel = by_key.get(key)
            if (channel is None or channel in positions or channel in finished
                    or channel in committed.earliest):  # reset there by an offsets change
                continue
            if checkpoint.finished:
                finished.add(channel)
            elif checkpoint.sequence is not None:
                positions[channel] = checkpoint.sequence
        self._first = BatchEnd(positions, frozenset(finished))
        spec = {
            "streams": list(self.settings.streams),
            "aws": {k: v for k, v in vars(self.settings.aws).items() if v is not None},
            "committed": positions, "finished": sorted(finished),
            "earliest": sorted(committed.earliest - set(positions) - finished),
            "initial": self._initial(),
            "max_records_per_shard": self.config.count_records,
            "max_bytes_per_shard": self.config.size_bytes,
        }
        spark.dataSource.register(KinesisDataSource)
        return spark.readStream.format(FORMAT).option("spec", json.dumps(spec)).load()

    def normalize(self, batch):
        return batch.selectExpr(*NORMALIZED_KINESIS)

    def _initial(self) -> dict:
        position = self.settings.initial_position
        if position == "TRIM_HORIZON":
            return {"type": "TRIM_HORIZON"}
        stamp = self.settings.initial_timestamp_ms if position == "AT_TIMESTAMP" else int(time.time() * 1000)
        return {"type": "AT_TIMESTAMP", "timestamp_ms": stamp}

    def batch_end(self, offset_json: str) -> BatchEnd | None:
        try:
            states = decode_offset(offset_json)
        except Exception:  # noqa: BLE001 - not ours / unreadable: the general path decides
            return None
        return BatchEnd({c: s.p for c, s in states.items() if s.p is not None},
                        frozenset(c for c, s in states.items() if s.done))

    def start_of_first_batch(self) -> BatchEnd | None:
        return self._first

    def metadata_sql(self, flags, push_time_sql, key_json=None, headers_json=None, extra=(),
                     function=None, as_json=False) -> str:
        # the partition key is text and Kinesis records have no headers
        return kinesis_metadata_sql(flags, push_time_sql, extra, as_json)

    def first_records_sql(self, start: BatchEnd, count: int) -> str | None:
        """None: every record is the sample (sequence numbers are not counts)."""
        return None

    def describe(self, fields: dict) -> str:
        text = (f"stream={fields.get('stream')} shardId={fields.get('shardId')} "
                f"sequenceNumber={fields.get('sequenceNumber')}")
        if fields.get("subSequenceNumber") is not None:
            text += f" subSequenceNumber={fields['subSequenceNumber']}"
        return text

    # ---- after a commit -------------------------------------------------------------

    def before_commit(self) -> None:
        """Stop before committing when a lease was lost (another connector took over)."""
        if self._leased:
            self.leases.check()

    def after_commit(self, positions: dict[str, str], finished: set[str]) -> None:
        """Advance the lease table's checkpoints (KCL tooling sees progress)."""
        if not self._leased:
            return
        new = [c for c in set(positions) | finished if self._lease_key(c) not in self.leases.owned]
        if new:  # shards born from a split or merge while running
            self._shards = self._list_shards()
            self._take_leases(new, wait_s=FAILOVER_S * 3)
        try:
            self.leases.checkpoint({self._lease_key(c): (p, 0) for c, p in positions.items()},
                                   {self._lease_key(c) for c in finished})
        except (ServiceUnavailable, RetriesExhausted) as exc:  # a mirror only: the tables hold the truth
            raise MirrorError(f"could not advance the Kinesis lease table "
                              f"{self.settings.application_name}: {exc}") from exc

    def heads(self, committed: dict[str, str] | None = None) -> dict[str, Head]:
        """For `committed` positions (floeline status): per shard, how long the oldest
        record after the committed sequence number (after the shard's start when none)
        has been in the stream, in ms: 0 when none follows. Kinesis does not tell a
        shard's newest sequence number, so `latest` stays unknown. While running (no
        `committed`): {} (two calls per shard each batch are not worth it)."""
        if committed is None:
            return {}
        channels = sorted({c.id for c in self.channels()} | set(committed))
        return {c: Head(None, Lag(self._waiting_ms(c, committed.get(c)), "ms")) for c in channels}

    def _waiting_ms(self, channel: str, position: str | None, max_calls: int = 5) -> int:
        stream, shard = split_channel(channel)
        endpoint = self.settings.aws.kinesis_endpoint
        args = {"StreamName": stream, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"}
        if position is not None:
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=position)
        iterator = aws_calls.call(f"Kinesis GetShardIterator on {channel}", self.kinesis.get_shard_iterator,
                                  endpoint=endpoint, **args)["ShardIterator"]
        behind = 0
        for _ in range(max_calls):  # an empty answer may still be short of the tip
            if iterator is None:  # a closed shard read to its end
                return 0
            page = aws_calls.call(f"Kinesis GetRecords on {channel}", self.kinesis.get_records,
                                  endpoint=endpoint, ShardIterator=iterator, Limit=1)
            if page.get("Records"):
                arrived = page["Records"][0]["ApproximateArrivalTimestamp"].timestamp()
                return max(0, int((time.time() - arrived) * 1000))
            behind = int(page.get("MillisBehindLatest", 0))
            if behind == 0:
                return 0
            iterator = page.get("NextShardIterator")
        return behind

    def close(self) -> None:
        if self._leased:
            self._leased = False
            try:
                self.leases.release()
            except Exception as exc:  # noqa: BLE001 - they expire after FAILOVER_S anyway
                log.warning("could not release Kinesis leases: %s", exc)
