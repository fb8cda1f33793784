"""Names of the SNOWPIPE method's objects and files, as Snowflake's Kafka connector
(2.x/3.x) names them:

  stage  SNOWFLAKE_KAFKA_CONNECTOR_<connector>_STAGE_<table>   (one per connector and table)
  pipe   SNOWFLAKE_KAFKA_CONNECTOR_<connector>_PIPE_<table>    (Snowflake: one per partition,
                                                                 suffixed _<partition>; floeline
                                                                 loads a table's files in one
                                                                 commit, so one per table)
  file   <connector>/<table>/<partition>/<startOffset>_<endOffset>_<timeMs>.json.gz

When several topics write to one table, two topics' partition 0 would share a folder;
as the connector does (snowflake.snowpipe.stageFileNameExtensionEnabled, on by
default), the partition part then also carries the topic: abs(CRC-32C of the upper-case
topic) shifted left 16 bits, plus 0x8000 as a marker, plus the partition. So a file's
name says its topic (by hash), partition and offset range; that, with the table's load
history, is what recovery after a crash reads (ingest/snowpipe_sink.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "SNOWFLAKE_KAFKA_CONNECTOR_"
_MARKER = 0x8000  # partition parts at or above this carry a topic hash
_FILE = re.compile(r"^([^/]+)/([^/]+)/(\d+)/(\d+)_(\d+)_(\d+)\.json\.gz$")
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_$]")


def _identifier_part(text: str) -> str:
    """`text` as part of an unquoted identifier (other characters become `_`)."""
    return _NOT_IDENTIFIER.sub("_", text).upper()


def stage_name(connector: str, table: str) -> str:
    return f"{PREFIX}{_identifier_part(connector)}_STAGE_{_identifier_part(table)}"


def pipe_name(connector: str, table: str) -> str:
    return f"{PREFIX}{_identifier_part(connector)}_PIPE_{_identifier_part(table)}"


def table_prefix(connector: str, table: str) -> str:
    """The folder of the stage that holds this connector's files for `table`."""
    return f"{connector}/{table}/"


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as Kafka's Crc32C computes it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _java_int(value: int) -> int:
    """A 32-bit value as Java's (signed) int holds it."""
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_part(partition: int, topic: str | None = None) -> int:
    """The partition folder's number: the partition, or with `topic` (a table shared
    by several topics) the topic's hash, the marker and the partition."""
    if partition < 0 or partition >= _MARKER:
        raise ValueError(f"partition {partition} is out of range (0..{_MARKER - 1})")
    if not topic:
        return partition
    topic_hash = abs(_java_int(crc32c(topic.upper().encode("utf-8"))))
    return (topic_hash << 16) + _MARKER + partition


def topic_matches(part: int, topic: str) -> bool:
    """Whether a partition part written with a topic hash was written for `topic`;
    a plain partition part matches any topic."""
    if part < _MARKER:
        return True
    return part >> 16 == abs(_java_int(crc32c(topic.upper().encode("utf-8"))))


@dataclass(frozen=True)
class StagedRange:
    """What a staged file's name says."""

    connector: str
    table: str
    part: int  # the partition folder's number (see partition_part)
    start: str  # first offset in the file, a digit string
    end: str  # last offset in the file
    time_ms: int

    @property
    def partition(self) -> int:
        return self.part & 0x7FFF if self.part >= _MARKER else self.part

    def is_for(self, topic: str, partition: int) -> bool:
        return self.partition == partition and topic_matches(self.part, topic)


def file_name(connector: str, table: str, part: int, start: str, end: str, time_ms: int) -> str:
    return f"{table_prefix(connector, table)}{part}/{start}_{end}_{time_ms}.json.gz"


def parse_file_name(name: str) -> StagedRange | None:
    """The parts of a file name the connector writes; None for any other name."""
    match = _FILE.match(name)
    if match is None:
        return None
    connector, table, part, start, end, time_ms = match.groups()
    return StagedRange(connector, table, int(part), str(int(start)), str(int(end)), int(time_ms))
