"""The Kinesis connector's settings: defaults, validation messages, the source switch."""

import pytest

from floeline.config import config_from_dict
from floeline.config.kinesis import parse_timestamp_ms
from floeline.errors import ConfigError

BASE = {"name": "orders_kinesis", "floeline.source": "kinesis", "kinesis.stream.name": "orders",
        "aws.region": "us-east-1"}


def problems(settings: dict) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(settings)
    return str(info.value)


def test_defaults_follow_the_spec():
    cfg = config_from_dict(BASE)
    k = cfg.kinesis
    assert cfg.source == "kinesis" and cfg.topics == ()
    assert k.streams == ("orders",) and k.application_name == "orders_kinesis"
    assert k.initial_position == "TRIM_HORIZON" and k.initial_timestamp_ms is None
    assert k.aws.access_key_id is None and k.dlq_stream is None
    assert config_from_dict({"name": "c", "topics": "t"}).source == "kafka"  # Kafka stays the default


def test_all_keys():
    cfg = config_from_dict({**BASE, "kinesis.stream.name": "orders, refunds",
                            "kinesis.application.name": "orders-app",
                            "kinesis.initial.position": "at_timestamp",
                            "kinesis.initial.timestamp": "2026-11-22T10:00:00Z",
                            "aws.access.key.id": "AKIA", "aws.secret.access.key": "s3cret",
                            "kinesis.endpoint": "http://127.0.0.1:4568",
                            "dynamodb.endpoint": "http://127.0.0.1:5000",
                            "errors.deadletterqueue.stream.name": "orders-dlq"})
    k = cfg.kinesis
    assert k.streams == ("orders", "refunds") and k.application_name == "orders-app"
    assert (k.initial_position, k.initial_timestamp_ms) == ("AT_TIMESTAMP", 1795341600000)
    assert (k.aws.kinesis_endpoint, k.aws.dynamodb_endpoint) == ("http://127.0.0.1:4568", "http://127.0.0.1:5000")
    assert k.dlq_stream == "orders-dlq"
    assert "s3cret" not in repr(k)  # the secret never shows in a repr or log line


def test_problems_are_reported_together_with_a_fix():
    text = problems({"name": "x", "floeline.source": "kinesis", "topics": "orders",
                     "kinesis.initial.position": "AT_TIMESTAMP", "aws.access.key.id": "AKIA",
                     "kinesis.endpoint": "localhost:4568", "errors.deadletterqueue.topic.name": "dlq"})
    assert "missing required setting 'kinesis.stream.name'" in text
    assert "defaults to the connector's name, but 'x' cannot name a DynamoDB lease table" in text
    assert "AT_TIMESTAMP needs kinesis.initial.timestamp" in text
    assert "aws.access.key.id and aws.secret.access.key go together" in text
    assert "kinesis.endpoint='localhost:4568' is not a URL" in text
    assert "topics is not one of a Kinesis connector's settings" in text
    assert "errors.deadletterqueue.topic.name is not one of a Kinesis connector's settings" in text


def test_stream_names_and_loops_are_checked():
    text = problems({**BASE, "kinesis.stream.name": "ok,bad name,ok",
                     "errors.deadletterqueue.stream.name": "ok"})
    assert "'bad name' is not a valid Kinesis stream name" in text
    assert "lists 'ok' more than once" in text
    assert "is one of the streams this connector reads" in text


def test_kinesis_keys_in_a_kafka_config_are_mistakes():
    text = problems({"name": "c", "topics": "t", "kinesis.stream.name": "s"})
    assert "kinesis.stream.name is not one of a Kafka connector's settings; set floeline.source=kinesis" in text
    assert "floeline.source='pulsar' is not valid; accepted values: kafka, kinesis" in problems(
        {"name": "c", "topics": "t", "floeline.source": "pulsar"})


def test_timestamps():
    assert parse_timestamp_ms("1795341600000") == 1795341600000
    assert parse_timestamp_ms("2026-11-22T10:00:00") == 1795341600000  # no offset: UTC
    assert parse_timestamp_ms("2026-11-22T11:00:00+01:00") == 1795341600000
    with pytest.raises(ValueError):
        parse_timestamp_ms("yesterday")
