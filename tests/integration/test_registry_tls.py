"""The schema registry behind TLS, as a managed registry is: the real registry (Apicurio)
behind an HTTPS front (dev/tls_front.py) that asks for a client certificate signed by
the local CA and a bearer token. A connector reading Avro through it with Java's store
forms (a JKS truststore, a PKCS12 or JKS keystore) lands every record; the front saw the
token and the certificate. The PEM forms and the refusals' messages are in
tests/unit/test_registry_access.py (Python's ssl on both sides)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse

import pytest

from floeline.config.decoding import AVRO_CONVERTER, ConverterSpec
from floeline.dev import kafka as devkafka
from floeline.dev.kafka_secure import KEYTOOL_JVM_FLAGS, ensure_secrets
from floeline.dev.tls_front import TlsFront
from floeline.errors import ConfigError
from floeline.records.converters.schema_registry import registry_for
from floeline.sources.kafka import produce
from records_io import ORDER_V1, avro, register, wire

TOKEN = "sr-token-7d1e"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """The local CA's files (dev/kafka_secure.py) and a JKS copy of the keystore whose
    certificate (localhost, 127.0.0.1; server and client use) the client shows."""
    found = ensure_secrets(tmp_path_factory.mktemp("registry-tls"))
    jks = found.tls_dir / "client.keystore.jks"
    subprocess.run(["keytool", *KEYTOOL_JVM_FLAGS, "-importkeystore", "-noprompt",
                    "-srckeystore", str(found.keystore), "-srcstoretype", "PKCS12",
                    "-srcstorepass:env", "P", "-destkeystore", str(jks), "-deststoretype", "JKS",
                    "-deststorepass:env", "P"], check=True, capture_output=True,
                   env={**os.environ, "P": found.store_password})
    return found, jks


@pytest.fixture(scope="module")
def front(schema_registry, tls):
    """The registry's URL through the HTTPS front (mutual TLS and the token required)."""
    parts = urllib.parse.urlsplit(schema_registry)
    front = TlsFront(f"{parts.scheme}://{parts.netloc}", tls[0], token=TOKEN, client_certificates=True)
    yield front, front.url(parts.path)
    front.close()


def converter_settings(url: str, tls, keystore: str = "PKCS12") -> dict[str, str]:
    found, jks = tls
    prefix = "value.converter."
    return {prefix + k: v for k, v in {
        "schema.registry.url": url,
        "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": TOKEN,
        "schema.registry.ssl.truststore.location": str(found.truststore_jks),
        "schema.registry.ssl.truststore.type": "JKS",
        "schema.registry.ssl.truststore.password": found.store_password,
        "schema.registry.ssl.keystore.location": str(found.keystore if keystore == "PKCS12" else jks),
        "schema.registry.ssl.keystore.type": keystore,
        "schema.registry.ssl.keystore.password": found.store_password}.items()}


def test_avro_through_a_registry_behind_mutual_tls_and_a_token(
        kafka, schema_registry, front, tls, topic_name, make_config, run_connector, read_table):
    tls_front, url = front
    topic = topic_name("avro_tls")
    devkafka.create_topic(kafka, topic)
    schema_id = register(schema_registry, f"{topic}-value", json.dumps(ORDER_V1))
    order = {"id": 1, "amount": b"\x07\xcf", "at": 1714979289123, "status": "PAID", "tags": {},
             "note": None}
    produce(kafka, topic, [{"value": wire(schema_id, avro(ORDER_V1, {**order, "id": i}))}
                           for i in range(3)], partition=0)
    before = len(tls_front.seen)
    run_connector(make_config(**{"topics": topic, "value.converter": AVRO_CONVERTER,
                                 **converter_settings(url, tls)}))
    assert sorted(r["ID"] for r in read_table(topic.upper()).collect()) == [0, 1, 2]
    seen = tls_front.seen[before:]
    assert seen and all(s.authorization == f"Bearer {TOKEN}" for s in seen)
    assert all(s.path.endswith(f"/schemas/ids/{schema_id}") for s in seen)
    assert all(dict(x[0] for x in s.client_certificate["subject"])["commonName"] == "localhost"
               for s in seen)


def test_java_keystore_forms_and_a_wrong_token_against_the_real_registry(
        schema_registry, front, tls):
    tls_front, url = front
    schema_id = register(schema_registry, "tls-forms-value", json.dumps(ORDER_V1))

    def client(**changed):
        options = {k.removeprefix("value.converter."): v for k, v in converter_settings(url, tls, "JKS").items()}
        return registry_for(ConverterSpec("value", AVRO_CONVERTER, tuple(sorted({**options, **changed}.items()))),
                            shared=False)

    assert json.loads(client().by_id(schema_id)["schema"])["name"] == "Order"
    with pytest.raises(ConfigError, match="HTTP 401.*value.converter.bearer.auth.token") as info:
        client(**{"bearer.auth.token": "stale-token"}).by_id(schema_id)
    assert "stale-token" not in str(info.value)
    with pytest.raises(ConfigError, match="keystore.location=.*client.keystore.jks.*keystore.password"):
        client(**{"schema.registry.ssl.keystore.password": "wrong"}).by_id(schema_id)
