"""RECORD_METADATA: the Kafka coordinates of each record as a VARIANT object, with the
fields and names of Snowflake's connector (topic, partition, offset, CreateTime or
LogAppendTime, SnowflakeConnectorPushTime, key, headers).

The object is built as a Spark SQL expression over the Kafka source's columns
(key, topic, partition, offset, timestamp, timestampType, headers). It goes through
to_json first because to_json drops null fields: a record without a key or headers
gets no `key`/`headers` field at all, as in Snowflake."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from floeline.config import MetadataFlags


# Kafka's TimestampType ids as the Spark Kafka source reports them.
CREATE_TIME, LOG_APPEND_TIME = 0, 1


def metadata_fields_sql(flags: MetadataFlags, push_time_ms: int) -> list[str]:
    """The `name, expression` pairs of the metadata object, in Snowflake's order."""
    if not flags.all_:
        return []
    fields = []
    if flags.topic:
        fields.append("'topic', topic")
    if flags.offset_and_partition:
        fields += ["'partition', partition", "'offset', offset"]
    if flags.createtime:
        fields += [
            f"'CreateTime', CASE WHEN timestampType = {CREATE_TIME} THEN unix_millis(timestamp) END",
            f"'LogAppendTime', CASE WHEN timestampType = {LOG_APPEND_TIME} THEN unix_millis(timestamp) END",
        ]
    if flags.connector_push_time:
        fields.append(f"'SnowflakeConnectorPushTime', CAST({int(push_time_ms)} AS BIGINT)")
    fields.append("'key', CAST(key AS STRING)")
    fields.append(
        "'headers', CASE WHEN size(headers) > 0 THEN "
        "map_from_entries(transform(headers, h -> struct(h.key, CAST(h.value AS STRING)))) END"
    )
    return fields


def metadata_sql(flags: MetadataFlags, push_time_ms: int) -> str:
    """A SQL expression giving RECORD_METADATA as a VARIANT (NULL when
    snowflake.metadata.all=false)."""
    fields = metadata_fields_sql(flags, push_time_ms)
    if not fields:
        return "CAST(NULL AS VARIANT)"
    return f"parse_json(to_json(named_struct({', '.join(fields)})))"
