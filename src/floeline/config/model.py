"""The typed, frozen result of reading a connector config (ConnectorConfig and its
parts), and the two small types the reading reports with: Problem and KeyUse. Plain
data: reading and checking the settings is config/reader.py's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from floeline.config.changes import ChangeSettings
from floeline.config.decoding import DecodeSpec
from floeline.config.kafka_security import KafkaSecurity
from floeline.config.kinesis import KinesisSettings
from floeline.config.locations import S3Settings
from floeline.naming import TopicTableMap
from floeline.retry import RetryPolicy


@dataclass(frozen=True)
class MetadataFlags:
    """Which RECORD_METADATA fields to fill (snowflake.metadata.*)."""

    all_: bool = True  # snowflake.metadata.all: false drops RECORD_METADATA content entirely
    topic: bool = True  # snowflake.metadata.topic
    offset_and_partition: bool = True  # snowflake.metadata.offset.and.partition
    createtime: bool = True  # snowflake.metadata.createtime: the record's Kafka timestamp
    connector_push_time: bool = True  # snowflake.streaming.metadata.connectorPushTime


@dataclass(frozen=True)
class MetricsSettings:
    """floeline.metrics.*: the Prometheus and probe endpoints (ops/http.py), off
    without a port."""

    port: int | None = None  # floeline.metrics.port: serve /metrics, /healthz, /ready (0: any free port)
    host: str = "0.0.0.0"  # floeline.metrics.host: the address to listen on (all, as exporters do)
    # floeline.metrics.ready.max.lag: /ready answers 200 while the records behind the
    # source's head are at most this many (default buffer.count.records: one batch's worth)
    ready_max_lag: int = 10000


@dataclass(frozen=True)
class TableSettings:
    """How the connector makes the tables it creates (warehouse/tables.py)."""

    # floeline.variant.storage: semi-structured columns (RECORD_METADATA, RECORD_CONTENT,
    # VARIANT columns) as JSON text that every Delta reader handles ("json", the default
    # but with SNOWPIPE; floeline sql still reads col:path on them), or as Delta VARIANT
    # ("variant": Spark and DuckDB read it, delta-rs and polars do not).
    variant_storage: Literal["variant", "json"] = "json"
    # floeline.table.auto.compact: create tables with Delta's auto compaction on
    # (delta.autoOptimize.autoCompact), so many small commits do not leave many small files.
    auto_compact: bool = False
    # floeline.schema.evolution.max.new.columns: the most columns one batch's new keys may
    # add to a table (or create it with). Snowflake's COPY evolves at most 100 columns per
    # load; here the bound keeps a record with 100,000 keys from making a table no engine
    # can plan: past it no column is added and the records holding those keys are row
    # errors (DLQ / error table) that say so.
    max_new_columns: int = 1000
    # snowflake.autocreate.table.type=iceberg (connector 4.1+) or
    # snowflake.streaming.iceberg.enabled=true (3.x): new tables are Delta tables whose
    # Iceberg metadata floeline writes after each batch (warehouse/iceberg_mirror.py), which
    # Iceberg readers open; their semi-structured columns are JSON text and
    # RECORD_METADATA is structured.
    iceberg: bool = False
    # snowflake.feature.structured.record.metadata.enabled: RECORD_METADATA is a struct
    # with the fields of Snowflake's Iceberg RECORD_METADATA OBJECT
    # (records/metadata.STRUCTURED_METADATA_TYPES), not a VARIANT; on with iceberg.
    structured_metadata: bool = False


@dataclass(frozen=True)
class ConnectorConfig:
    """One connector's settings, validated. Built by config_from_dict / load_config."""

    name: str  # name: the connector's unique name (checkpoints and offsets are kept per name)
    source: Literal["kafka", "kinesis"]  # floeline.source: what the connector reads (default kafka)
    topics: tuple[str, ...]  # topics: the topics to read; empty when topics_regex is used
    topics_regex: str | None  # topics.regex: read every topic that fully matches
    bootstrap_servers: str  # bootstrap.servers (or consumer.override.bootstrap.servers)
    topic_map: TopicTableMap | None  # snowflake.topic2table.map; None: derive names from topics
    database: str  # snowflake.database.name, normalized (unquoted -> uppercase)
    schema: str  # snowflake.schema.name, normalized
    flush_time_s: int  # buffer.flush.time: seconds between commits (micro-batch trigger); 0: back to back
    count_records: int  # buffer.count.records: records per partition before a commit
    size_bytes: int  # buffer.size.bytes: bytes per partition before a commit
    metadata: MetadataFlags  # snowflake.metadata.* flags
    null_values: Literal["DEFAULT", "IGNORE"]  # behavior.on.null.values: tombstones -> {} or skipped
    schematization: bool  # snowflake.enable.schematization: first-level keys -> columns
    # snowflake.ingestion.method: SNOWPIPE_STREAMING (default: rows straight into the
    # table) or SNOWPIPE (the 2.x/3.x file-based method: gzip JSON files in an internal
    # stage per connector and table, loaded by the table's pipe; RECORD_METADATA and
    # RECORD_CONTENT only, so schematization is off and asking for it is an error).
    ingestion_method: Literal["SNOWPIPE_STREAMING", "SNOWPIPE"]
    errors_tolerance: Literal["none", "all"]  # errors.tolerance: stop on a bad record, or route it
    errors_log_enable: bool  # errors.log.enable: log each tolerated error
    errors_log_include_messages: bool  # errors.log.include.messages: log the record's key/value too
    dlq_topic: str | None  # errors.deadletterqueue.topic.name: where bad records go (with "all")
    dlq_replication_factor: int  # errors.deadletterqueue.topic.replication.factor (-1: broker default)
    # errors.deadletterqueue.context.headers.enable: add the __connect.errors.* headers.
    # Default true (Kafka Connect's is false): a DLQ record without its reason is hard to act on.
    dlq_context_headers: bool
    # connector.class: which Snowflake connector the config was written for, "4" (the
    # high-performance SnowflakeStreamingSinkConnector), "3" (SnowflakeSinkConnector) or
    # None (not given). It sets the defaults of the three settings below as that
    # connector has them; without it floeline follows the connector's documentation.
    connector_line: Literal["3", "4"] | None
    # snowflake.compatibility.enable.autogenerated.table.name.sanitization: a topic's
    # table name is sanitized and uppercased (3.x, documented; default without a class),
    # or the topic's name as it is, case kept (the 4.x connector's default).
    table_name_sanitization: bool
    # snowflake.compatibility.enable.column.identifier.normalization: a JSON key names
    # its column as a SQL identifier would ("c" -> c, c -> C; 3.x always), or keys match
    # columns case-insensitively as they are (the 4.x default, and without a class).
    column_normalization: bool
    # How a JSON string lands in a BINARY column: BASE64 (the 4.x default pipe's format,
    # and how the connector writes bytes), or HEX with snowflake.validation=client_side
    # (the 4.x compatibility mode) and for the 3.x connector.
    binary_format: Literal["BASE64", "HEX"]
    # snowflake.validation: who validates a record, the connector (client_side: the 3.x
    # connector's default and the 4.x compatibility mode) or Snowflake's server
    # (server_side: the 4.x default). It sets the conversion rules where they differ
    # (records/values_to_columns.Rules) and how schema evolution is decided: client_side
    # reads ENABLE_SCHEMA_EVOLUTION when the connector opens a table and rejects records
    # with keys that have no column when it is off; server_side follows the table's
    # current setting and ignores such keys when it is off.
    validation: Literal["server_side", "client_side"]
    key_converter: str | None  # key.converter class name, as written
    value_converter: str | None  # value.converter class name, as written
    warehouse: str  # floeline.warehouse: root of <DATABASE>/<SCHEMA>/<TABLE> (path or s3a://)
    checkpoint_dir: str  # floeline.checkpoint.dir: Spark checkpoint of this connector
    spark_master: str  # floeline.spark.master
    ignored_keys: tuple[str, ...]  # keys given that floeline accepts but does not act on
    raw: Mapping[str, str] = field(compare=False, repr=False)  # all settings, read-only (holds secrets)
    # key/value/header converters and transforms, read once (config/decoding.py); what the
    # decode stage ships to executors instead of the settings
    decoding: DecodeSpec = DecodeSpec()
    kinesis: KinesisSettings | None = None  # floeline.source=kinesis: its kinesis.* / aws.* settings
    metrics: MetricsSettings = MetricsSettings()  # floeline.metrics.*
    table_settings: TableSettings = TableSettings()  # floeline.variant.storage, floeline.table.*
    # errors.retry.timeout / errors.retry.delay.max.ms (ms, Kafka Connect's names): how long
    # transient errors of Kafka, the registry, the DLQ and the query are retried (retry.py).
    retry: RetryPolicy = RetryPolicy()
    # security.protocol, sasl.*, ssl.truststore.*: how every Kafka client connects
    kafka_security: KafkaSecurity = KafkaSecurity()
    # floeline.warehouse.s3.*: how to reach an s3a:// warehouse or checkpoint (None when
    # both are local); holds secrets, so it is left out of repr.
    warehouse_s3: S3Settings | None = field(default=None, repr=False)
    # floeline.kafka.reader: how micro-batches read Kafka: `grouped` (default: floeline's
    # reader, a consumer per task assigned several partitions, so many partitions cost
    # less per batch; Spark's source when its jar is not built) or `spark` (Spark's Kafka
    # source, a consumer per topic partition).
    kafka_reader: Literal["spark", "grouped"] = "grouped"
    # floeline.kafka.fail.on.data.loss (Spark's failOnDataLoss): a topic deleted and
    # created again, a partition gone or ending before its committed offset, records
    # deleted before they were read stop the connector (true), or the connector reads
    # such partitions from their first record and records that in the tables (false;
    # sources/kafka_changes.py, ingest/source_changes.py).
    fail_on_data_loss: bool = True
    # floeline.warehouse.owner.timeout.ms: a table owner that has not renewed its record
    # for this long is gone (warehouse/owners.py; tables on S3 only).
    owner_timeout_ms: int = 60000
    # insert.mode, primary.key.*, delete.enabled: appends, or upserts and deletes by key
    # (config/changes.py; change data capture)
    changes: ChangeSettings = ChangeSettings()


class Problem(str):
    """One problem of a config: its message (a str, as before) and `key`, the setting
    it is about, so the worker's validate endpoint can list problems per key. `key` is
    None for a problem found by a part that only says it in words (decoding, Kafka
    security, Kinesis); its message names the key."""

    key: str | None

    def __new__(cls, key: str | None, message: str) -> Problem:
        problem = super().__new__(cls, message)
        problem.key = key
        return problem

    def __getnewargs__(self):  # pickle and copy rebuild it with its key
        return self.key, str(self)


@dataclass(frozen=True)
class KeyUse:
    """How the config reads one key: its type (Kafka ConfigDef's names: STRING, BOOLEAN,
    INT), its default as text (None: none) and, for a choice, the accepted values."""

    type: str
    default: str | None
    accepted: tuple[str, ...] = ()

