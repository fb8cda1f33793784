"""Iceberg tables and a structured RECORD_METADATA as Snowflake's Kafka connector asks
for them (issue 55): records go to the real broker and the connector runs until caught
up. A structured RECORD_METADATA is read with Spark and `floeline sql`. Iceberg tables
need Delta's Iceberg converter (delta-iceberg), which no registry here serves for the
Delta and Spark floeline runs on: a connector asking for them stops at start naming the
setting and the fix (warehouse/uniform.py) instead of writing tables no Iceberg reader
opens. What every engine reads of every table kind is tests/pipeline/test_engine_matrix.py."""

from __future__ import annotations

import json
import os

import pytest

from floeline.dev import kafka as devkafka
from floeline.sources.kafka import produce

pytestmark = pytest.mark.integration


def headers_of(value) -> dict:
    """A map as Spark (a dict) or pyarrow (a list of pairs) gives it."""
    return dict(value) if value is not None else None


def test_structured_record_metadata_has_snowflakes_fields(kafka, topic_name, make_config, run_connector,
                                                          read_table, spark, warehouse):
    """snowflake.feature.structured.record.metadata.enabled=true: RECORD_METADATA is a
    struct with the fields of Snowflake's Iceberg RECORD_METADATA, on the one-pass path
    (no headers) and the general one (headers, a JSON key), and `floeline sql` reads
    `record_metadata:topic` as on a VARIANT."""
    from floeline.sql.results import format_rows
    from floeline.sql.script import run_sql
    from floeline.warehouse.catalog import Warehouse

    topic = topic_name("structured")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"value": {"a": n}, "key": f"k{n}"} for n in range(4)]
            + [{"value": {"a": 4}, "headers": [("h", b"v1"), ("n", b"42")]}, {"value": {"a": 5}}], partition=0)
    connector = run_connector(make_config(topics=topic, buffer__count__records=4,
                                          snowflake__feature__structured__record__metadata__enabled="true"))
    df = read_table(topic.upper())
    kind = {f.name: f.dataType.simpleString() for f in df.schema.fields}["RECORD_METADATA"]
    assert kind == ("struct<offset:bigint,topic:string,partition:int,key:string,schema_id:int,"
                    "key_schema_id:int,CreateTime:bigint,LogAppendTime:bigint,"
                    "SnowflakeConnectorPushTime:bigint,headers:map<string,string>>")
    meta = {r["RECORD_METADATA"]["offset"]: r["RECORD_METADATA"].asDict() for r in df.collect()}
    assert sorted(meta) == list(range(6)) and sum(r.skipped for r in connector.reports) == 0
    first = meta[0]
    assert (first["topic"], first["partition"], first["key"], first["headers"]) == (topic, 0, "k0", None)
    assert first["CreateTime"] > 1_700_000_000_000 and first["SnowflakeConnectorPushTime"] >= first["CreateTime"]
    assert (first["LogAppendTime"], first["schema_id"], first["key_schema_id"]) == (None, None, None)
    assert headers_of(meta[4]["headers"]) == {"h": "v1", "n": "42"} and meta[4]["key"] is None
    assert meta[5]["headers"] is None
    rows = format_rows(run_sql(spark, "SELECT record_metadata:topic::string AS t, record_metadata:offset::number AS o, "
                                      "record_metadata:headers.h AS h FROM " + topic.upper() + " ORDER BY o",
                               Warehouse(warehouse)), "json").splitlines()
    assert json.loads(rows[4]) == {"t": topic, "o": 4, "h": "v1"}


def test_iceberg_tables_are_refused_where_delta_cannot_write_their_iceberg_metadata(
        kafka, topic_name, make_config, run_connector, read_table, spark, warehouse):
    """snowflake.autocreate.table.type=iceberg (4.x) or snowflake.streaming.iceberg.enabled
    (3.x) on a Spark without delta-iceberg: Delta would take UniForm's properties and
    write no Iceberg metadata (pyiceberg finds no metadata/*.metadata.json), so the
    connector stops before reading a record, and no table is made. With a delta-iceberg
    on the classpath this test fails: pyiceberg must then read the tables row for row."""
    from floeline.errors import ConfigError
    from floeline.warehouse.uniform import CONVERTER_CLASS, has_class

    assert has_class(spark, "org.apache.spark.sql.delta.DeltaLog")  # the check sees spark.jars' classes
    assert not has_class(spark, CONVERTER_CLASS)
    topic = topic_name("iceberg")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"value": {"id": n}} for n in range(3)], partition=0)
    for setting in ({"snowflake__autocreate__table__type": "iceberg"},
                    {"snowflake__streaming__iceberg__enabled": "true"}):
        with pytest.raises(ConfigError) as refused:
            run_connector(make_config(topics=topic, **setting))
        message = str(refused.value)
        assert "snowflake.autocreate.table.type=iceberg" in message and "io.delta:delta-iceberg" in message
        assert "remove the setting" in message
    assert not os.path.exists(os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper()))
    run_connector(make_config(topics=topic))  # the same records land once the setting is gone
    assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == [0, 1, 2]
