"""The Kinesis calls the reader makes (ListShards, GetShardIterator, GetRecords), each
through aws.call, so they follow floeline's one retry rule, with messages that name the
stream, the shard and the endpoint."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from floeline.config.kinesis import AwsSettings
from floeline.errors import FloelineError
from floeline.sources import aws
from floeline.sources.kinesis.offsets import Shard, channel_id, split_channel

RETRY_BOUND_S = aws.DEFAULT_RETRY_BOUND_S


class Kinesis:
    """The Kinesis calls the reader makes, each through aws.call (one retry rule)."""

    def __init__(self, settings: AwsSettings):
        self.settings = settings
        self.client = aws.client("kinesis", settings)
        region = settings.region or self.client.meta.region_name
        self.region = region
        self.endpoint = (f"kinesis.endpoint={settings.kinesis_endpoint}" if settings.kinesis_endpoint
                         else f"the Kinesis endpoint of {region} (kinesis.endpoint not set)")

    def call(self, what: str, fn, passthrough: frozenset[str] = frozenset(), **kwargs):
        return aws.call(what, fn, bound_s=RETRY_BOUND_S, endpoint=self.endpoint,
                        passthrough=passthrough, **kwargs)

    def list_shards(self, stream: str) -> list[Shard]:
        """Every shard of `stream` (open and closed within retention), paginated."""
        shards, token, waited = [], None, 0.0
        while True:
            args = {"NextToken": token} if token else {"StreamName": stream}
            try:
                page = self.call(f"Kinesis ListShards of stream {stream}", self.client.list_shards,
                                 passthrough=frozenset({"ResourceNotFoundException",
                                                        "ResourceInUseException"}), **args)
            except Exception as exc:  # noqa: BLE001 - the passthrough codes only
                code = aws.error_code(exc)
                if code == "ResourceNotFoundException":
                    raise FloelineError(
                        f"Kinesis stream {stream!r} does not exist in region {self.region} "
                        f"({self.endpoint}): check kinesis.stream.name") from exc
                if code == "ResourceInUseException" and waited < RETRY_BOUND_S:
                    time.sleep(0.5)  # the stream is still being created
                    waited += 0.5
                    continue
                raise aws.terminal_error(f"Kinesis ListShards of stream {stream}", exc, self.endpoint) from exc
            for s in page.get("Shards", ()):
                parents = tuple(channel_id(stream, s[k]) for k in ("ParentShardId", "AdjacentParentShardId")
                                if s.get(k))
                shards.append(Shard(channel_id(stream, s["ShardId"]), parents))
            token = page.get("NextToken")
            if not token:
                return shards

    def shard_iterator(self, channel: str, kind: str, value: str | None) -> str:
        stream, shard_id = split_channel(channel)
        args = {"StreamName": stream, "ShardId": shard_id, "ShardIteratorType": kind}
        if kind == "AT_TIMESTAMP":
            args["Timestamp"] = datetime.fromtimestamp(int(value) / 1000, timezone.utc)
        elif value is not None:
            args["StartingSequenceNumber"] = value
        what = f"Kinesis GetShardIterator {kind}{' ' + value if value else ''} on {channel}"
        return self.call(what, self.client.get_shard_iterator, **args)["ShardIterator"]

    def get_records(self, channel: str, iterator: str, limit: int) -> dict:
        return self.call(f"Kinesis GetRecords on {channel}", self.client.get_records,
                         passthrough=frozenset({"ExpiredIteratorException"}),
                         ShardIterator=iterator, Limit=limit)
