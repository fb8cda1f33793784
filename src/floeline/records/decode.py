"""The decode stage in Spark: source rows (the normalized layout, sources/base.py) ->
converted, transformed records as JSON text, in Python workers over Arrow batches
(DataFrame.mapInArrow).

Configs whose records are plain JSON with text keys and no transforms never come here
(`needs_python_decode` is False): the connector keeps its Spark SQL path on the raw
bytes. Everything else — the Avro / Protobuf / JSON Schema / String / bytes converters,
the JsonConverter envelope, a JSON key, Kafka Connect transforms — runs per record in
Python, in Kafka Connect's order:

  key bytes     -> key converter    -> Record.key
  value bytes   -> value converter  -> Record.value (+ schema_id)
  header bytes  -> header converter -> Record.headers (header_rules.py)
  Record        -> transforms (SMTs) -> Record | None (None: dropped by a filter)
  Record        -> to_json_text; RECORD_METADATA's key and headers as JSON

`decode_frame` keeps every input row and every input column unchanged and adds:

  _route_topic   string   the route (topic / stream) after transforms (RegexRouter),
                          else the route
  _key_json      string   the (transformed) key for RECORD_METADATA.key as JSON (a string
                          key a JSON string, a struct an object); NULL: no key
  _headers_json  string   the (transformed) headers for RECORD_METADATA.headers as a JSON
                          object; NULL: no headers
  _value_json    string   the (transformed) value as JSON text; NULL: a tombstone (or a
                          dropped / failed record)
  _schema_id     int      the value's schema registry id, when it had one
  _skip          boolean  dropped by a transform (Filter); not an error
  _decode_error  string   why the record could not be decoded; NULL when fine
  _decode_stage  string   'key converter' | 'value converter' | 'header converter' |
                          'transform'
  _error_class   string   the exception's class name (for the DLQ's headers)
  _error_trace   string   the last frames of the traceback
  _batch_failure string   NULL when the error is the record's own fault; else it fails
                          the whole batch: 'transient' (the schema registry cannot be
                          reached: the connector retries) or 'terminal' (its retry
                          bound spent, credentials refused): errors.batch_failure_kind
  _declared_types string  the columns the value's schema declares, as a JSON object
                          {field: Spark type} (JsonConverter's envelope, Avro; kept
                          through transforms that say what they do to them, such as
                          ExtractNewRecordState); NULL: the values' types decide

A record that fails never fails the Spark job: the error is in its row.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from floeline.config.decoding import JSON_CONVERTER, STRING_CONVERTER, DecodeSpec, TransformChainSpec
from floeline.errors import batch_failure_kind
from floeline.records.converters.base import KEY_STAGE, VALUE_STAGE
from floeline.records.converters.factory import converter_for
from floeline.records.header_rules import HEADER_STAGE, header_rules, headers_json
from floeline.records.json_text import to_json_text
from floeline.records.record import Record
from floeline.records.transforms.chain import TransformChain, chain_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from floeline.config import ConnectorConfig

TRANSFORM_STAGE = "transform"
DECODE_COLUMNS = (
    ("_route_topic", "string"), ("_key_json", "string"), ("_headers_json", "string"),
    ("_value_json", "string"),
    ("_schema_id", "int"), ("_skip", "boolean"), ("_decode_error", "string"),
    ("_decode_stage", "string"), ("_error_class", "string"), ("_error_trace", "string"),
    ("_batch_failure", "string"), ("_declared_types", "string"),
)
# How a change event's after-image fields are named in _declared_types (declared_columns)
AFTER_IMAGE_PREFIX = "after."
_TRACE_FRAMES = 4
_TRACE_CHARS = 2000


def needs_python_decode(config: ConnectorConfig) -> bool:
    """False when Spark SQL can read the records as they are: the value converter is
    JSON without the schema envelope (or unset), the key converter is String or unset
    (RECORD_METADATA.key is the key's text; a JSON key is stored as its JSON value),
    and there are no transforms."""
    spec = config.decoding
    value_plain = spec.value.class_name in (None, JSON_CONVERTER) and not spec.value.json_schemas_enabled
    key_plain = spec.key.class_name in (None, STRING_CONVERTER)
    return not (value_plain and key_plain and spec.transforms.empty)


def transform_chain_for(spec: TransformChainSpec) -> TransformChain | None:
    """The connector's transform chain, or None without transforms. Built on the driver
    (to report config errors early) and once per Spark task."""
    return None if spec.empty else chain_for(spec)


def decode_frame(df: DataFrame, config: ConnectorConfig) -> DataFrame:
    """`df` (the normalized source columns: route, key, value, headers, timestamp and
    the `source` struct, whose `partition`, `offset` and `timestampType` fields, when
    the source has them, are the Kafka coordinates transforms see) with the decode
    columns added; same rows, same order within each partition. Streaming-safe: one
    mapInArrow, no action."""
    from pyspark.sql.types import BooleanType, IntegerType, StringType, StructField, StructType

    # only the decode spec travels to the executors (the settings hold secrets)
    spec = config.decoding
    transform_chain_for(spec.transforms)  # config errors surface here, on the driver
    types = {"string": StringType(), "int": IntegerType(), "boolean": BooleanType()}
    schema = StructType(list(df.schema.fields)
                        + [StructField(name, types[t], True) for name, t in DECODE_COLUMNS])
    columns = list(df.columns)
    _use_this_python(df.sparkSession)

    def run(batches):
        return decode_batches(batches, spec, columns)

    return df.mapInArrow(run, schema)


def with_converted_headers(df: DataFrame, config: ConnectorConfig, check: str | None) -> DataFrame:
    """`df` (normalized columns) with `_headers_json` (RECORD_METADATA.headers as JSON
    text) and `_headers_error` (why the header converter rejected a header), for configs
    whose values Spark SQL reads (no decode stage). Headers SQL can write as their text
    are written so; only those `check` (SQL) finds are converted in Python (a UDF over
    the headers alone); None: all are written as text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    rules = header_rules(config.decoding.headers)
    if check is None:
        return df.selectExpr("*", f"{rules.text_headers_json_sql()} AS _headers_json",
                             "CAST(NULL AS STRING) AS _headers_error")
    _use_this_python(df.sparkSession)

    def convert(headers):
        if headers is None:
            return None
        return headers_json(rules, [(h["key"], h["value"]) for h in headers])

    udf = F.udf(convert, StructType([StructField("json", StringType()),
                                     StructField("error", StringType())]), useArrow=True)
    converted = df.withColumn("_h", udf(F.expr(f"CASE WHEN {check} THEN headers END")))
    return converted.selectExpr(
        *df.columns,
        f"CASE WHEN _h IS NULL THEN {rules.text_headers_json_sql()} ELSE _h.json END AS _headers_json",
        "_h.error AS _headers_error")


def _use_this_python(spark) -> None:
    """Local Spark runs Python workers with $PYSPARK_PYTHON, else `python3` from PATH,
    which may lack floeline and its converters' packages: when PYSPARK_PYTHON is unset
    and the master is local, the workers use this interpreter. (Best done where the
    session is built; harmless when it already is.)"""
    context = spark.sparkContext
    if "PYSPARK_PYTHON" not in os.environ and context.master.startswith("local"):
        context.pythonExec = sys.executable


class RecordDecoder:
    """Converters, header rules and transform chain of one connector, built once per task."""

    def __init__(self, spec: DecodeSpec, registry=None):
        self.key = converter_for(spec.key, registry, policy=spec.registry_retry)
        self.value = converter_for(spec.value, registry, policy=spec.registry_retry)
        self.headers = header_rules(spec.headers)
        self.chain = transform_chain_for(spec.transforms)
        self._declared_cache: dict[int, tuple[dict, str]] = {}

    def decode(self, topic: str, partition: int, offset: int, timestamp_ms: int | None,
               timestamp_type: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes | None]]) -> tuple:
        """One record -> the decode columns' values, in DECODE_COLUMNS order."""
        stage = KEY_STAGE
        schema_id = None
        try:
            key_value = self.key.convert(key).value
            stage = VALUE_STAGE
            converted = self.value.convert(value)
            schema_id = converted.schema_id
            stage = HEADER_STAGE
            converted_headers = [(name, self.headers.convert(name, data)) for name, data in headers]
            record = Record(topic, partition, offset, timestamp_ms, timestamp_type,
                            key=key_value, value=converted.value, headers=converted_headers,
                            schema_id=schema_id, field_types=converted.field_types)
            if self.chain is not None:
                stage = TRANSFORM_STAGE
                out = self.chain.apply(record)
                if out is None:
                    return (topic, None, None, None, schema_id, True, None, None, None, None, None, None)
                record = out
            stage = VALUE_STAGE  # rendering the value as JSON text
            value_json = None if record.value is None else to_json_text(record.value)
            stage = KEY_STAGE
            key_json = None if record.key is None else to_json_text(record.key)
            stage = HEADER_STAGE
            headers_json = self.headers.render(record.headers)
            return (record.topic, key_json, headers_json, value_json, schema_id, False,
                    None, None, None, None, None, self._declared(record))
        except Exception as exc:  # noqa: BLE001 - every record error is reported in its row
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            stage = getattr(exc, "stage", None) or stage
            trace = "".join(traceback.format_exception(exc, limit=-_TRACE_FRAMES))
            return (topic, None, None, None, schema_id, False, reason, stage, type(exc).__name__,
                    trace[-_TRACE_CHARS:], batch_failure_kind(exc), None)


    def _declared(self, record: Record) -> str | None:
        """_declared_types of a record (the same schema's text is built once)."""
        if record.value is None or record.field_types is None:
            return None
        key = id(record.field_types)
        cached = self._declared_cache.get(key)
        if cached is None or cached[0] is not record.field_types:
            text = json.dumps(declared_columns(record.field_types), separators=(",", ":"))
            if len(self._declared_cache) > 256:
                self._declared_cache.clear()
            cached = self._declared_cache[key] = (record.field_types, text)
        return cached[1]


def declared_columns(field_types: dict) -> dict[str, str]:
    """Top-level field -> column type; for a change event (Debezium's envelope: `op` and
    an `after` record) also its after image's fields as `after.<field>`, the columns an
    upsert (insert.mode=upsert) writes."""
    declared = {name: kind for name, (kind, _) in field_types.items()}
    after = field_types.get("after")
    if "op" in field_types and after is not None and isinstance(after[1], dict):
        declared.update({f"{AFTER_IMAGE_PREFIX}{name}": kind for name, (kind, _) in after[1].items()})
    return declared


def decode_batches(batches: Iterator[Any], spec: DecodeSpec, columns: list[str],
                   registry=None) -> Iterator[Any]:
    """mapInArrow's function: each pyarrow RecordBatch with the decode columns added."""
    import pyarrow as pa

    decoder = RecordDecoder(spec, registry)
    types = {"string": pa.string(), "int": pa.int32(), "boolean": pa.bool_()}
    out_fields = [pa.field(name, types[t]) for name, t in DECODE_COLUMNS]
    for batch in batches:
        n = batch.num_rows
        get = {name: batch.column(name) for name in columns}
        keys = get["key"].to_pylist() if "key" in get else [None] * n
        values = get["value"].to_pylist() if "value" in get else [None] * n
        topics = get["route"].to_pylist()
        partitions = _source_field(get, "partition", n)
        offsets = _source_field(get, "offset", n)
        stamps = _epoch_ms(get["timestamp"]) if "timestamp" in get else [None] * n
        stamp_types = _source_field(get, "timestampType", n)
        headers = get["headers"].to_pylist() if "headers" in get else [None] * n
        rows = [decoder.decode(topics[i], partitions[i], offsets[i], stamps[i],
                               -1 if stamp_types[i] is None else stamp_types[i],
                               keys[i], values[i],
                               [(h["key"], h["value"]) for h in headers[i] or ()])
                for i in range(n)]
        extra = [pa.array([row[j] for row in rows], type=field.type)
                 for j, field in enumerate(out_fields)]
        yield pa.RecordBatch.from_arrays(
            [batch.column(name) for name in columns] + extra,
            schema=pa.schema([batch.schema.field(name) for name in columns] + out_fields))


def _source_field(columns: dict, name: str, n: int) -> list:
    """A field of the `source` struct column per row, or Nones when the source has none."""
    source = columns.get("source")
    if source is None or source.type.get_field_index(name) < 0:
        return [None] * n
    return source.field(name).to_pylist()


def _epoch_ms(column) -> list[int | None]:
    """Arrow timestamps (any unit) -> epoch milliseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unit = column.type.unit if pa.types.is_timestamp(column.type) else "ms"
    as_int = pc.cast(column, pa.int64())
    divisor = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    if divisor is None:
        return [None if v is None else v * 1000 for v in as_int.to_pylist()]
    return [None if v is None else v // divisor for v in as_int.to_pylist()]
