"""`floeline validate`: config checks and topic -> table, without Spark or Kafka."""

import os

from floeline.cli import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "orders.properties")


def validate(path, text: str) -> int:
    """`floeline validate` on a config file holding `text`; its exit code."""
    path.write_text(text)
    return main(["validate", str(path)])


def test_validate_prints_the_examples_4x_table_and_nothing_ignored(capsys):
    assert main(["validate", EXAMPLE]) == 0
    out, err = capsys.readouterr()
    assert 'orders -> FLOELINE.PUBLIC."orders"' in out  # the 4.x connector keeps the topic's name
    assert err == ""


def test_validate_prints_topic_to_table_and_ignored_keys(tmp_path, capsys):
    assert validate(tmp_path / "c.properties",
                    "name=x\ntopics=orders\nconnector.class=com.snowflake.kafka.connector.SnowflakeSinkConnector\n"
                    "snowflake.url.name=a.snowflakecomputing.com:443\nsnowflake.role.name=r\n") == 0
    out, err = capsys.readouterr()
    assert "orders -> FLOELINE.PUBLIC.ORDERS" in out  # the 3.x connector's name
    assert "snowflake.url.name" in err and "snowflake.role.name" in err


def test_validate_names_unknown_key_and_closest(tmp_path, capsys):
    assert validate(tmp_path / "bad.properties",
                    "name=x\ntopics=my-topic.data,orders\nbuffer.flush.tim=3\n"
                    "snowflake.topic2table.map=orders:ORDER_TABLE\n") == 1
    err = capsys.readouterr().err
    assert "buffer.flush.tim" in err and "buffer.flush.time" in err


def test_validate_json_config_with_map(tmp_path, capsys):
    assert validate(tmp_path / "c.json",
                    '{"name": "x", "config": {"topics": "my-topic.data,orders", '
                    '"snowflake.topic2table.map": "orders:ORDER_TABLE"}}') == 0
    out = capsys.readouterr().out
    assert "orders -> FLOELINE.PUBLIC.ORDER_TABLE" in out
    assert "my-topic.data -> FLOELINE.PUBLIC.MY_TOPIC_DATA_" in out


def test_validate_shows_the_4x_connectors_table_names(tmp_path, capsys):
    assert validate(tmp_path / "c.properties",
                    "name=x\ntopics=et_orders,my-topic.data\n"
                    "connector.class=com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector\n") == 0
    out = capsys.readouterr().out
    assert 'et_orders -> FLOELINE.PUBLIC."et_orders"' in out
    assert 'my-topic.data -> FLOELINE.PUBLIC."my-topic.data"' in out


def test_validate_rejects_bad_map_with_position(tmp_path, capsys):
    assert validate(tmp_path / "c.properties",
                    "name=x\ntopics=a,b\nsnowflake.topic2table.map=a:T1,b\n") == 1
    err = capsys.readouterr().err
    assert "topic1:table1,topic2:table2" in err


def test_validate_accepts_avro_and_transforms(tmp_path, capsys):
    assert validate(tmp_path / "avro.properties",
                    "name=x\ntopics=a\nvalue.converter=io.confluent.connect.avro.AvroConverter\n"
                    "value.converter.schema.registry.url=http://localhost:8081\n"
                    "transforms=hoist\ntransforms.hoist.type=org.apache.kafka.connect.transforms.HoistField$Value\n"
                    "transforms.hoist.field=payload\n") == 0, capsys.readouterr().err


def test_validate_names_a_bad_transform_and_converter(tmp_path, capsys):
    assert validate(tmp_path / "bad.properties",
                    "name=x\ntopics=a\nvalue.converter=com.example.NoSuchConverter\n"
                    "transforms=t\ntransforms.t.type=org.apache.kafka.connect.transforms.NoSuch\n") == 1
    err = capsys.readouterr().err
    assert "com.example.NoSuchConverter" in err
    assert "transforms.t.type=org.apache.kafka.connect.transforms.NoSuch" in err  # both at once


def test_validate_names_a_bad_transform_option(tmp_path, capsys):
    assert validate(tmp_path / "bad.properties",
                    "name=x\ntopics=a\ntransforms=c\n"
                    "transforms.c.type=org.apache.kafka.connect.transforms.Cast$Value\n"
                    "transforms.c.spec=age:int33\n") == 1
    assert "transforms.c.spec='age:int33' names an unknown type 'int33'" in capsys.readouterr().err


def test_validate_shows_the_table_a_regexrouter_routes_to(tmp_path, capsys):
    assert validate(tmp_path / "routed.properties",
                    "name=x\ntopics=orders-raw\ntransforms=route\n"
                    "transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter\n"
                    "transforms.route.regex=(.*)-raw\ntransforms.route.replacement=$1\n") == 0
    out = capsys.readouterr().out
    assert "orders-raw -> FLOELINE.PUBLIC.ORDERS (routed as 'orders' by transforms)" in out
    assert "transforms: route: RegexRouter" in out
