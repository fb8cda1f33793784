"""The Kinesis connector's settings (`floeline.source=kinesis`).

The keys replace the parameters of Snowflake's Openflow Connector for Kinesis (the
names in parentheses are the parameters as its setup page calls them):

  kinesis.stream.name          (Kinesis Stream Name) one stream, as the spec says; several,
                               comma-separated, beyond it (one table each)
  kinesis.application.name     (Kinesis Application Name) names the DynamoDB lease table
                               (KCL's layout); default: the connector's `name`
  kinesis.initial.position     (Kinesis Initial Stream Position) TRIM_HORIZON (default),
                               LATEST or AT_TIMESTAMP
  kinesis.initial.timestamp    where AT_TIMESTAMP starts: ISO-8601 (`2026-11-22T10:00:00Z`)
                               or epoch milliseconds
  aws.region                   (AWS Region Code)
  aws.access.key.id            (AWS Access Key ID) with aws.secret.access.key (AWS Secret
                               Access Key): the spec's only authentication. Without them,
                               boto3's default credential chain (environment, profile,
                               instance role), beyond the spec.
  kinesis.endpoint, dynamodb.endpoint   endpoint overrides (local services, VPC endpoints)
  errors.deadletterqueue.stream.name    a Kinesis stream for bad records (beyond the spec,
                               which only logs them); without it they go to <TABLE>_ERRORS

snowflake.database.name / snowflake.schema.name (Destination Database / Schema) and the
buffer.*, errors.*, snowflake.metadata.*, converter and transform keys are shared with
the Kafka connector.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

KEYS = frozenset({
    "kinesis.stream.name", "kinesis.application.name", "kinesis.initial.position",
    "kinesis.initial.timestamp", "aws.region", "aws.access.key.id", "aws.secret.access.key",
    "kinesis.endpoint", "dynamodb.endpoint", "errors.deadletterqueue.stream.name",
})
INITIAL_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
# Kinesis stream names: 1-128 of letters, digits, '_', '.', '-'.
_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
# DynamoDB table names (the lease table): 3-255 of letters, digits, '_', '.', '-'.
_TABLE_NAME = re.compile(r"[a-zA-Z0-9_.-]{3,255}")


@dataclass(frozen=True)
class AwsSettings:
    """How to reach AWS: region, credentials, endpoint overrides."""

    region: str | None = None  # aws.region; None: boto3's default (AWS_REGION, profile)
    access_key_id: str | None = None  # aws.access.key.id; None: the default credential chain
    secret_access_key: str | None = field(default=None, repr=False)  # aws.secret.access.key
    kinesis_endpoint: str | None = None  # kinesis.endpoint, e.g. http://127.0.0.1:4568
    dynamodb_endpoint: str | None = None  # dynamodb.endpoint


@dataclass(frozen=True)
class KinesisSettings:
    """The Kinesis source's settings, validated."""

    streams: tuple[str, ...]  # kinesis.stream.name, one or more
    application_name: str  # kinesis.application.name: the DynamoDB lease table's name
    initial_position: Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]  # kinesis.initial.position
    initial_timestamp_ms: int | None  # kinesis.initial.timestamp, with AT_TIMESTAMP
    aws: AwsSettings
    dlq_stream: str | None = None  # errors.deadletterqueue.stream.name


def parse_timestamp_ms(text: str) -> int:
    """Epoch milliseconds from digits or an ISO-8601 time (UTC when it has no offset)."""
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


def read_kinesis_settings(reader, connector_name: str) -> KinesisSettings:
    """KinesisSettings from the config `reader` (config/reader.py's Reader), adding its problems."""
    problems = reader.problems
    names = reader.text("kinesis.stream.name")
    streams: tuple[str, ...] = ()
    if names is None:
        problems.append("missing required setting 'kinesis.stream.name' (the Kinesis stream to read)")
    else:
        streams = tuple(s.strip() for s in names.split(","))
        for stream in streams:
            if not _STREAM_NAME.fullmatch(stream):
                problems.append(f"kinesis.stream.name: {stream!r} is not a valid Kinesis stream name "
                                "(1-128 of letters, digits, '_', '.', '-')")
        for dup in sorted({s for s in streams if streams.count(s) > 1}):
            problems.append(f"kinesis.stream.name lists {dup!r} more than once")
    application = reader.text("kinesis.application.name")
    if application is not None and not _TABLE_NAME.fullmatch(application):
        problems.append(f"kinesis.application.name={application!r} cannot name a DynamoDB lease table "
                        "(3-255 of letters, digits, '_', '.', '-')")
    elif application is None and connector_name and not _TABLE_NAME.fullmatch(connector_name):
        problems.append(f"missing setting 'kinesis.application.name': it defaults to the connector's "
                        f"name, but {connector_name!r} cannot name a DynamoDB lease table (3-255 of "
                        "letters, digits, '_', '.', '-')")
    position = reader.choice("kinesis.initial.position", "TRIM_HORIZON", INITIAL_POSITIONS)
    stamp_text = reader.text("kinesis.initial.timestamp")
    stamp = None
    if stamp_text is not None:
        try:
            stamp = parse_timestamp_ms(stamp_text)
        except ValueError:
            problems.append(f"kinesis.initial.timestamp={stamp_text!r} is not a time; accepted values: "
                            "ISO-8601 (2026-11-22T10:00:00Z) or epoch milliseconds")
    if position == "AT_TIMESTAMP" and stamp_text is None:
        problems.append("kinesis.initial.position=AT_TIMESTAMP needs kinesis.initial.timestamp "
                        "(ISO-8601 or epoch milliseconds)")
    if stamp_text is not None and position != "AT_TIMESTAMP":
        problems.append("kinesis.initial.timestamp is set but kinesis.initial.position is not "
                        "AT_TIMESTAMP; set both or remove the timestamp")
    key_id, secret = reader.text("aws.access.key.id"), reader.text("aws.secret.access.key")
    if (key_id is None) != (secret is None):
        problems.append("aws.access.key.id and aws.secret.access.key go together: set both, or "
                        "neither to use the default AWS credential chain")
    aws = AwsSettings(
        region=reader.text("aws.region"),
        access_key_id=key_id,
        secret_access_key=secret,
        kinesis_endpoint=_endpoint(reader, "kinesis.endpoint"),
        dynamodb_endpoint=_endpoint(reader, "dynamodb.endpoint"),
    )
    dlq = reader.text("errors.deadletterqueue.stream.name")
    if dlq is not None and not _STREAM_NAME.fullmatch(dlq):
        problems.append(f"errors.deadletterqueue.stream.name={dlq!r} is not a valid Kinesis stream name")
    if dlq is not None and dlq in streams:
        problems.append(f"errors.deadletterqueue.stream.name={dlq!r} is one of the streams this "
                        "connector reads; use a separate stream to avoid an infinite loop")
    return KinesisSettings(streams, application or connector_name, position, stamp, aws, dlq)


def _endpoint(reader, key: str) -> str | None:
    value = reader.text(key)
    if value is not None and not re.fullmatch(r"https?://[^\s/]+(/.*)?", value):
        reader.problems.append(f"{key}={value!r} is not a URL; write it as http://host:port or https://host")
    return value
