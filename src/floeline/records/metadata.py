"""RECORD_METADATA: the Kafka coordinates of each record as a VARIANT object, with the
fields and names of Snowflake's connector (topic, partition, offset, CreateTime or
LogAppendTime, SnowflakeConnectorPushTime, key, headers).

The object is a Spark SQL expression over the Kafka source's columns (key, topic,
partition, offset, timestamp, timestampType, headers). Snowflake omits `key` and
`headers` when a record has none, and names the timestamp after its type, so the
expression picks one of a few struct shapes per record (CASE) and turns it into a
VARIANT with to_variant_object: measured 4x cheaper than building JSON text and
parsing it back."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from floeline.config import MetadataFlags


# Kafka's TimestampType ids as the Spark Kafka source reports them.
CREATE_TIME, LOG_APPEND_TIME = 0, 1


def metadata_sql(flags: MetadataFlags, push_time_ms: int | str) -> str:
    """A SQL expression giving RECORD_METADATA as a VARIANT (NULL when
    snowflake.metadata.all=false). `push_time_ms` is the epoch ms, or a BIGINT SQL
    expression that gives it (jvm.py's push-time function, which keeps the generated
    code the same from batch to batch)."""
    if not flags.all_:
        return "CAST(NULL AS VARIANT)"
    base = []
    if flags.topic:
        base.append("'topic', topic")
    if flags.offset_and_partition:
        base += ["'partition', partition", "'offset', offset"]
    if flags.createtime:
        times = [("'CreateTime', unix_millis(timestamp)", f"timestampType = {CREATE_TIME}"),
                 ("'LogAppendTime', unix_millis(timestamp)", f"timestampType = {LOG_APPEND_TIME}"),
                 (None, f"timestampType NOT IN ({CREATE_TIME}, {LOG_APPEND_TIME})")]
    else:
        times = [(None, "true")]
    push_sql = push_time_ms if isinstance(push_time_ms, str) else f"CAST({int(push_time_ms)} AS BIGINT)"
    push = [f"'SnowflakeConnectorPushTime', {push_sql}"] if flags.connector_push_time else []
    key = ("'key', CAST(key AS STRING)", "key IS NOT NULL", "key IS NULL")
    headers = ("'headers', map_from_entries(transform(headers, "
               "h -> struct(h.key, CAST(h.value AS STRING))))",
               "coalesce(size(headers), 0) > 0", "coalesce(size(headers), 0) = 0")
    branches = []
    for time_field, time_condition in times:
        for with_key in (True, False):
            for with_headers in (True, False):
                fields = base + ([time_field] if time_field else []) + push
                fields += [key[0]] if with_key else []
                fields += [headers[0]] if with_headers else []
                condition = " AND ".join([time_condition, key[1] if with_key else key[2],
                                          headers[1] if with_headers else headers[2]])
                value = (f"to_variant_object(named_struct({', '.join(fields)}))" if fields
                         else "parse_json('{}')")
                branches.append(f"WHEN {condition} THEN {value}")
    return "CASE " + " ".join(branches) + " END"
