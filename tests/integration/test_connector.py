"""The core Kafka -> Delta path, as a user sees it: produce to a real topic, run the
connector, query the Delta table."""

from __future__ import annotations

import json
import os

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import RecordError
from floeline.sources.kafka import KafkaCluster, group_id, produce

pytestmark = pytest.mark.integration

ORDER = {"order_id": 12345, "customer_name": "John", "order_total": 100.25, "isPaid": True}


def metadata(row):
    return json.loads(row["RECORD_METADATA"].toJson())


def test_auto_create_infers_columns_and_metadata(kafka, topic_name, make_config, run_connector,
                                                 read_table, spark):
    topic = topic_name("orders")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": dict(ORDER, order_id=i), "key": f"k{i}",
                            "headers": [("h1", b"v1"), ("h2", "v2")], "partition": i % 2}
                           for i in range(6)] + [{"value": {"order_id": 99, "tags": ["a"],
                                                            "address": {"city": "Oslo"}},
                                                  "partition": 0}])
    config = make_config(topics=topic)
    connector = run_connector(config)
    table = topic.upper()
    df = read_table(table)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {"RECORD_METADATA": "variant", "ORDER_ID": "decimal(38,0)",
                     "CUSTOMER_NAME": "string", "ORDER_TOTAL": "double", "ISPAID": "boolean",
                     "TAGS": "variant", "ADDRESS": "variant"}
    assert df.count() == 7
    row = df.where("ORDER_ID = 3").first()
    assert (row["CUSTOMER_NAME"], row["ORDER_TOTAL"], row["ISPAID"]) == ("John", 100.25, True)
    meta = metadata(row)
    assert meta["topic"] == topic and meta["partition"] == 1 and meta["key"] == "k3"
    assert meta["headers"] == {"h1": "v1", "h2": "v2"}
    assert isinstance(meta["CreateTime"], int) and "LogAppendTime" not in meta
    assert meta["SnowflakeConnectorPushTime"] >= meta["CreateTime"]
    nested = df.where("ORDER_ID = 99").first()
    assert json.loads(nested["ADDRESS"].toJson()) == {"city": "Oslo"}
    assert "key" not in metadata(nested) and "headers" not in metadata(nested)
    # Kafka's own lag tooling sees the connector's consumer group advance.
    committed = KafkaCluster(kafka).group_offsets(group_id(config.name), [(topic, 0), (topic, 1)])
    assert committed == {(topic, 0): 4, (topic, 1): 3}
    assert connector.reports and str(connector.reports[-1].behind) == "0"
    assert sum(r.records_read for r in connector.reports) == 7


def test_precreated_table_matches_keys_case_insensitively(kafka, topic_name, make_config,
                                                         run_connector, read_table, spark,
                                                         warehouse):
    topic = topic_name("pre")
    devkafka.create_topic(kafka, topic)
    path = f"{warehouse}/FLOELINE/PUBLIC/ORDERS_PRE"
    spark.sql(f"CREATE TABLE delta.`{path}` (record_metadata VARIANT, order_id DECIMAL(38,0), "
              f"customer_name STRING, order_total DECIMAL(38,0), ispaid BOOLEAN) USING delta")
    produce(kafka, topic, [ORDER, dict(ORDER, Order_Id=7)])
    run_connector(make_config(topics=topic, snowflake__topic2table__map=f"{topic}:ORDERS_PRE"))
    df = read_table("ORDERS_PRE")
    assert df.columns == ["record_metadata", "order_id", "customer_name", "order_total", "ispaid"]
    rows = sorted((int(r["order_id"]), r["customer_name"], int(r["order_total"]), r["ispaid"])
                  for r in df.collect())
    assert rows == [(7, "John", 100, True), (12345, "John", 100, True)]


def test_4x_connector_keeps_topic_case_and_reads_quoted_keys_as_identifiers(
        kafka, topic_name, make_config, run_connector, read_table, spark, warehouse):
    """connector.class of the 4.x connector: table-name sanitization is off by default,
    so topic `et_...` writes to the user's "et_..." table, not ET_...; with column
    identifier normalization on (its v3-compatibility mode) a key written with its
    quotes names the case-sensitive column, an unquoted key the uppercase one."""
    from floeline.sql.script import run_script
    from floeline.warehouse.catalog import Warehouse

    topic = topic_name("et")
    devkafka.create_topic(kafka, topic)
    run_script(spark, f'CREATE TABLE "{topic}" (RECORD_METADATA VARIANT, ID NUMBER, "city" VARCHAR)',
               Warehouse(warehouse))
    produce(kafka, topic, [{"id": 0, '"city"': "Oslo"}, {"id": 1, '"city"': "Bergen"}])
    run_connector(make_config(
        topics=topic, connector__class="com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector",
        snowflake__compatibility__enable__column__identifier__normalization="true"))
    rows = sorted((int(r["ID"]), r["city"]) for r in read_table(topic).collect())
    assert rows == [(0, "Oslo"), (1, "Bergen")]
    assert not os.path.exists(os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper()))


def test_evolution_adds_a_column_mid_stream_drops_not_null_and_off_rejects_new_keys(
        kafka, topic_name, make_config, run_connector, read_table, spark, warehouse):
    """Evolution on: a new key adds its column, a missing one drops NOT NULL. Switched
    off (ENABLE_SCHEMA_EVOLUTION = FALSE) before the connector starts again: the columns
    stay and, with client-side validation, a record with a key that has no column goes
    to the error table, never trimmed silently (server-side validation ignores such a
    key: test_connector_suite_fidelity.py)."""
    from floeline.sql.script import run_script
    from floeline.warehouse.catalog import Warehouse

    topic = topic_name("evo")
    devkafka.create_topic(kafka, topic)
    path = f"{warehouse}/FLOELINE/PUBLIC/{topic.upper()}"
    spark.sql(f"CREATE TABLE delta.`{path}` (RECORD_METADATA VARIANT, A DECIMAL(38,0) NOT NULL) "
              f"USING delta TBLPROPERTIES ('floeline.enableSchemaEvolution'='true', "
              f"'delta.columnMapping.mode'='name')")
    config = make_config(topics=topic, errors__tolerance="all", snowflake__validation="client_side")
    produce(kafka, topic, [{"a": 1}])
    run_connector(config)
    assert not read_table(topic.upper()).schema["A"].nullable
    produce(kafka, topic, [{"a": 2, "b": "new"}, {"b": "no a"}])
    run_connector(config)
    df = read_table(topic.upper())
    assert [f.name for f in df.schema.fields] == ["RECORD_METADATA", "A", "B"]
    assert all(f.nullable for f in df.schema.fields)
    rows = sorted((-1 if r["A"] is None else int(r["A"]), r["B"]) for r in df.collect())
    assert rows == [(-1, "no a"), (1, None), (2, "new")]

    run_script(spark, f"ALTER TABLE {topic.upper()} SET ENABLE_SCHEMA_EVOLUTION = FALSE",
               Warehouse(warehouse))
    produce(kafka, topic, [{"a": 4, "b": "kept"}, {"a": 5, "c": None}])
    run_connector(config)
    df = read_table(topic.upper())
    assert df.columns == ["RECORD_METADATA", "A", "B"]
    assert df.where("A = 4").first()["B"] == "kept" and df.where("A = 5").count() == 0
    (error,) = read_table(topic.upper() + "_ERRORS").collect()
    assert error["RECORD_POSITION"] == "4"
    assert (f"record key 'c' matches no column of table FLOELINE.PUBLIC.{topic.upper()}: schema "
            f"evolution is off (ENABLE_SCHEMA_EVOLUTION = FALSE when the connector opened the "
            f"table)") in error["ERROR"]


def test_special_character_columns(kafka, topic_name, make_config, run_connector, read_table,
                                   spark, warehouse):
    topic = topic_name("person")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"city": "New York", "age": 30, "married": True, "has cat": True,
                            " @&$#* has Łułósżź": True, "skills": ["sitting", "standing"],
                            "family": {"son": "Jack", "daughter": "Anna"}}])
    run_connector(make_config(topics=topic))
    df = read_table(topic.upper())
    assert set(df.columns) == {"RECORD_METADATA", "CITY", "AGE", "MARRIED", "has cat",
                               " @&$#* has Łułósżź", "SKILLS", "FAMILY"}
    row = df.first()
    assert row["has cat"] is True and row[" @&$#* has Łułósżź"] is True
    assert json.loads(row["SKILLS"].toJson()) == ["sitting", "standing"]
    assert _column_mapping(spark, warehouse, topic.upper()) == "name"


def _column_mapping(spark, warehouse, table):
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, f"{warehouse}/FLOELINE/PUBLIC/{table}").detail().first()
    return (detail["properties"] or {}).get("delta.columnMapping.mode", "none")


def test_column_mapping_turned_on_when_a_new_column_needs_it(kafka, topic_name, make_config,
                                                             run_connector, read_table, spark,
                                                             warehouse):
    # Plain names need no column mapping (it slows writes); a key with a space added by
    # evolution turns it on in place, and the rows written before stay readable.
    topic = topic_name("mapping")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic)
    produce(kafka, topic, [{"city": "Oslo", "Łułósżź": 1, "a.b": 2}])
    run_connector(config)
    assert _column_mapping(spark, warehouse, topic.upper()) == "none"
    produce(kafka, topic, [{"city": "Bergen", "has cat": True}])
    run_connector(config)
    assert _column_mapping(spark, warehouse, topic.upper()) == "name"
    rows = sorted((r["CITY"], r["Łułósżź"], r["a.b"], r["has cat"])
                  for r in read_table(topic.upper()).collect())
    assert rows == [("Bergen", None, None, True), ("Oslo", 1, 2, None)]


def test_regex_map_routes_several_topics_into_one_table(kafka, topic_name, make_config,
                                                        run_connector, read_table):
    suffix = topic_name("x")
    cats = [f"orange_cat_{suffix}", f"calico_cat_{suffix}"]
    for t in cats:
        devkafka.create_topic(kafka, t)
        produce(kafka, t, [{"name": t}])
    config = make_config(topics=",".join(cats),
                         snowflake__topic2table__map=f".*_cat_{suffix}:CAT_TABLE")
    run_connector(config)
    df = read_table("CAT_TABLE")
    assert sorted(r["NAME"] for r in df.collect()) == sorted(cats)
    assert sorted(metadata(r)["topic"] for r in df.collect()) == sorted(cats)


def test_topics_regex_subscription(kafka, topic_name, make_config, run_connector, read_table):
    suffix = topic_name("re")
    topics = [f"dog_{suffix}_1", f"dog_{suffix}_2"]
    for t in topics:
        devkafka.create_topic(kafka, t)
        produce(kafka, t, [{"n": 1}])
    run_connector(make_config(topics__regex=f"dog_{suffix}_.*",
                              snowflake__topic2table__map=f"dog_{suffix}_.*:DOGS"))
    assert read_table("DOGS").count() == 2


def test_metadata_flags(kafka, topic_name, make_config, run_connector, read_table):
    topic = topic_name("flags")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"value": {"a": 1}, "key": "k"}])
    run_connector(make_config(topics=topic, snowflake__metadata__topic="false",
                              snowflake__metadata__createtime="false",
                              snowflake__streaming__metadata__connectorPushTime="false",
                              snowflake__topic2table__map=f"{topic}:FLAGS_A"))
    assert metadata(read_table("FLAGS_A").first()) == {"partition": 0, "offset": 0, "key": "k"}
    run_connector(make_config(topics=topic, snowflake__metadata__offset__and__partition="false",
                              snowflake__topic2table__map=f"{topic}:FLAGS_B"))
    meta = metadata(read_table("FLAGS_B").first())
    assert set(meta) == {"topic", "CreateTime", "SnowflakeConnectorPushTime", "key"}
    run_connector(make_config(topics=topic, snowflake__metadata__all="false",
                              snowflake__topic2table__map=f"{topic}:FLAGS_C"))
    df = read_table("FLAGS_C")
    assert "RECORD_METADATA" not in df.columns and df.first()["A"] == 1


def test_tombstones_default_and_ignore(kafka, topic_name, make_config, run_connector, read_table):
    topic = topic_name("tomb")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"a": 1}, {"value": None, "key": "gone"}, {"a": 2}])
    run_connector(make_config(topics=topic, snowflake__topic2table__map=f"{topic}:TOMB_DEFAULT"))
    df = read_table("TOMB_DEFAULT")
    assert df.count() == 3
    tomb = df.where("A IS NULL").first()
    assert metadata(tomb)["key"] == "gone" and metadata(tomb)["offset"] == 1
    connector = run_connector(make_config(topics=topic, behavior__on__null__values="IGNORE",
                                          snowflake__topic2table__map=f"{topic}:TOMB_IGNORE"))
    assert sorted(int(r["A"]) for r in read_table("TOMB_IGNORE").collect()) == [1, 2]
    assert sum(r.skipped for r in connector.reports) == 1


def test_non_object_json_fails_with_hoistfield_hint(kafka, topic_name, make_config, run_connector,
                                                    read_table):
    topic = topic_name("scalar")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"a": 1}, [1, 2, 3]])
    with pytest.raises(RecordError) as info:
        run_connector(make_config(topics=topic))
    message = str(info.value)
    assert f"topic={topic} partition=0 offset=1" in message and "HoistField" in message
    assert "array" in message


def test_malformed_json_skipped_with_errors_tolerance_all(kafka, topic_name, make_config,
                                                          run_connector, read_table):
    topic = topic_name("bad")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"a": 1}, b"{not json", [1, 2], {"a": 3}])
    connector = run_connector(make_config(topics=topic, errors__tolerance="all"))
    assert sorted(int(r["A"]) for r in read_table(topic.upper()).collect()) == [1, 3]
    assert sum(r.errors for r in connector.reports) == 2
    assert connector.row_errors == {f"FLOELINE.PUBLIC.{topic.upper()}": 2}


def test_wrong_type_fails_loud_and_commits_nothing(kafka, topic_name, make_config, run_connector,
                                                   read_table):
    topic = topic_name("wrongtype")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic)
    produce(kafka, topic, [{"a": 1}])
    run_connector(config)
    produce(kafka, topic, [{"a": 2}, {"a": "abc"}])
    with pytest.raises(RecordError) as info:
        run_connector(config)
    assert "offset=2" in str(info.value) and "'a'" in str(info.value)
    assert [int(r["A"]) for r in read_table(topic.upper()).collect()] == [1]


def test_wrong_type_skipped_and_counted_with_errors_tolerance_all(kafka, topic_name, make_config,
                                                                  run_connector, read_table):
    topic = topic_name("wrongall")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic, errors__tolerance="all")
    produce(kafka, topic, [{"a": 1}])
    run_connector(config)
    produce(kafka, topic, [{"a": 2}, {"a": "abc"}, {"a": 4, "b": True}])
    connector = run_connector(config)
    assert sorted(int(r["A"]) for r in read_table(topic.upper()).collect()) == [1, 2, 4]
    assert connector.reports[-1].errors == 1 and connector.reports[-1].rows_written == {
        topic.upper(): 2}
    assert connector.row_errors == {f"FLOELINE.PUBLIC.{topic.upper()}": 1}


def test_log_append_time_topic(kafka, topic_name, make_config, run_connector, read_table):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = topic_name("logappend")
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "message.timestamp.type": "LogAppendTime"})])[topic].result()
    produce(kafka, topic, [{"a": 1}])
    run_connector(make_config(topics=topic))
    meta = metadata(read_table(topic.upper()).first())
    assert isinstance(meta["LogAppendTime"], int) and "CreateTime" not in meta


def test_buffer_bounds_split_a_backlog_into_batches(kafka, topic_name, make_config, run_connector,
                                                    read_table):
    """buffer.count.records bounds records per partition per batch; buffer.size.bytes
    bounds them through the record size sampled at start (~100 bytes here)."""
    topic = topic_name("bounds")
    devkafka.create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"value": {"pad": "x" * 80, "n": i}, "partition": i % 2} for i in range(40)])
    by_count = run_connector(make_config(topics=topic, buffer__count__records=5,
                                         snowflake__topic2table__map=f"{topic}:BOUND_COUNT"))
    assert [r.records_read for r in by_count.reports] == [10, 10, 10, 10]
    by_size = run_connector(make_config(topics=topic, buffer__size__bytes=500,
                                        snowflake__topic2table__map=f"{topic}:BOUND_SIZE"))
    assert by_size.source.records_per_partition() <= 5 and len(by_size.reports) >= 4
    assert max(r.records_read for r in by_size.reports) <= 2 * by_size.source.records_per_partition()
    assert read_table("BOUND_COUNT").count() == read_table("BOUND_SIZE").count() == 40


def test_schematization_off_writes_record_content(kafka, topic_name, make_config, run_connector,
                                                  read_table):
    topic = topic_name("legacy")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"a": 1, "nested": {"b": [1, 2]}}])
    run_connector(make_config(topics=topic, snowflake__enable__schematization="false"))
    df = read_table(topic.upper())
    assert df.columns == ["RECORD_METADATA", "RECORD_CONTENT"]
    assert json.loads(df.first()["RECORD_CONTENT"].toJson()) == {"a": 1, "nested": {"b": [1, 2]}}


def test_batch_with_only_bad_records_still_commits_its_offsets(kafka, topic_name, make_config,
                                                               run_connector, read_table):
    """errors.tolerance=all: a batch whose every row fails still records the channel's
    offset, so the bad records are not read, logged and counted again after a restart."""
    import shutil

    topic = topic_name("allbad")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic, errors__tolerance="all")
    produce(kafka, topic, [{"a": 1}])
    run_connector(config)
    produce(kafka, topic, [{"a": "x"}, {"a": "y"}])
    connector = run_connector(config)
    assert connector.reports[-1].errors == 2
    shutil.rmtree(config.checkpoint_dir)
    again = run_connector(config)
    assert sum(r.records_read for r in again.reports) == 0
    assert [int(r["A"]) for r in read_table(topic.upper()).collect()] == [1]
