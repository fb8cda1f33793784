"""User-defined pipes and interactive tables, end to end: the spec's own examples
defined with `floeline sql`, records produced to the real broker, the connector run,
the table queried with Snowflake's variant syntax."""

from __future__ import annotations

import json

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import RecordError
from floeline.sources.kafka import produce
from floeline.sql.script import run_sql
from floeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.integration

ORDERS = [{"order_id": 1, "customer_name": "John", "order_total": 100.25, "isPaid": True},
          {"order_id": 2, "customer_name": "Ann", "order_total": 7, "isPaid": False}]


def sql(spark, warehouse, text):
    return run_sql(spark, text, Warehouse(warehouse))


def test_orders_pipe_with_casts_concat_and_metadata(kafka, topic_name, make_config, run_connector,
                                                    spark, warehouse):
    topic = topic_name("orders")
    devkafka.create_topic(kafka, topic, partitions=2)
    sql(spark, warehouse, """
        CREATE TABLE ORDERS (topic VARCHAR, partition VARCHAR, order_id VARCHAR,
                             customer_name VARCHAR, order_total VARCHAR, ispaid VARCHAR);
        CREATE PIPE ORDERS AS COPY INTO ORDERS FROM (
          SELECT $1:RECORD_METADATA.topic::STRING AS topic,
                 $1:RECORD_METADATA.partition::STRING AS partition,
                 $1['order_id']::STRING AS order_id,
                 $1['customer_name']::STRING as customer_name,
                 CONCAT($1['order_total']::STRING, ' USD') AS order_total,
                 $1['isPaid']::STRING AS ispaid
          FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    produce(kafka, topic, [{"value": o, "partition": i % 2} for i, o in enumerate(ORDERS)])
    run_connector(make_config(topics=topic, snowflake__topic2table__map=f"{topic}:ORDERS"))
    rows = sql(spark, warehouse, "SELECT * FROM ORDERS ORDER BY order_id").collect()
    assert [tuple(r) for r in rows] == [
        (topic, "0", "1", "John", "100.25 USD", "true"),
        (topic, "1", "2", "Ann", "7 USD", "false")]
    pipes = {r[0] for r in sql(spark, warehouse, "SHOW PIPES").collect()}
    assert "ORDERS" in pipes


def test_pipe_with_offset_push_time_and_a_failing_cast(kafka, topic_name, make_config,
                                                       run_connector, spark, warehouse):
    topic = topic_name("orders_t")
    devkafka.create_topic(kafka, topic)
    sql(spark, warehouse, """
        CREATE TABLE ORDERS_TABLE (order_id NUMBER, customer_name VARCHAR, order_total VARIANT,
                                   source_topic VARCHAR, kafka_offset NUMBER, ingestion_time BIGINT);
        CREATE PIPE ORDERS_TABLE AS COPY INTO ORDERS_TABLE FROM (
          SELECT $1:order_id::NUMBER, $1:customer_name, $1:order_total,
                 $1:RECORD_METADATA.topic AS source_topic,
                 $1:RECORD_METADATA.offset::NUMBER AS kafka_offset,
                 $1:RECORD_METADATA.SnowflakeConnectorPushTime::BIGINT AS ingestion_time
          FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    produce(kafka, topic, ORDERS + [{"order_id": "abc", "customer_name": "Bad"}])
    config = make_config(topics=topic, snowflake__topic2table__map=f"{topic}:ORDERS_TABLE")
    # errors.tolerance=none: the failing cast stops the connector, naming the record.
    with pytest.raises(RecordError) as failure:
        run_connector(config)
    assert "offset=2" in str(failure.value) and "pipe expression" in str(failure.value)
    assert "abc" in str(failure.value)
    assert sql(spark, warehouse, "SELECT count(*) FROM ORDERS_TABLE").first()[0] == 0
    # Tolerated: the bad row goes to the error table, the others land.
    run_connector(make_config(name=config.name, topics=topic, errors__tolerance="all",
                              snowflake__topic2table__map=f"{topic}:ORDERS_TABLE"))
    rows = sql(spark, warehouse, "SELECT * FROM ORDERS_TABLE ORDER BY order_id").collect()
    assert [(int(r["ORDER_ID"]), r["CUSTOMER_NAME"], r["SOURCE_TOPIC"], int(r["KAFKA_OFFSET"]))
            for r in rows] == [(1, "John", topic, 0), (2, "Ann", topic, 1)]
    assert all(r["INGESTION_TIME"] > 1_600_000_000_000 for r in rows)
    assert json.loads(rows[0]["ORDER_TOTAL"].toJson()) == 100.25
    errors = sql(spark, warehouse, "SELECT CAST(RECORD_POSITION AS INT) AS RECORD_OFFSET, STAGE FROM ORDERS_TABLE_ERRORS").collect()
    assert [tuple(r) for r in errors] == [(2, "pipe expression")]


def test_person_data_pipe_with_special_keys(kafka, topic_name, make_config, run_connector, spark,
                                            warehouse):
    topic = topic_name("person")
    devkafka.create_topic(kafka, topic)
    sql(spark, warehouse, """
        CREATE TABLE PERSON_DATA (city VARCHAR, age NUMBER, married BOOLEAN, has_cat BOOLEAN,
                                  weird_field_name BOOLEAN, skills VARIANT, family VARIANT);
        CREATE PIPE PERSON_DATA AS COPY INTO PERSON_DATA FROM (
          SELECT $1:city, $1:age, $1:married, $1['has cat'] AS has_cat,
                 $1[' @&$#* has Łułósżź'] AS weird_field_name, $1:skills, $1:family
          FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    produce(kafka, topic, [{"city": "New York", "age": 30, "married": True, "has cat": True,
                            " @&$#* has Łułósżź": True, "skills": ["sitting", "standing", "eating"],
                            "family": {"son": "Jack", "daughter": "Anna"}}])
    run_connector(make_config(topics=topic, snowflake__topic2table__map=f"{topic}:PERSON_DATA"))
    row = sql(spark, warehouse,
              "SELECT city, age, has_cat, weird_field_name, skills[1]::STRING AS s, "
              "family:son::STRING AS son FROM PERSON_DATA").first()
    assert (row[0], int(row[1]), row[2], row[3]) == ("New York", 30, True, True)
    assert (row[4], row[5]) == ("standing", "Jack")


def test_interactive_table_and_a_pipe_replaced_while_running(kafka, topic_name, make_config,
                                                             spark, warehouse):
    from floeline.ingest import Connector

    topic = topic_name("metrics-topic")
    devkafka.create_topic(kafka, topic)
    sql(spark, warehouse, """
        CREATE INTERACTIVE TABLE REALTIME_METRICS ( metric_name VARCHAR, metric_value NUMBER,
          source_topic VARCHAR, timestamp TIMESTAMP_NTZ ) AS (SELECT $1:M_NAME::VARCHAR,
          $1:M_VALUE::NUMBER, $1:RECORD_METADATA.topic::VARCHAR,
          $1:RECORD_METADATA.timestamp::TIMESTAMP_NTZ from TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    produce(kafka, topic, [{"M_NAME": "cpu", "M_VALUE": 42}, {"M_NAME": "mem", "M_VALUE": 7}])
    config = make_config(topics=topic, snowflake__topic2table__map=f"{topic}:REALTIME_METRICS")
    Connector(config, spark).run(until_caught_up=True)
    rows = sql(spark, warehouse, "SELECT metric_name, metric_value, source_topic FROM "
                                 "REALTIME_METRICS ORDER BY metric_name").collect()
    assert [(r[0], int(r[1]), r[2]) for r in rows] == [("cpu", 42, topic), ("mem", 7, topic)]

    # A default-pipe table gets a user-defined pipe between two runs of one connector:
    # the next micro-batch uses it.
    other = topic_name("plain")
    devkafka.create_topic(kafka, other)
    produce(kafka, other, [{"a": 1, "b": "x"}])
    plain = make_config(topics=other, snowflake__topic2table__map=f"{other}:PLAIN")
    connector = Connector(plain, spark)
    connector.run(until_caught_up=True)
    sql(spark, warehouse, "CREATE PIPE PLAIN AS COPY INTO PLAIN FROM (SELECT $1:RECORD_METADATA, "
                          "$1:a::NUMBER * 10, UPPER($1:b) FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))")
    produce(kafka, other, [{"a": 2, "b": "y"}])
    connector.run(until_caught_up=True)
    rows = sql(spark, warehouse, "SELECT A, B FROM PLAIN ORDER BY A").collect()
    assert [(int(r[0]), r[1]) for r in rows] == [(1, "x"), (20, "Y")]
