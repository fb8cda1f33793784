"""RECORD_METADATA: where each record came from, as a VARIANT object, with the fields
and names of Snowflake's connectors.

Kafka (Snowflake's Kafka connector): topic, partition, offset, CreateTime or
LogAppendTime, SnowflakeConnectorPushTime, key, headers. Kinesis: stream, shardId,
sequenceNumber, subSequenceNumber (KPL-aggregated records only), partitionKey,
approximateArrivalTimestamp, SnowflakeConnectorPushTime. The snowflake.metadata.*
flags gate them: `topic` the topic / stream, `offset.and.partition` the partition and
offset / shard and sequence numbers, `createtime` the record's timestamp.

Each builder is a Spark SQL expression over the normalized source columns (key,
headers, timestamp and the `source` struct, see sources/base.py). Snowflake omits a
field a record lacks (no key, no headers) and names the timestamp after its type, so
the expression picks one of a few struct shapes per record (CASE) and turns it into a
VARIANT with to_variant_object: measured 4x cheaper than building JSON text and
parsing it back. The one-pass batches build a Kafka record without headers with
floeline's JVM function instead (resources/java/KafkaMetadata.java, the same bytes): the
struct's cast was 5-6 % of their task time.

For a RECORD_METADATA stored as JSON text (floeline.variant.storage=json, the default)
the builders take `as_json`: the same struct shapes through to_json. Spark's to_json of
a VARIANT costs ten times the struct's (measured: 10.3-11.4 s against 0.9-1.4 s for 2M
rows), which made the default table write at 0.71 of the VARIANT table's rate."""

from __future__ import annotations

from itertools import product
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from floeline.config import MetadataFlags


# Kafka's TimestampType ids as the Spark Kafka source reports them.
CREATE_TIME, LOG_APPEND_TIME = 0, 1
_EMPTY = "parse_json('{}')"

# More fields for a builder (`extra`): per field, its alternatives as `object_sql` takes
# them. Made by `field` and `field_unless_null`.
Extra = Sequence[list[tuple[str | None, str]]]


def field(name: str, value_sql: str) -> list[tuple[str | None, str]]:
    """An extra field every record has (`value_sql` is never NULL)."""
    return [(f"'{name}', {value_sql}", "true")]


def field_unless_null(name: str, value_sql: str) -> list[tuple[str | None, str]]:
    """An extra field a record has when `value_sql` is not NULL (else it is left out)."""
    return [(f"'{name}', {value_sql}", f"{value_sql} IS NOT NULL"), (None, f"{value_sql} IS NULL")]


def _push_sql(push_time_ms: int | str) -> str:
    """`push_time_ms` is the epoch ms, or a BIGINT SQL expression giving it (jvm.py's
    push-time function keeps the generated code the same from batch to batch)."""
    return push_time_ms if isinstance(push_time_ms, str) else f"CAST({int(push_time_ms)} AS BIGINT)"


def object_sql(options: Extra, as_json: bool = False) -> str:
    """CASE over every combination of optional fields: `options` holds, per optional
    part, its alternatives as (fields SQL or None, condition). A VARIANT object, or its
    JSON text with `as_json`."""
    branches = []
    for choice in product(*options):
        fields = [f for f, _c in choice if f]
        condition = " AND ".join(c for _f, c in choice)
        if as_json:
            # a NULL field stays (null), as in the VARIANT
            value = (f"to_json(named_struct({', '.join(fields)}), map('ignoreNullFields', 'false'))"
                     if fields else "'{}'")
        else:
            value = f"to_variant_object(named_struct({', '.join(fields)}))" if fields else _EMPTY
        branches.append(f"WHEN {condition} THEN {value}")
    return "CASE " + " ".join(branches) + " END"


def null_metadata_sql(as_json: bool = False) -> str:
    """RECORD_METADATA of snowflake.metadata.all=false."""
    return "CAST(NULL AS STRING)" if as_json else "CAST(NULL AS VARIANT)"


def kafka_metadata_sql(flags: MetadataFlags, push_time_ms: int | str, key_json: str | None = None,
                       headers_json: str | None = None, extra: Extra = (),
                       function: str | None = None, as_json: bool = False) -> str:
    """RECORD_METADATA of a Kafka record (NULL when snowflake.metadata.all=false).
    `key_json` / `headers_json` name columns holding the key / the headers as JSON text
    (converted in Python: a JSON or Avro key as its object, headers by header.converter);
    without them the key and the header values are their UTF-8 text. `extra`: more
    fields (a change event's op and ts_ms). `function`: the JVM function that builds the
    same bytes for a record without headers (jvm.ensure_kafka_metadata for `flags`),
    used where none of the others is given; the SQL stays for the other records.
    `as_json`: the JSON text instead of the VARIANT (the function is not used)."""
    if not flags.all_:
        return null_metadata_sql(as_json)
    sql = _kafka_metadata_sql(flags, push_time_ms, key_json, headers_json, extra, as_json)
    if function is None or key_json or headers_json or extra or as_json:
        return sql
    # NULL from the function (a NULL timestamp type, a key past its size) means the SQL.
    built = (f"{function}(CAST(source.topic AS BINARY), source.partition, source.offset, "
             f"source.timestampType, unix_millis(timestamp), {_push_sql(push_time_ms)}, key)")
    return f"coalesce(CASE WHEN coalesce(size(headers), 0) = 0 THEN {built} END, {sql})"


def _kafka_metadata_sql(flags: MetadataFlags, push_time_ms: int | str, key_json: str | None,
                        headers_json: str | None, extra: Extra, as_json: bool) -> str:
    base = []
    if flags.topic:
        base.append("'topic', source.topic")
    if flags.offset_and_partition:
        base += ["'partition', source.partition", "'offset', source.offset"]
    if flags.createtime:
        kind = "source.timestampType"
        times = [("'CreateTime', unix_millis(timestamp)", f"{kind} = {CREATE_TIME}"),
                 ("'LogAppendTime', unix_millis(timestamp)", f"{kind} = {LOG_APPEND_TIME}"),
                 (None, f"{kind} NOT IN ({CREATE_TIME}, {LOG_APPEND_TIME})")]
    else:
        times = [(None, "true")]
    push = (f"'SnowflakeConnectorPushTime', {_push_sql(push_time_ms)}"
            if flags.connector_push_time else None)
    if key_json:
        key = [(f"'key', parse_json({key_json})", f"{key_json} IS NOT NULL"), (None, f"{key_json} IS NULL")]
    else:
        key = [("'key', CAST(key AS STRING)", "key IS NOT NULL"), (None, "key IS NULL")]
    if headers_json:
        headers = [(f"'headers', parse_json({headers_json})", f"{headers_json} IS NOT NULL"),
                   (None, f"{headers_json} IS NULL")]
    else:
        headers = [("'headers', map_from_entries(transform(headers, "
                    "h -> struct(h.key, CAST(h.value AS STRING))))", "coalesce(size(headers), 0) > 0"),
                   (None, "coalesce(size(headers), 0) = 0")]
    # Field order as Snowflake's: coordinates, time, push time, key, headers.
    options = [[(_join(*base, time_field), condition) for time_field, condition in times]]
    if push:
        options.append([(push, "true")])
    return object_sql(options + [key, headers, *extra], as_json)


def kinesis_metadata_sql(flags: MetadataFlags, push_time_ms: int | str, extra: Extra = (),
                         as_json: bool = False) -> str:
    """RECORD_METADATA of a Kinesis record (NULL when snowflake.metadata.all=false);
    `extra`: more fields; `as_json`: its JSON text."""
    if not flags.all_:
        return null_metadata_sql(as_json)
    fields = []
    if flags.topic:
        fields.append("'stream', source.stream")
    if flags.offset_and_partition:
        fields += ["'shardId', source.shardId", "'sequenceNumber', source.sequenceNumber"]
    fields.append("'partitionKey', source.partitionKey")
    if flags.createtime:
        fields.append("'approximateArrivalTimestamp', unix_millis(timestamp)")
    if flags.connector_push_time:
        fields.append(f"'SnowflakeConnectorPushTime', {_push_sql(push_time_ms)}")
    options = [[(", ".join(fields), "true")]]
    if flags.offset_and_partition:  # only KPL-aggregated records have a sub-sequence number
        options.append([("'subSequenceNumber', source.subSequenceNumber",
                         "source.subSequenceNumber IS NOT NULL"),
                        (None, "source.subSequenceNumber IS NULL")])
    return object_sql(options + list(extra), as_json)


def _join(*parts: str | None) -> str | None:
    text = ", ".join(p for p in parts if p)
    return text or None


# snowflake.feature.structured.record.metadata.enabled (and Iceberg tables): RECORD_METADATA
# as a struct instead of a VARIANT, with the fields and types of the OBJECT Snowflake's
# Kafka connector gives an Iceberg table's RECORD_METADATA (offset, topic, partition, key,
# schema_id, key_schema_id, CreateTime, LogAppendTime, SnowflakeConnectorPushTime,
# headers); every reader, Iceberg's included, reads its fields by name. A field a record
# lacks is NULL (floeline records no registry schema ids there: always NULL). A Kinesis
# connector's struct holds the Kinesis fields of kinesis_metadata_sql.
STRUCTURED_METADATA_FIELDS = {
    "kafka": (("offset", "bigint"), ("topic", "string"), ("partition", "int"), ("key", "string"),
              ("schema_id", "int"), ("key_schema_id", "int"), ("CreateTime", "bigint"),
              ("LogAppendTime", "bigint"), ("SnowflakeConnectorPushTime", "bigint"),
              ("headers", "map<string,string>")),
    "kinesis": (("stream", "string"), ("shardId", "string"), ("sequenceNumber", "string"),
                ("subSequenceNumber", "bigint"), ("partitionKey", "string"),
                ("approximateArrivalTimestamp", "bigint"), ("SnowflakeConnectorPushTime", "bigint")),
}


def structured_metadata_type(source: str) -> str:
    """The Spark type of a structured RECORD_METADATA for a `source` connector."""
    fields = STRUCTURED_METADATA_FIELDS[source]
    return "struct<" + ",".join(f"`{name}`:{kind}" for name, kind in fields) + ">"


def metadata_value_sql(column_type: str, meta: str = "_meta") -> str:
    """RECORD_METADATA for a column of `column_type` from the VARIANT metadata `meta`:
    as it is (variant), each field of a structured column read by name (a key or a
    header value that is an object becomes its JSON text, as Snowflake's STRING field
    holds it), or its JSON text (a STRING column: floeline.variant.storage=json)."""
    if column_type == "variant":
        return f"CAST({meta} AS variant)"
    if column_type.startswith("struct<"):
        parts = ", ".join(f"'{name}', try_variant_get({meta}, '$.{name}', '{kind}')"
                          for name, kind in struct_fields(column_type))
        return f"CASE WHEN {meta} IS NOT NULL THEN named_struct({parts}) END"
    return f"CAST(to_json({meta}) AS {column_type})"


def struct_fields(struct_type: str) -> list[tuple[str, str]]:
    """(name, type) of each field of a Spark struct type as simpleString() or
    structured_metadata_type writes it (`struct<a:int,m:map<string,string>>`)."""
    body, fields, depth, start = struct_type[len("struct<"):-1], [], 0, 0
    for i, char in enumerate(body + ","):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            name, kind = body[start:i].split(":", 1)
            fields.append((name.strip("`"), kind))
            start = i + 1
    return fields
