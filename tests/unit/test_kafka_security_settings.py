"""Kafka security keys: parsing, validation messages that never show a secret, the
Java options for Spark's Kafka source and the librdkafka mapping."""

import pytest

from floeline import secrets
from floeline.config import config_from_dict
from floeline.config.kafka_security import read_security
from floeline.errors import ConfigError
from floeline.sources.kafka_clients import client_config

PASSWORD = "s3cr3t-Pa55\"word"
SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
         'username="alice" password="s3cr3t-Pa55\\"word";')
BASE = {"name": "c", "topics": "orders", "bootstrap.servers": "broker:9093"}


def secured(**extra):
    return {**BASE, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM, **extra}


def config_problems(settings) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(settings)
    return str(info.value)


def test_default_is_plaintext_with_no_client_settings():
    config = config_from_dict(BASE)
    assert config.kafka_security.protocol == "PLAINTEXT"
    assert client_config("b:1", config.kafka_security) == {"bootstrap.servers": "b:1"}


def test_jaas_line_is_parsed_into_username_and_password():
    security = config_from_dict(secured()).kafka_security
    assert (security.protocol, security.mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (security.username, security.password) == ("alice", PASSWORD)
    assert PASSWORD not in repr(security) and PASSWORD not in security.describe()


def test_java_options_pass_the_keys_as_given():
    security = read_security(secured(**{"ssl.truststore.location": "/t.p12",
                                        "ssl.truststore.type": "pkcs12",
                                        "ssl.truststore.password": "storepw"}))
    assert security.java_options() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM,
        "ssl.endpoint.identification.algorithm": "https", "ssl.truststore.location": "/t.p12",
        "ssl.truststore.type": "PKCS12", "ssl.truststore.password": "storepw"}


def test_librdkafka_mapping_with_a_pem_ca():
    security = read_security(secured(**{"ssl.ca.location": "/ca.pem",
                                        "ssl.endpoint.identification.algorithm": ""}))
    assert client_config("b:1", security, **{"log_level": 2}) == {
        "bootstrap.servers": "b:1", "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORD,
        "ssl.endpoint.identification.algorithm": "none", "ssl.ca.location": "/ca.pem", "log_level": 2}
    assert security.java_options()["ssl.truststore.type"] == "PEM"


def test_consumer_override_keys_are_accepted():
    settings = {**BASE, "consumer.override.security.protocol": "SASL_PLAINTEXT",
                "consumer.override.sasl.jaas.config": SCRAM.replace("scram.ScramLoginModule",
                                                                    "plain.PlainLoginModule")}
    security = config_from_dict(settings).kafka_security
    assert (security.protocol, security.mechanism, security.username) == ("SASL_PLAINTEXT", "PLAIN", "alice")


@pytest.mark.parametrize("extra, expected", [
    ({"sasl.jaas.config": None}, "needs sasl.jaas.config"),
    ({"sasl.mechanism": "PLAIN"}, "must start with org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                          f'password="{PASSWORD}";'}, "has no username option"),
    ({"sasl.jaas.config": f'password="{PASSWORD}"'}, "it has no login module"),
    ({"security.protocol": "TLS"}, "security.protocol='TLS' is not valid"),
    ({"ssl.truststore.location": "/a.jks", "ssl.ca.location": "/b.pem"}, "keep one"),
    ({"consumer.override.sasl.jaas.config": SCRAM.replace("alice", "bob")},
     "sasl.jaas.config and consumer.override.sasl.jaas.config disagree (values hidden)"),
])
def test_problems_name_the_setting_and_never_the_secret(extra, expected):
    settings = {k: v for k, v in secured(**extra).items() if v is not None}
    message = config_problems(settings)
    assert expected in message
    assert "s3cr3t" not in message


def test_sasl_keys_without_a_sasl_protocol_are_a_mistake():
    message = config_problems({**BASE, "sasl.jaas.config": SCRAM})
    assert "security.protocol=PLAINTEXT does not use SASL" in message and "s3cr3t" not in message


def test_scrub_masks_every_secret_value_of_a_config():
    config_from_dict(secured(**{"snowflake.private.key": "MIIEvQIBADANBgkq-private"}))
    text = f"failed with {SCRAM} and key MIIEvQIBADANBgkq-private"
    assert secrets.scrub(text) == ('failed with **** and key ****')
    assert secrets.is_secret_key("kafka.sasl.jaas.config")
    assert secrets.is_secret_key("kafka.ssl.truststore.password")
    assert secrets.is_secret_key("aws.secret.access.key")
    assert not secrets.is_secret_key("bootstrap.servers")
