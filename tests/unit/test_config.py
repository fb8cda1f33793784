"""Connector config: properties / REST JSON parsing, defaults, validation messages."""

import json
import os

import pytest

from floeline.config import (
    DEFAULT_BOOTSTRAP,
    KNOWN_KEYS,
    ConnectorConfig,
    MetadataFlags,
    config_from_dict,
    describe_ignored,
    load_config,
    parse_properties,
)
from floeline.errors import ConfigError
from floeline.naming import MAP_FORMAT

BASE = {"name": "orders-sink", "topics": "orders"}


def cfg(**extra) -> ConnectorConfig:
    return config_from_dict({**BASE, **extra})


def cfg_error(settings: dict) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(settings)
    return str(info.value)


# --- properties ----------------------------------------------------------------------
# Expected results were checked against java.util.Properties.load on the same text.


def test_properties_separators_comments_and_blank_lines():
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \n"
        "name=orders-sink\n"
        "topics: orders, refunds\n"
        "buffer.flush.time 5\n"
        "  indented   =   value  \n"
        "k6 : = v6\n"
        "flag\n"
    )
    assert parse_properties(text) == {
        "name": "orders-sink",
        "topics": "orders, refunds",
        "buffer.flush.time": "5",
        "indented": "value  ",  # leading whitespace skipped, trailing kept (as Java)
        "k6": "= v6",  # only one separator is consumed
        "flag": "",
    }


def test_properties_line_continuation():
    text = (
        "snowflake.topic2table.map=orders:ORDERS,\\\n"
        "      refunds:REFUNDS\n"
        "even=ends with two\\\\\n"
        "next=line\n"
        "# a comment does not continue \\\n"
        "after=comment\n"
    )
    assert parse_properties(text) == {
        "snowflake.topic2table.map": "orders:ORDERS,refunds:REFUNDS",
        "even": "ends with two\\",
        "next": "line",
        "after": "comment",
    }


def test_properties_escapes_and_dollar():
    text = (
        "transforms.wrap.type=org.apache.kafka.connect.transforms.HoistField$Value\n"
        "esc\\:aped\\=key\\ here=\\t\\u00e9\\uD83D\\uDE80\\x\\\\\n"
        "newline=a\\nb\r\n"
        "cr=one\rlast=two"
    )
    assert parse_properties(text) == {
        "transforms.wrap.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "esc:aped=key here": "\t\u00e9\U0001F680x\\",
        "newline": "a\nb",
        "cr": "one",
        "last": "two",
    }


def test_properties_last_value_wins():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_properties_malformed_unicode_escape_names_the_line():
    with pytest.raises(ConfigError, match=r"line 2: malformed \\uXXXX escape"):
        parse_properties("a=1\nb=\\u12G4\n")


# --- files ---------------------------------------------------------------------------


def test_load_properties_file(tmp_path):
    path = tmp_path / "connector.properties"
    path.write_text("name=orders-sink\ntopics=orders\nsnowflake.url.name=acct.example:443\n", encoding="utf-8")
    c = load_config(path)
    assert c.name == "orders-sink" and c.topics == ("orders",)
    assert c.ignored_keys == ("snowflake.url.name",)


def test_load_rest_json(tmp_path):
    path = tmp_path / "connector.json"
    path.write_text(json.dumps({
        "name": "orders-sink",
        "config": {"topics": "orders", "tasks.max": 8, "snowflake.enable.schematization": False,
                   "errors.deadletterqueue.topic.name": None},
    }), encoding="utf-8")
    c = load_config(path)
    assert c.name == "orders-sink"
    assert c.schematization is False
    assert c.dlq_topic is None
    assert c.raw["tasks.max"] == "8"


def test_load_json_by_content_and_flat_object(tmp_path):
    path = tmp_path / "connector.conf"
    path.write_text('\n  {"name": "flat", "topics": "a,b"}', encoding="utf-8")
    c = load_config(path)
    assert (c.name, c.topics) == ("flat", ("a", "b"))


def test_load_rest_json_with_name_only_inside_config(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"config": {"name": "inner", "topics": "a"}}', encoding="utf-8")
    assert load_config(path).name == "inner"


@pytest.mark.parametrize("body,fragment", [
    ('{"name": "a", "config": {"name": "b", "topics": "t"}}', "differs from config.name"),
    ('{"name": "a", "config": {"topics": "t"}, "extra": 1}', "unexpected top-level field(s) extra"),
    ('{"name": "a", "config": {"topics": ["t"]}}', "must be a string"),
    ('{"name": "a",', "not valid JSON at line 1"),
    ("[1, 2]", "must be an object"),
])
def test_load_json_errors_name_the_file(tmp_path, body, fragment):
    path = tmp_path / "bad.json"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read connector config"):
        load_config(tmp_path / "nope.properties")


def test_load_keeps_naming_error_type_and_names_the_file(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text("name=a\ntopics=t\nsnowflake.topic2table.map=t\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and MAP_FORMAT in str(info.value)


# --- defaults and values -------------------------------------------------------------


def test_defaults():
    c = cfg()
    assert c.name == "orders-sink"
    assert c.topics == ("orders",) and c.topics_regex is None
    assert c.bootstrap_servers == DEFAULT_BOOTSTRAP
    assert c.topic_map is None
    assert (c.database, c.schema) == ("FLOELINE", "PUBLIC")
    assert (c.flush_time_s, c.count_records, c.size_bytes) == (10, 10000, 20000000)
    assert c.metadata == MetadataFlags(True, True, True, True, True)
    assert c.null_values == "DEFAULT"
    assert c.schematization is True
    assert c.errors_tolerance == "none"
    assert c.errors_log_enable is False and c.errors_log_include_messages is False
    assert c.dlq_topic is None and c.dlq_replication_factor == 3 and c.dlq_context_headers is True
    assert c.key_converter is None and c.value_converter is None
    assert c.warehouse == "./warehouse"
    assert c.checkpoint_dir == os.path.join("./warehouse", "_checkpoints", "orders-sink")
    assert c.spark_master == "local[2]"
    assert c.ignored_keys == ()
    assert describe_ignored(c) == ""


def test_values_are_parsed_and_normalized():
    c = cfg(**{
        "topics": " orders , refunds ",
        "snowflake.topic2table.map": "orders:ORDERS_T,refunds:ORDERS_T",
        "snowflake.database.name": "sales",
        "snowflake.schema.name": '"Raw Events"',
        "buffer.flush.time": " 1 ",
        "buffer.count.records": "+500",
        "buffer.size.bytes": "1048576",
        "snowflake.metadata.createtime": "FALSE",
        "snowflake.streaming.metadata.connectorPushTime": "False",
        "behavior.on.null.values": "ignore",
        "snowflake.enable.schematization": "TRUE",
        "errors.tolerance": "ALL",
        "errors.log.enable": "true",
        "errors.deadletterqueue.topic.name": "orders-dlq",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "floeline.warehouse": "/data/wh",
        "floeline.spark.master": "local[*]",
        "consumer.override.bootstrap.servers": "broker:29092",
    })
    assert c.topics == ("orders", "refunds")
    assert c.topic_map.table_for("refunds") == "ORDERS_T"
    assert (c.database, c.schema) == ("SALES", "Raw Events")
    assert (c.flush_time_s, c.count_records, c.size_bytes) == (1, 500, 1048576)
    assert c.metadata.createtime is False and c.metadata.connector_push_time is False
    assert c.metadata.topic is True
    assert c.null_values == "IGNORE" and c.errors_tolerance == "all"
    assert c.errors_log_enable is True
    assert c.dlq_topic == "orders-dlq"
    assert c.value_converter == "org.apache.kafka.connect.json.JsonConverter"
    assert c.checkpoint_dir == os.path.join("/data/wh", "_checkpoints", "orders-sink")
    assert c.spark_master == "local[*]"
    assert c.bootstrap_servers == "broker:29092"
    assert c.raw["value.converter.schemas.enable"] == "false"


def test_buffer_flush_time_zero_is_back_to_back_batches():
    from floeline.ingest.connector import BACK_TO_BACK_TRIGGER, trigger_interval

    assert config_from_dict({**BASE, "buffer.flush.time": "0"}).flush_time_s == 0
    assert (trigger_interval(0), trigger_interval(5)) == (BACK_TO_BACK_TRIGGER["kafka"], "5 seconds")
    assert trigger_interval(0, "kinesis") == "250 milliseconds"  # Kinesis: 5 GetRecords a second a shard


def test_topics_regex():
    c = config_from_dict({"name": "n", "topics.regex": "orders-.*"})
    assert c.topics == () and c.topics_regex == "orders-.*"


def test_config_is_frozen_raw_read_only_and_secrets_not_in_repr():
    c = cfg(**{"snowflake.private.key": "SECRET-KEY"})
    with pytest.raises(AttributeError):
        c.name = "other"
    with pytest.raises(TypeError):
        c.raw["name"] = "other"
    assert "SECRET-KEY" not in repr(c)


# --- problems ------------------------------------------------------------------------


def test_fail_on_data_loss_is_on_unless_set_off():
    assert cfg().fail_on_data_loss is True
    assert cfg(**{"floeline.kafka.fail.on.data.loss": "false"}).fail_on_data_loss is False
    assert "floeline.kafka.fail.on.data.loss='no' is not a boolean" in cfg_error(
        {**BASE, "floeline.kafka.fail.on.data.loss": "no"})


def test_a_spark_kafka_option_says_a_config_passes_none_to_either_reader():
    message = cfg_error({**BASE, "failOnDataLoss": "false", "minPartitions": "8"})
    assert ("'failOnDataLoss' is an option of Spark's Kafka source: a connector config passes no "
            "options to either Kafka reader (floeline.kafka.reader=grouped or spark), floeline sets "
            "them itself; use floeline.kafka.fail.on.data.loss") in message
    assert "'minPartitions' is an option of Spark's Kafka source" in message
    assert "floeline has no setting for it" in message


def test_unknown_key_suggests_the_closest_key():
    message = cfg_error({**BASE, "buffer.flush.tim": "5"})
    assert "unknown setting 'buffer.flush.tim' (did you mean 'buffer.flush.time'?)" in message


def test_every_problem_is_reported_at_once():
    message = cfg_error({
        "topics": "orders",
        "buffer.flush.tim": "5",
        "Snowflake.Database.Name": "x",
        "totally.unrelated.zzz": "1",
        "errors.log.enable": "yes",
        "buffer.count.records": "ten",
    })
    assert "(6 problems)" in message
    assert "missing required setting 'name'" in message
    assert "unknown setting 'buffer.flush.tim' (did you mean 'buffer.flush.time'?)" in message
    assert "unknown setting 'Snowflake.Database.Name' (did you mean 'snowflake.database.name'?)" in message
    assert "unknown setting 'totally.unrelated.zzz'\n" in message + "\n"
    assert "errors.log.enable='yes' is not a boolean; accepted values: true, false" in message
    assert "buffer.count.records='ten' is not a whole number; accepted values: an integer >= 1" in message


@pytest.mark.parametrize("key,value,fragment", [
    ("snowflake.metadata.all", "1", "snowflake.metadata.all='1' is not a boolean; accepted values: true, false"),
    ("snowflake.enable.schematization", "on", "'on' is not a boolean"),
    ("buffer.flush.time", "-1", "buffer.flush.time=-1 is too small; accepted values: an integer >= 0"),
    ("buffer.size.bytes", "20MB", "buffer.size.bytes='20MB' is not a whole number"),
    ("buffer.count.records", "1_000", "is not a whole number"),
    ("errors.tolerance", "some", "errors.tolerance='some' is not valid; accepted values: none, all"),
    ("behavior.on.null.values", "skip", "accepted values: DEFAULT, IGNORE"),
    ("snowflake.database.name", "my-db", "snowflake.database.name: 'my-db' is not a valid unquoted identifier"),
    ("snowflake.schema.name", '"open', "no closing double quote"),
    ("topics.regex", "(", "topics and topics.regex are both set"),
    ("errors.deadletterqueue.topic.name", "orders", "infinite loop"),
    ("snowflake.topic2table.map.regex.replacement", "true", "not supported by floeline"),
])
def test_bad_values_name_key_value_and_accepted_values(key, value, fragment):
    assert fragment in cfg_error({**BASE, key: value})


def test_topics_problems():
    assert "one of 'topics'" in cfg_error({"name": "n"})
    assert "not a valid regular expression" in cfg_error({"name": "n", "topics.regex": "("})
    message = cfg_error({"name": "n", "topics": "a,,bad topic,a"})
    assert "'' is not a valid Kafka topic name" in message
    assert "'bad topic' is not a valid Kafka topic name" in message
    assert "topics lists 'a' more than once" in message
    assert "infinite loop" in cfg_error(
        {"name": "n", "topics.regex": "orders.*", "errors.deadletterqueue.topic.name": "orders-dlq"})


def test_bootstrap_servers():
    assert cfg(**{"bootstrap.servers": "localhost:39092"}).bootstrap_servers == "localhost:39092"


def test_bootstrap_conflict():
    message = cfg_error({**BASE, "bootstrap.servers": "a:1", "consumer.override.bootstrap.servers": "b:2"})
    assert "disagree" in message


def test_topic_map_error_keeps_position_and_format():
    message = cfg_error({**BASE, "snowflake.topic2table.map": "orders:ORDERS_T,,x:YY"})
    assert "entry 2 (character 17)" in message and MAP_FORMAT in message


def test_transform_aliases_must_add_up():
    ok = cfg(**{
        "transforms": "wrap, insert",
        "transforms.wrap.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.wrap.field": "payload",
        "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.insert.predicate": "isOrders",
        "predicates": "isOrders",
        "predicates.isOrders.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isOrders.pattern": "orders",
    })
    assert ok.raw["transforms.wrap.field"] == "payload"
    message = cfg_error({**BASE, "transforms": "wrap,wrap", "transforms.wrapp.type": "X"})
    assert "transforms lists the alias 'wrap' more than once" in message
    assert "missing setting 'transforms.wrap.type'" in message
    assert "'transforms.wrapp.type' belongs to no alias listed in transforms (it lists: wrap, wrap)" in message


# --- ignored and known keys ----------------------------------------------------------


def test_cloud_and_runtime_keys_are_accepted_and_listed_as_ignored():
    c = cfg(**{
        "connector.class": "com.snowflake.kafka.connector.SnowflakeSinkConnector",
        "tasks.max": "8",
        "snowflake.url.name": "myaccount.example:443",
        "snowflake.user.name": "kafka",
        "snowflake.private.key": "MIIE...",
        "snowflake.role.name": "INGEST",
        "snowflake.ingestion.method": "SNOWPIPE_STREAMING",
        "snowflake.streaming.validate.compatibility.with.classic": "false",
        "snowflake.oauth.some.future.key": "x",
        "jvm.proxy.host": "proxy",
        "jvm.proxy.port": "3128",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter.schema.registry.url": "http://localhost:8081",
        "consumer.override.max.poll.records": "500",
    })
    assert c.ignored_keys == (
        "jvm.proxy.host", "jvm.proxy.port",
        "snowflake.oauth.some.future.key", "snowflake.private.key", "snowflake.role.name",
        "snowflake.streaming.validate.compatibility.with.classic",
        "snowflake.url.name", "snowflake.user.name", "tasks.max",
    )
    line = describe_ignored(c)
    assert "\n" not in line
    assert line.startswith("ignored settings") and "snowflake.private.key" in line
    assert "MIIE" not in line


def test_known_keys_cover_the_documented_parameters():
    documented = {
        "snowflake.topic2table.map", "buffer.flush.time", "buffer.count.records", "buffer.size.bytes",
        "errors.tolerance", "errors.deadletterqueue.topic.name", "errors.log.enable",
        "snowflake.metadata.all", "snowflake.metadata.topic", "snowflake.metadata.offset.and.partition",
        "snowflake.metadata.createtime", "snowflake.streaming.metadata.connectorPushTime",
        "behavior.on.null.values", "snowflake.enable.schematization", "snowflake.ingestion.method",
        "snowflake.database.name", "snowflake.schema.name", "key.converter", "value.converter",
        "transforms", "enable.streaming.client.optimization", "snowflake.role.name",
        "connector.class", "tasks.max", "topics", "topics.regex", "name",
    }
    assert documented <= KNOWN_KEYS


V4 = "com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector"
V3 = "com.snowflake.kafka.connector.SnowflakeSinkConnector"
SANITIZE = "snowflake.compatibility.enable.autogenerated.table.name.sanitization"
NORMALIZE = "snowflake.compatibility.enable.column.identifier.normalization"


@pytest.mark.parametrize("settings,expected", [
    # (connector line, table names sanitized, keys normalized, strings into BINARY)
    ({}, (None, True, False, "BASE64")),  # the connector's documentation
    ({"connector.class": V4}, ("4", False, False, "BASE64")),  # the 4.x defaults
    ({"connector.class": V3}, ("3", True, True, "HEX")),  # 3.x always did this
    # the 4.x compatibility mode: each setting explicit
    ({"connector.class": V4, SANITIZE: "true", NORMALIZE: "true",
      "snowflake.validation": "client_side"}, ("4", True, True, "HEX")),
    ({SANITIZE: "false", "snowflake.validation": "SERVER_SIDE"}, (None, False, False, "BASE64")),
])
def test_connector_class_sets_the_defaults_of_its_compatibility_settings(settings, expected):
    c = cfg(**settings)
    assert (c.connector_line, c.table_name_sanitization, c.column_normalization,
            c.binary_format) == expected
    assert c.validation == ("client_side" if c.binary_format == "HEX" else "server_side")
    assert c.ignored_keys == ()


@pytest.mark.parametrize("settings,expected", [
    # (ingestion method, schematization)
    ({}, ("SNOWPIPE_STREAMING", True)),
    ({"connector.class": V4}, ("SNOWPIPE_STREAMING", True)),
    ({"connector.class": V3}, ("SNOWPIPE", False)),  # the 3.x connector's defaults
    ({"connector.class": V3, "snowflake.ingestion.method": "SNOWPIPE_STREAMING"},
     ("SNOWPIPE_STREAMING", False)),  # 3.x: RECORD_CONTENT unless asked for columns
    ({"connector.class": V3, "snowflake.ingestion.method": "SNOWPIPE_STREAMING",
      "snowflake.enable.schematization": "true"}, ("SNOWPIPE_STREAMING", True)),
])
def test_a_3x_config_gets_the_3x_ingestion_defaults(settings, expected):
    c = cfg(**settings)
    assert (c.ingestion_method, c.schematization) == expected


def test_unknown_connector_class_and_validation_mode_are_config_errors():
    message = cfg_error({**BASE, "connector.class": "com.example.OtherSink",
                         "snowflake.validation": "both"})
    assert f"connector.class='com.example.OtherSink' is not a Snowflake sink connector; " \
           f"accepted values: {V4}, {V3}" in message
    assert "snowflake.validation='both' is not valid; accepted values: server_side, client_side" in message


def test_ingestion_method_is_a_validated_setting():
    assert cfg().ingestion_method == "SNOWPIPE_STREAMING"
    assert cfg().schematization is True
    snowpipe = cfg(**{"snowflake.ingestion.method": "snowpipe"})
    assert snowpipe.ingestion_method == "SNOWPIPE"
    assert snowpipe.schematization is False  # RECORD_METADATA + RECORD_CONTENT, as Snowflake
    assert cfg(**{"snowflake.ingestion.method": "SNOWPIPE",
                  "snowflake.enable.schematization": "false"}).schematization is False
    with pytest.raises(ConfigError, match="snowflake.ingestion.method='PIPE' is not valid; accepted "
                                          "values: SNOWPIPE_STREAMING, SNOWPIPE"):
        cfg(**{"snowflake.ingestion.method": "PIPE"})
    with pytest.raises(ConfigError, match="schematization is only available with Snowpipe Streaming"):
        cfg(**{"snowflake.ingestion.method": "SNOWPIPE", "snowflake.enable.schematization": "true"})


def test_table_settings_variant_storage_and_auto_compact():
    # JSON text by default: every engine reads it (docs/sql.md "Other engines"); VARIANT on request
    c = config_from_dict({**BASE})
    assert (c.table_settings.variant_storage, c.table_settings.auto_compact) == ("json", False)
    c = config_from_dict({**BASE, "floeline.variant.storage": "VARIANT", "floeline.table.auto.compact": "true"})
    assert (c.table_settings.variant_storage, c.table_settings.auto_compact) == ("variant", True)
    # the SNOWPIPE method's tables too: its pipe's columns are JSON text or VARIANT alike
    snowpipe = config_from_dict({**BASE, "snowflake.ingestion.method": "SNOWPIPE"})
    assert snowpipe.table_settings.variant_storage == "json"
    snowpipe = config_from_dict({**BASE, "snowflake.ingestion.method": "SNOWPIPE",
                                 "floeline.variant.storage": "variant"})
    assert snowpipe.table_settings.variant_storage == "variant"
    assert "floeline.variant.storage='text'" in cfg_error({**BASE, "floeline.variant.storage": "text"})


def test_iceberg_tables_as_snowflakes_connectors_ask_for_them():
    plain = config_from_dict({**BASE}).table_settings
    assert (plain.iceberg, plain.structured_metadata, plain.variant_storage) == (False, False, "json")
    for asked in ({"snowflake.autocreate.table.type": "ICEBERG"},  # 4.1+, case as the connector
                  {"snowflake.streaming.iceberg.enabled": "true"}):  # 3.x
        c = config_from_dict({**BASE, **asked})
        settings = c.table_settings
        # Iceberg readers cannot read Delta VARIANT: JSON text, and a structured RECORD_METADATA
        assert (settings.iceberg, settings.structured_metadata, settings.variant_storage) == (True, True, "json")
        assert not set(asked) & set(c.ignored_keys)
    for kind in ("snowflake", "none"):
        assert not config_from_dict({**BASE, "snowflake.autocreate.table.type": kind}).table_settings.iceberg
    assert "snowflake.autocreate.table.type='delta'" in cfg_error(
        {**BASE, "snowflake.autocreate.table.type": "delta"})
    assert "Iceberg readers cannot read Delta VARIANT" in cfg_error(
        {**BASE, "snowflake.autocreate.table.type": "iceberg", "floeline.variant.storage": "variant"})
    assert "need snowflake.ingestion.method=SNOWPIPE_STREAMING" in cfg_error(
        {**BASE, "snowflake.streaming.iceberg.enabled": "true", "snowflake.ingestion.method": "SNOWPIPE"})
    # The metadata's own switch: on its own, or off for Iceberg (then JSON text)
    structured = config_from_dict({**BASE, "snowflake.feature.structured.record.metadata.enabled": "true",
                                   "floeline.variant.storage": "variant"})
    assert (structured.table_settings.structured_metadata, structured.table_settings.variant_storage) == (
        True, "variant")
    assert not config_from_dict({**BASE, "snowflake.autocreate.table.type": "iceberg",
                                 "snowflake.feature.structured.record.metadata.enabled": "false"}
                                ).table_settings.structured_metadata
    assert "snowflake.feature.structured.record.metadata.enabled=true needs" in cfg_error(
        {**BASE, "snowflake.feature.structured.record.metadata.enabled": "true",
         "snowflake.ingestion.method": "SNOWPIPE"})


def test_structured_metadata_reads_snowflakes_fields_from_the_variant():
    from floeline.records.metadata import metadata_value_sql, struct_fields, structured_metadata_type

    kafka = structured_metadata_type("kafka")
    assert [name for name, _kind in struct_fields(kafka)] == [
        "offset", "topic", "partition", "key", "schema_id", "key_schema_id", "CreateTime",
        "LogAppendTime", "SnowflakeConnectorPushTime", "headers"]
    # As Delta reads the type back (no quotes), and a comma inside a type
    assert struct_fields("struct<offset:bigint,headers:map<string,string>,n:decimal(38,0)>") == [
        ("offset", "bigint"), ("headers", "map<string,string>"), ("n", "decimal(38,0)")]
    sql = metadata_value_sql(kafka)
    assert "'headers', try_variant_get(_meta, '$.headers', 'map<string,string>')" in sql
    assert metadata_value_sql("variant") == "CAST(_meta AS variant)"
    assert metadata_value_sql("string") == "CAST(to_json(_meta) AS string)"


def test_kafka_reader_is_grouped_unless_spark_is_asked_for():
    assert config_from_dict({**BASE}).kafka_reader == "grouped"
    assert config_from_dict({**BASE, "floeline.kafka.reader": "Spark"}).kafka_reader == "spark"
    assert "floeline.kafka.reader='fast'" in cfg_error({**BASE, "floeline.kafka.reader": "fast"})


def test_schema_evolution_max_new_columns():
    assert config_from_dict({**BASE}).table_settings.max_new_columns == 1000
    c = config_from_dict({**BASE, "floeline.schema.evolution.max.new.columns": "50"})
    assert c.table_settings.max_new_columns == 50
    assert "floeline.schema.evolution.max.new.columns" in cfg_error(
        {**BASE, "floeline.schema.evolution.max.new.columns": "0"})
