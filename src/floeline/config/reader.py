"""The typed reader: turns a connector's settings into a ConnectorConfig, collecting
every problem (with the key it is about) instead of stopping at the first, so a user
fixes a config in one round. read_config is its entry point.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from floeline import secrets
from floeline.config import kafka_security, kinesis, locations
from floeline.config.changes import read_change_settings
from floeline.config.decoding import listed_aliases, read_decode_spec
from floeline.config.keys import (
    CONNECTOR_CLASSES, DEFAULT_BOOTSTRAP, DEFAULT_SPARK_MASTER, DEFAULT_WAREHOUSE, IGNORED_PREFIXES,
    KNOWN_KEYS, PASSTHROUGH_PREFIXES, SPARK_KAFKA_OPTIONS, closest_key, is_ignored, spark_option_problem,
)
from floeline.config.locations import S3Settings
from floeline.config.model import ConnectorConfig, MetadataFlags, MetricsSettings, Problem, TableSettings
from floeline.errors import ConfigError, NamingError
from floeline.naming import DEFAULT_DATABASE, DEFAULT_SCHEMA, TopicTableMap, normalize_identifier
from floeline.retry import RetryPolicy, policy_from_settings

_TRUE_FALSE = "true, false"
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_INTEGER = re.compile(r"[+-]?[0-9]+")

def read_config(settings: Mapping[str, str]) -> tuple[ConnectorConfig, list[str]]:
    """The config of `settings` and every problem found (Problem when its key is known,
    else a plain message), without raising; the config is only meaningful when there
    is no problem. config_from_dict raises them; the worker lists them per key."""
    secrets.remember_settings(settings)
    reader = Reader(settings)
    return reader.build(), reader.problems



class Reader:
    """Reads typed values out of the settings, collecting problems instead of raising."""

    def __init__(self, settings: Mapping[str, str]):
        self.settings = dict(settings)
        self.problems: list[str] = []

    def problem(self, key: str, message: str) -> None:
        """Note a problem about setting `key`."""
        self.problems.append(Problem(key, message))

    def text(self, key: str, default: str | None = None) -> str | None:
        """The trimmed value (ConfigDef trims too); blank counts as not set."""
        value = self.settings.get(key)
        if value is None or not value.strip():
            return default
        return value.strip()

    def boolean(self, key: str, default: bool) -> bool:
        value = self.text(key)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            self.problem(key, f"{key}={value!r} is not a boolean; accepted values: {_TRUE_FALSE}")
            return default
        return value.lower() == "true"

    def integer(self, key: str, default: int, minimum: int) -> int:
        value = self.text(key)
        if value is None:
            return default
        if not _INTEGER.fullmatch(value):
            self.problem(key, f"{key}={value!r} is not a whole number; accepted values: an integer >= {minimum}")
            return default
        if int(value) < minimum:
            self.problem(key, f"{key}={value} is too small; accepted values: an integer >= {minimum}")
            return default
        return int(value)

    def choice(self, key: str, default: str, accepted: tuple[str, ...]) -> str:
        """A case-insensitive choice, returned spelled as in `accepted`."""
        value = self.text(key)
        if value is None:
            return default
        for option in accepted:
            if value.lower() == option.lower():
                return option
        self.problem(key, f"{key}={value!r} is not valid; accepted values: {', '.join(accepted)}")
        return default

    def identifier(self, key: str, default: str) -> str:
        value = self.text(key)
        if value is None:
            return default
        try:
            return normalize_identifier(value)
        except NamingError as exc:
            self.problem(key, f"{key}: {exc}")
            return default

    def build(self) -> ConnectorConfig:
        self.check_keys()
        name = self.connector_name()
        source = self.choice("floeline.source", "kafka", ("kafka", "kinesis"))
        kinesis_settings = None
        if source == "kafka":
            topics, topics_regex = self.topics()
            self.check_absent(kinesis.KEYS, "a Kafka connector's",
                              "set floeline.source=kinesis to read a Kinesis stream")
        else:
            topics, topics_regex = (), None
            kinesis_settings = kinesis.read_kinesis_settings(self, name)
            self.check_absent({"topics", "topics.regex", "errors.deadletterqueue.topic.name",
                               "snowflake.topic2table.map"}, "a Kinesis connector's",
                              "it reads kinesis.stream.name into a table named after the stream "
                              "and sends bad records to errors.deadletterqueue.stream.name or "
                              "<TABLE>_ERRORS")
        topic_map = self.topic_map()
        dlq_topic = self.text("errors.deadletterqueue.topic.name")
        self.check_dlq_topic(dlq_topic, topics, topics_regex)
        warehouse = self.location("floeline.warehouse", DEFAULT_WAREHOUSE)
        line, sanitization, normalization, validation = self.compatibility()
        method, schematization = self.ingestion_method(source, line)
        if method == "SNOWPIPE" and locations.is_s3(warehouse):
            self.problem("snowflake.ingestion.method", f"snowflake.ingestion.method=SNOWPIPE keeps its staged files in a "
                                 f"local warehouse; floeline.warehouse={warehouse} is on S3: use "
                                 f"SNOWPIPE_STREAMING (the default) or a local warehouse")
        count_records = self.integer("buffer.count.records", 10000, minimum=1)
        retry_policy = self.retry_policy()
        return ConnectorConfig(
            name=name,
            source=source,
            kinesis=kinesis_settings,
            topics=topics,
            topics_regex=topics_regex,
            bootstrap_servers=self.bootstrap_servers(),
            topic_map=topic_map,
            database=self.identifier("snowflake.database.name", DEFAULT_DATABASE),
            schema=self.identifier("snowflake.schema.name", DEFAULT_SCHEMA),
            flush_time_s=self.integer("buffer.flush.time", 10, minimum=0),
            count_records=count_records,
            size_bytes=self.integer("buffer.size.bytes", 20000000, minimum=1),
            metadata=MetadataFlags(
                all_=self.boolean("snowflake.metadata.all", True),
                topic=self.boolean("snowflake.metadata.topic", True),
                offset_and_partition=self.boolean("snowflake.metadata.offset.and.partition", True),
                createtime=self.boolean("snowflake.metadata.createtime", True),
                connector_push_time=self.boolean("snowflake.streaming.metadata.connectorPushTime", True),
            ),
            null_values=self.choice("behavior.on.null.values", "DEFAULT", ("DEFAULT", "IGNORE")),
            ingestion_method=method,
            schematization=schematization,
            errors_tolerance=self.choice("errors.tolerance", "none", ("none", "all")),
            errors_log_enable=self.boolean("errors.log.enable", False),
            errors_log_include_messages=self.boolean("errors.log.include.messages", False),
            dlq_topic=dlq_topic,
            dlq_replication_factor=self.integer("errors.deadletterqueue.topic.replication.factor", 3, minimum=-1),
            dlq_context_headers=self.boolean("errors.deadletterqueue.context.headers.enable", True),
            connector_line=line,
            table_name_sanitization=sanitization,
            column_normalization=normalization,
            binary_format="HEX" if validation == "client_side" else "BASE64",
            validation=validation,
            key_converter=self.text("key.converter"),
            value_converter=self.text("value.converter"),
            warehouse=warehouse,
            checkpoint_dir=self.location("floeline.checkpoint.dir",
                                         locations.join(warehouse, "_checkpoints", name)),
            spark_master=self.text("floeline.spark.master", DEFAULT_SPARK_MASTER),
            ignored_keys=tuple(sorted(k for k in self.settings if is_ignored(k))),
            raw=MappingProxyType(dict(self.settings)),
            decoding=read_decode_spec(self.settings, self.problems, retry_policy),
            metrics=self.metrics(count_records),
            table_settings=self.table_settings(method),
            retry=retry_policy,
            kafka_security=kafka_security.read_security(self.settings, self.problems),
            warehouse_s3=self.warehouse_s3(warehouse),
            owner_timeout_ms=self.integer("floeline.warehouse.owner.timeout.ms", 60000, minimum=1000),
            kafka_reader=self.choice("floeline.kafka.reader", "grouped", ("spark", "grouped")),
            fail_on_data_loss=self.boolean("floeline.kafka.fail.on.data.loss", True),
            changes=read_change_settings(self, schematization, method),
        )

    def metrics(self, count_records: int) -> MetricsSettings:
        port = None
        if self.text("floeline.metrics.port") is not None:
            port = self.integer("floeline.metrics.port", 0, minimum=0)
            if port > 65535:
                self.problem("floeline.metrics.port", f"floeline.metrics.port={port} is not a TCP port; accepted "
                                     f"values: 1-65535, or 0 for any free port")
                port = 0
        return MetricsSettings(
            port=port, host=self.text("floeline.metrics.host", MetricsSettings.host),
            ready_max_lag=self.integer("floeline.metrics.ready.max.lag", count_records, minimum=0))

    def table_settings(self, method: str) -> TableSettings:
        iceberg = self.iceberg_tables()
        storage = self.choice("floeline.variant.storage", "json", ("variant", "json"))
        if iceberg and storage == "variant":
            self.problem("floeline.variant.storage", "floeline.variant.storage=variant with Iceberg tables "
                                 "(snowflake.autocreate.table.type=iceberg / snowflake.streaming.iceberg.enabled): "
                                 "Iceberg readers cannot read Delta VARIANT columns; remove "
                                 "floeline.variant.storage (Iceberg tables store them as JSON text)")
            storage = "json"
        if iceberg and method == "SNOWPIPE":
            self.problem("snowflake.ingestion.method", "Iceberg tables (snowflake.autocreate.table.type=iceberg / "
                                 "snowflake.streaming.iceberg.enabled) need snowflake.ingestion.method="
                                 "SNOWPIPE_STREAMING, as Snowflake's connector does; remove one of the two")
            iceberg = False
        structured = self.boolean("snowflake.feature.structured.record.metadata.enabled", iceberg)
        if structured and method == "SNOWPIPE":
            self.problem("snowflake.feature.structured.record.metadata.enabled",
                         "snowflake.feature.structured.record.metadata.enabled=true needs snowflake.ingestion."
                         "method=SNOWPIPE_STREAMING (the SNOWPIPE method's pipe loads a VARIANT); remove one")
            structured = False
        return TableSettings(storage, self.boolean("floeline.table.auto.compact", False),
                             self.integer("floeline.schema.evolution.max.new.columns",
                                          TableSettings.max_new_columns, minimum=1),
                             iceberg=iceberg, structured_metadata=structured)

    def iceberg_tables(self) -> bool:
        """Whether new tables are Iceberg-readable: snowflake.autocreate.table.type=iceberg
        (the 4.x connector's; `snowflake`, its default, and `none` create plain tables) or
        snowflake.streaming.iceberg.enabled=true (the 3.x connector's)."""
        kind = self.choice("snowflake.autocreate.table.type", "snowflake", ("snowflake", "iceberg", "none"))
        return kind == "iceberg" or self.boolean("snowflake.streaming.iceberg.enabled", False)

    def location(self, key: str, default: str) -> str:
        """A warehouse or checkpoint location: a local path as given, or s3a://bucket/prefix
        (s3:// is taken as s3a://); other schemes are a problem."""
        value = self.text(key, default)
        if not locations.is_s3(value) and "://" not in value:
            return value
        try:
            return locations.normalize(value)
        except ConfigError as exc:
            self.problem(key, f"{key}: {exc}")
            return default

    def warehouse_s3(self, warehouse: str) -> S3Settings | None:
        """floeline.warehouse.s3.* (each defaulting to its AWS environment variable) when
        the warehouse or the checkpoint is on S3."""
        places = (warehouse, self.text("floeline.checkpoint.dir") or "")
        if not any(locations.is_s3(place) for place in places):
            given = sorted(k for k in locations.SETTING_KEYS if self.text(k) is not None)
            if given:
                self.problems.append(f"{', '.join(given)}: set for an S3 warehouse, but "
                                     f"floeline.warehouse={warehouse} is local")
            return None
        try:
            return S3Settings.from_settings(self.settings)
        except ConfigError as exc:
            self.problems.append(str(exc))
            return None

    def retry_policy(self) -> RetryPolicy:
        try:
            return policy_from_settings(self.settings)
        except ConfigError as exc:
            self.problems.append(str(exc))
            return RetryPolicy()

    def ingestion_method(self, source: str, line: str | None = None) -> tuple[str, bool]:
        """snowflake.ingestion.method and whether schematization is on. With SNOWPIPE the
        table is RECORD_METADATA + RECORD_CONTENT: schematization defaults to off, and
        setting it to true is an error, as in Snowflake's connector ("Schematization is
        only available with SNOWPIPE_STREAMING"). A 3.x config (`line` "3") gets the 3.x
        connector's defaults: SNOWPIPE, and schematization off with SNOWPIPE_STREAMING."""
        method = self.choice("snowflake.ingestion.method",
                             "SNOWPIPE" if line == "3" and source == "kafka" else "SNOWPIPE_STREAMING",
                             ("SNOWPIPE_STREAMING", "SNOWPIPE"))
        if method != "SNOWPIPE":
            return method, self.boolean("snowflake.enable.schematization", line != "3")
        if source != "kafka":
            self.problem("snowflake.ingestion.method", "snowflake.ingestion.method=SNOWPIPE is a Kafka connector setting; "
                                 "a Kinesis connector streams rows (remove the setting)")
        if self.boolean("snowflake.enable.schematization", False):
            self.problem("snowflake.enable.schematization", "snowflake.enable.schematization=true needs snowflake.ingestion.method="
                                 "SNOWPIPE_STREAMING (schematization is only available with Snowpipe "
                                 "Streaming); remove one of the two settings")
        return method, False

    def compatibility(self) -> tuple[str | None, bool, bool, str]:
        """The connector line (connector.class) and the settings whose defaults follow
        it: table-name sanitization, column-identifier normalization, validation.
        A setting given explicitly wins over the line's default."""
        cls = self.text("connector.class")
        line = CONNECTOR_CLASSES.get(cls) if cls else None
        if cls and line is None:
            self.problem("connector.class",
                f"connector.class={cls!r} is not a Snowflake sink connector; accepted values: "
                f"{', '.join(CONNECTOR_CLASSES)} (or leave it out)")
        sanitization = self.boolean(
            "snowflake.compatibility.enable.autogenerated.table.name.sanitization", line != "4")
        normalization = self.boolean(
            "snowflake.compatibility.enable.column.identifier.normalization", line == "3")
        validation = self.choice("snowflake.validation", "client_side" if line == "3" else "server_side",
                                 ("server_side", "client_side"))
        return line, sanitization, normalization, validation

    def check_absent(self, keys, whose: str, hint: str) -> None:
        """Settings that belong to another source are mistakes, not silently unused."""
        for key in sorted(k for k in keys if self.text(k) is not None):
            self.problem(key, f"{key} is not one of {whose} settings; {hint}")

    def check_keys(self) -> None:
        """Unknown keys (with the closest known key) and SMT aliases that do not add up."""
        for key in self.settings:
            if key in KNOWN_KEYS or key.startswith(PASSTHROUGH_PREFIXES + IGNORED_PREFIXES):
                continue
            if key.lower() in SPARK_KAFKA_OPTIONS:
                self.problem(key, spark_option_problem(key))
                continue
            hint = f" (did you mean {closest_key(key)!r}?)" if closest_key(key) else ""
            self.problem(key, f"unknown setting {key!r}{hint}")
        for family in ("transforms", "predicates"):
            self.check_aliases(family)
        if (self.text("snowflake.topic2table.map.regex.replacement") or "").lower() == "true":
            self.problem("snowflake.topic2table.map.regex.replacement",
                "snowflake.topic2table.map.regex.replacement=true ($1 group references in table names) "
                "is not supported by floeline; remove it and list the tables explicitly")

    def check_aliases(self, family: str) -> None:
        """Every `transforms.<alias>.*` key must belong to a listed alias (Kafka Connect
        would silently skip it). The aliases themselves are read in config/decoding.py."""
        aliases = listed_aliases(self.settings, family)
        for key in self.settings:
            if key.startswith(family + ".") and not any(key.startswith(f"{family}.{a}.") for a in aliases):
                listed = ", ".join(aliases) or "nothing"
                self.problem(key, f"setting {key!r} belongs to no alias listed in {family} (it lists: {listed})")

    def connector_name(self) -> str:
        name = self.text("name")
        if name is None:
            self.problem("name", "missing required setting 'name' (the connector's unique name)")
            return ""
        if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
            self.problem("name", f"name={name!r} contains control characters")
        elif "/" in name or "\\" in name or name in (".", ".."):
            self.problem("name", f"name={name!r}: the connector's name is its checkpoint's folder "
                                 f"(<warehouse>/_checkpoints/<name>); it cannot hold / or \\ or be . or ..")
        return name

    def topics(self) -> tuple[tuple[str, ...], str | None]:
        """Exactly one of topics / topics.regex, as Kafka Connect requires for a sink."""
        listed, regex = self.text("topics"), self.text("topics.regex")
        if listed is not None and regex is not None:
            self.problem("topics", "topics and topics.regex are both set; keep exactly one of them")
        elif listed is None and regex is None:
            self.problem("topics", "missing required setting: one of 'topics' (a comma-separated list) or 'topics.regex'")
        topics: tuple[str, ...] = ()
        if listed is not None:
            topics = tuple(t.strip() for t in listed.split(","))
            for topic in topics:
                if not _TOPIC_NAME.fullmatch(topic):
                    self.problem("topics",
                        f"topics: {topic!r} is not a valid Kafka topic name (1-249 of letters, digits, '.', '_', '-')")
            for dup in sorted({t for t in topics if topics.count(t) > 1}):
                self.problem("topics", f"topics lists {dup!r} more than once")
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                self.problem("topics.regex", f"topics.regex={regex!r} is not a valid regular expression ({exc})")
        return topics, regex

    def topic_map(self) -> TopicTableMap | None:
        text = self.settings.get("snowflake.topic2table.map")
        if text is None or not text.strip():
            return None
        try:
            return TopicTableMap.parse(text)  # untrimmed, so error positions match the value
        except NamingError as exc:
            self.problem("snowflake.topic2table.map", str(exc))
            return None

    def check_dlq_topic(self, dlq: str | None, topics: tuple[str, ...], regex: str | None) -> None:
        """The DLQ must not be a consumed topic, or bad records would loop (Kafka's rule)."""
        if dlq is None:
            return
        consumed = dlq in topics
        if regex is not None and not consumed:
            try:
                consumed = re.fullmatch(regex, dlq) is not None
            except re.error:
                pass
        if consumed:
            self.problem("errors.deadletterqueue.topic.name",
                f"errors.deadletterqueue.topic.name={dlq!r} is one of the topics this connector reads; "
                "use a separate topic to avoid an infinite loop")

    def bootstrap_servers(self) -> str:
        """bootstrap.servers, else Kafka Connect's per-connector consumer override."""
        own = self.text("bootstrap.servers")
        override = self.text("consumer.override.bootstrap.servers")
        if own and override and own != override:
            self.problem("bootstrap.servers",
                f"bootstrap.servers={own!r} and consumer.override.bootstrap.servers={override!r} "
                "disagree; keep one")
        return own or override or DEFAULT_BOOTSTRAP

