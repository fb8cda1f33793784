"""Iceberg tables and a structured RECORD_METADATA as Snowflake's Kafka connector asks
for them (issue 55): records go to the real broker and the connector runs until caught
up. A structured RECORD_METADATA is read with Spark and `floeline sql`. Iceberg tables
are Delta tables whose Iceberg metadata floeline writes after each batch
(warehouse/iceberg_mirror.py): pyiceberg reads them row for row against Spark. What every engine reads of every table kind is tests/pipeline/test_engine_matrix.py."""

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


def iceberg_rows(spark, table_path: str, key: str) -> tuple[list[dict], list[dict]]:
    """The table's rows as pyiceberg reads them (from the table's folder, as a reader
    without floeline opens it) and as Spark reads the Delta table, ordered by `key`."""
    from floeline.warehouse.iceberg_files import read_table
    from floeline.warehouse.iceberg_mirror import iceberg_location

    mirrored = read_table(iceberg_location(table_path)).scan().to_arrow()
    delta = spark.read.format("delta").load(table_path).toArrow()
    assert mirrored.column_names == delta.column_names
    return (sorted(mirrored.to_pylist(), key=lambda r: r[key]), sorted(delta.to_pylist(), key=lambda r: r[key]))


@pytest.mark.parametrize("setting", [{"snowflake__autocreate__table__type": "iceberg"},
                                     {"snowflake__streaming__iceberg__enabled": "true"}],
                         ids=["4.x autocreate", "3.x streaming iceberg"])
def test_iceberg_tables_read_row_for_row_in_pyiceberg_after_appends_and_a_new_column(
        kafka, topic_name, make_config, run_connector, spark, warehouse, setting):
    """snowflake.autocreate.table.type=iceberg (4.x) or snowflake.streaming.iceberg.enabled
    (3.x): the connector's schematized table is read by pyiceberg, row for row against
    Spark, after batches of appends and after its records gained keys (new columns);
    RECORD_METADATA is the structured one and objects are JSON text."""
    from floeline.warehouse.iceberg_files import read_table
    from floeline.warehouse.iceberg_mirror import iceberg_location

    topic = topic_name("iceberg")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"value": {"id": n, "name": f"n{n}"}, "key": f"k{n}"} for n in range(6)], partition=0)
    config = dict(name=f"{topic}_c", topics=topic, buffer__count__records=4,  # one connector, run twice
                  snowflake__enable__schematization="true", **setting)
    first = run_connector(make_config(**config))
    assert sum(r.records_read for r in first.reports) == 6 and len(first.reports) >= 2
    assert all("iceberg" in r.phases for r in first.reports if r.rows_written)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    mirrored, delta = iceberg_rows(spark, path, "ID")
    assert mirrored == delta and len(delta) == 6
    assert set(delta[0]["RECORD_METADATA"]) >= {"offset", "topic", "partition", "key", "CreateTime"}

    produce(kafka, topic, [{"value": {"id": 6 + n, "name": "x", "amount": 1.5 * n, "detail": {"lang": "en", "n": [n]}}}
                           for n in range(3)], partition=0)
    second = run_connector(make_config(**config))
    assert sum(r.records_read for r in second.reports) == 3
    mirrored, delta = iceberg_rows(spark, path, "ID")
    assert mirrored == delta and len(delta) == 9
    assert {"AMOUNT", "DETAIL"} <= set(delta[0]) and delta[0]["AMOUNT"] is None
    assert json.loads(delta[8]["DETAIL"]) == {"lang": "en", "n": [2]}
    snapshot = read_table(iceberg_location(path)).current_snapshot()
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    assert snapshot.summary["delta.version"] == str(version)


def test_an_upserted_iceberg_table_reads_in_pyiceberg_as_postgresql_left_it(
        kafka, topic_name, make_config, run_connector, spark, warehouse):
    """insert.mode=upsert into an Iceberg table: Debezium's recorded change events (updates
    and deletes) land by MERGE, and pyiceberg reads the table as Spark does: the rows
    MERGE rewrote are gone from the Iceberg snapshot too."""
    from pathlib import Path

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
    records = [r for r in json.loads((fixtures / "postgres_json_plain.json").read_text())
               if r["topic"].endswith(".customers")]
    topic = topic_name("iceberg_upsert")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"key": r["key"], "value": r["value"]} for r in records], partition=0)
    run_connector(make_config(**{
        "topics": topic, "snowflake.topic2table.map": f"{topic}:CUSTOMERS_ICEBERG", "insert.mode": "upsert",
        "primary.key.mode": "record_key", "delete.enabled": "true", "buffer.count.records": "6",
        "snowflake.autocreate.table.type": "iceberg"}))
    mirrored, delta = iceberg_rows(spark, os.path.join(warehouse, "FLOELINE", "PUBLIC", "CUSTOMERS_ICEBERG"), "ID")
    assert mirrored == delta
    assert {int(r["ID"]) for r in delta} == {1, 4, 5, 6, 7, 20}


def test_iceberg_tables_need_a_local_warehouse_and_pyiceberg(monkeypatch):
    """The start checks: S3 warehouses are refused (the metadata commit renames a file),
    and without pyiceberg the message names the extra that installs it."""
    import sys

    from floeline.errors import ConfigError
    from floeline.warehouse.iceberg_tables import require_iceberg_mirror

    require_iceberg_mirror("c", True)
    with pytest.raises(ConfigError, match="local warehouses only.*remove the setting"):
        require_iceberg_mirror("c", False)
    monkeypatch.setitem(sys.modules, "pyiceberg", None)
    with pytest.raises(ConfigError, match=r"pip install 'floeline\[iceberg\]'"):
        require_iceberg_mirror("c", True)
