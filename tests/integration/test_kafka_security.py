"""A SASL_SSL broker (PLAIN and SCRAM-SHA-512, TLS; the `secure_kafka` fixture):
connectors ingest with good credentials through every Kafka client floeline has (Spark's
Kafka source, the admin and offset clients, the DLQ producer, `floeline status`), a
wrong password or an untrusted certificate fails at once naming the setting, and no
secret value shows in any output of a full run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from floeline.dev import kafka as devkafka
from floeline.config import config_from_dict
from floeline.config.kafka_security import read_security
from floeline.sources.kafka import KafkaCluster, produce
from floeline.sources.kafka_clients import AuthenticationFailed

RECORDS = [{"order_id": i, "item": f"item-{i}"} for i in range(40)]


def client_settings(state, mechanism="SCRAM-SHA-512", **changes):
    settings = devkafka.secure_client_settings(state, mechanism)
    settings.update(changes)
    return settings


def wrong_password(state, mechanism="SCRAM-SHA-512") -> tuple[dict, str]:
    settings = client_settings(state, mechanism)
    wrong = "Wrong-" + uuid.uuid4().hex
    good = json.loads((Path(state) / "tls" / "secrets.json").read_text())["user_password"]
    settings["sasl.jaas.config"] = settings["sasl.jaas.config"].replace(good, wrong)
    return settings, wrong


def consume_all(settings, topic: str, count: int, timeout_s: float = 30) -> list:
    from confluent_kafka import Consumer

    from floeline.sources.kafka_clients import client_config

    consumer = Consumer(client_config(settings["bootstrap.servers"], read_security(settings), **{
        "group.id": f"check-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    found, deadline = [], time.monotonic() + timeout_s
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    return found


def test_plain_with_a_pkcs12_truststore_ingests_end_to_end(secure_kafka, spark, warehouse, topic_name,
                                                            run_connector, read_table):
    settings = client_settings(secure_kafka, "PLAIN", **{
        "ssl.truststore.location": str(Path(secure_kafka) / "tls" / "truststore.p12"),
        "ssl.truststore.type": "PKCS12"})
    topic, dlq = topic_name("sec_plain"), topic_name("sec_plain_dlq")
    produce(settings["bootstrap.servers"], topic, RECORDS + ["not json"], security=read_security(settings))
    config = config_from_dict({**settings, "name": f"c{uuid.uuid4().hex[:6]}", "topics": topic,
                               "floeline.warehouse": warehouse, "buffer.flush.time": "1",
                               "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    connector = run_connector(config)
    rows = read_table(topic.upper()).orderBy("ORDER_ID").collect()
    assert [r.ORDER_ID for r in rows] == list(range(40))
    dead = consume_all(settings, dlq, 1)
    assert [m.value() for m in dead] == [b"not json"]
    group = connector.source.cluster.group_offsets(connector.source.group, [(topic, 0)])
    assert group == {(topic, 0): 41}
    # Spark redacts the secret-bearing Kafka source options floeline sets
    redaction = spark.conf.get("spark.redaction.regex")
    for key, value in config.kafka_security.java_options().items():
        if value in (settings["sasl.jaas.config"], settings["ssl.truststore.password"]):
            assert re.search(redaction, f"kafka.{key}"), key


def test_a_pem_ca_file_is_accepted(secure_kafka, topic_name):
    settings = client_settings(secure_kafka, **{"ssl.ca.location": str(Path(secure_kafka) / "tls" / "ca.pem")})
    del settings["ssl.truststore.location"], settings["ssl.truststore.type"], settings["ssl.truststore.password"]
    topic = topic_name("sec_pem")
    security = read_security(settings)
    produce(settings["bootstrap.servers"], topic, RECORDS[:3], security=security)
    cluster = KafkaCluster(settings["bootstrap.servers"], security=security)
    assert cluster.partitions((topic,)) == {topic: 1}
    assert cluster.latest([(topic, 0)]) == {(topic, 0): 3}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_fails_fast_naming_the_setting(secure_kafka, spark, warehouse, mechanism):
    from floeline.ingest import Connector

    settings, wrong = wrong_password(secure_kafka, mechanism)
    config = config_from_dict({**settings, "name": f"c{uuid.uuid4().hex[:6]}", "topics": "anything",
                               "floeline.warehouse": warehouse})
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed) as info:
        Connector(config, spark).run(until_caught_up=True)
    took = time.monotonic() - started
    message = str(info.value)
    assert took < 15, took
    assert "sasl.jaas.config" in message and "'floeline'" in message and mechanism in message
    assert wrong not in message and "Wrong-" not in message


def test_an_untrusted_broker_certificate_names_the_truststore(secure_kafka):
    settings = client_settings(secure_kafka, **{"ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"})
    del settings["ssl.truststore.location"], settings["ssl.truststore.type"], settings["ssl.truststore.password"]
    cluster = KafkaCluster(settings["bootstrap.servers"], security=read_security(settings))
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed, match="ssl.truststore.location"):
        cluster.partitions(("anything",))
    assert time.monotonic() - started < 10


def floeline(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "floeline.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def test_secrets_never_appear_in_any_output(secure_kafka, tmp_path, topic_name, spark):
    """SCRAM-SHA-512 with a JKS truststore through the command line, end to end: every
    stdout/stderr, Spark's log, the checkpoint and the warehouse are searched for the
    password, the truststore password, a wrong password and the ignored Snowflake keys."""
    from floeline.cache import cache_dir

    settings = client_settings(secure_kafka)
    topic, dlq = topic_name("sec_scram"), topic_name("sec_scram_dlq")
    produce(settings["bootstrap.servers"], topic, RECORDS + ["not json"], security=read_security(settings))
    private_key, passphrase = "MIIEvQ" + uuid.uuid4().hex, "Pass-" + uuid.uuid4().hex
    warehouse = tmp_path / "warehouse"
    base = {**settings, "name": f"c{uuid.uuid4().hex[:6]}", "topics": topic,
            "floeline.warehouse": str(warehouse), "buffer.flush.time": "1",
            "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
            "snowflake.private.key": private_key, "snowflake.private.key.passphrase": passphrase}
    good = tmp_path / "good.properties"
    good.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    bad_settings, wrong = wrong_password(secure_kafka)
    bad = tmp_path / "bad.properties"
    bad.write_text("".join(f"{k}={v}\n" for k, v in {**base, **bad_settings, "name": "bad"}.items()))
    spark_log = cache_dir() / "spark-driver.log"
    log_start = spark_log.stat().st_size if spark_log.exists() else 0

    outputs, took = {}, {}
    for label, args in [("validate", ("validate", str(good))), ("run", ("run", str(good), "--until-caught-up")),
                        ("status", ("status", str(good))), ("bad run", ("run", str(bad), "--until-caught-up")),
                        ("bad status", ("status", str(bad)))]:
        started = time.monotonic()
        done = floeline(*args)
        took[label] = time.monotonic() - started
        outputs[label] = (done.returncode, done.stdout + done.stderr)
    assert outputs["validate"][0] == 0 and outputs["run"][0] == 0, outputs
    assert "rows=40" in outputs["status"][1] and "records=1" in outputs["status"][1], outputs["status"]
    assert outputs["bad run"][0] == 1 and "sasl.jaas.config" in outputs["bad run"][1], outputs["bad run"]
    assert "sasl.jaas.config" in outputs["bad status"][1], outputs["bad status"]
    # a refused login is known after the first request: status does not wait out the
    # timeout of each of its Kafka calls (three of them here) to say so
    assert took["bad status"] < 15, took  # three timeouts took 31 s
    rows = spark.read.format("delta").load(str(warehouse / "FLOELINE" / "PUBLIC" / topic.upper())).count()
    assert rows == 40

    secret_values = [json.loads((Path(secure_kafka) / "tls" / "secrets.json").read_text())["user_password"],
                     settings["ssl.truststore.password"], wrong, private_key, passphrase]
    texts = {label: text for label, (_code, text) in outputs.items()}
    with open(spark_log, "rb") as log:
        log.seek(log_start)
        texts["spark-driver.log"] = log.read().decode("utf-8", "replace")
    files = [p for p in warehouse.rglob("*") if p.is_file()]
    assert any("_checkpoints" in str(p) for p in files)  # the checkpoint lives in the warehouse
    for path in files:
        texts[str(path)] = path.read_bytes().decode("latin-1")
    leaks = [(where, value[:6]) for where, text in texts.items() for value in secret_values if value in text]
    assert leaks == []
