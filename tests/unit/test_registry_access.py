"""The schema registry client's auth and TLS settings (`<key|value>.converter.*` as
Confluent's converters name them): what a config gets wrong is named with the fix and
never echoes a secret; and a real TLS handshake (Python's ssl on both sides, no Java):
the client trusts a private CA given as PEM (file or inline), shows a PKCS12 or PEM
client certificate, sends its bearer token, and says which setting to fix when the
certificate or the token is refused. The same against the real registry (Apicurio)
behind the TLS front, with Java's JKS stores, is tests/integration/test_registry_tls.py."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from floeline import retry
from floeline.config import config_from_dict
from floeline.config.decoding import AVRO_CONVERTER, ConverterSpec
from floeline.config.registry_access import RegistryAccess
from floeline.dev.kafka_secure import SecureBrokerSecrets
from floeline.dev.tls_front import TlsFront
from floeline.errors import ConfigError
from floeline.records.converters.schema_registry import registry_for

TOKEN = "tok-3f9a.b7c"
PASSWORD = "st0re-Pa55"
BASE = {"name": "c", "topics": "orders", "value.converter": AVRO_CONVERTER,
        "value.converter.schema.registry.url": "https://registry.example:8081"}


def problems_of(**settings) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict({**BASE, **{k.replace("__", "."): v for k, v in settings.items()}})
    return str(info.value)


def v(key: str) -> str:
    return f"value.converter.{key}"


# ---- settings -------------------------------------------------------------------


def test_bearer_sources_other_than_a_static_token_are_named_config_errors():
    said = problems_of(**{v("bearer.auth.credentials.source"): "OAUTHBEARER"})
    assert "value.converter.bearer.auth.credentials.source=OAUTHBEARER is not supported" in said
    assert "STATIC_TOKEN with value.converter.bearer.auth.token" in said
    said = problems_of(**{v("bearer.auth.credentials.source"): "TOKEN_FILE"})
    assert "TOKEN_FILE is not a bearer credentials source; accepted value: STATIC_TOKEN" in said
    said = problems_of(**{v("bearer.auth.credentials.source"): "STATIC_TOKEN"})
    assert "STATIC_TOKEN needs value.converter.bearer.auth.token" in said


def test_basic_and_bearer_together_or_a_token_without_its_source_are_refused():
    said = problems_of(**{v("bearer.auth.credentials.source"): "STATIC_TOKEN", v("bearer.auth.token"): TOKEN,
                          v("basic.auth.credentials.source"): "USER_INFO",
                          v("basic.auth.user.info"): "u:" + PASSWORD})
    assert "basic.auth.credentials.source and value.converter.bearer.auth.credentials.source " \
           "are both set" in said
    assert TOKEN not in said and PASSWORD not in said
    said = problems_of(**{v("bearer.auth.token"): TOKEN})
    assert "bearer.auth.token is set but value.converter.bearer.auth.credentials.source is not" in said
    assert TOKEN not in said


def test_tls_settings_that_do_not_fit_together_name_the_keys():
    said = problems_of(**{v("schema.registry.ssl.truststore.type"): "JKSX",
                          v("schema.registry.ssl.keystore.key"): "-----BEGIN PRIVATE KEY-----x",
                          v("schema.registry.ssl.keystore.password"): PASSWORD,
                          v("schema.registry.ssl.endpoint.identification.algorithm"): "dns"})
    assert "value.converter.schema.registry.ssl.truststore.type='JKSX' is not valid; accepted " \
           "values: JKS, PKCS12, PEM" in said
    assert "value.converter.schema.registry.ssl.keystore.key is set without " \
           "value.converter.schema.registry.ssl.keystore.certificate.chain" in said
    assert "ssl.endpoint.identification.algorithm='dns' is not valid" in said
    assert PASSWORD not in said and "x" + "-----" not in said
    said = problems_of(**{v("schema.registry.ssl.truststore.certificates"): "not a certificate",
                          v("schema.registry.ssl.truststore.type"): "JKS"})
    assert "ssl.truststore.certificates is PEM text, but " \
           "value.converter.schema.registry.ssl.truststore.type=JKS" in said


def test_headers_carry_the_token_and_a_managed_registrys_routing():
    access = RegistryAccess("https://r", bearer_token=TOKEN, logical_cluster="lsrc-1",
                            identity_pool="pool-2")
    assert access.headers() == {"Authorization": f"Bearer {TOKEN}", "target-sr-cluster": "lsrc-1",
                                "Confluent-Identity-Pool-Id": "pool-2"}
    assert TOKEN not in repr(access)


def test_credentials_in_the_url_become_basic_auth_and_leave_the_url():
    spec = ConverterSpec("value", AVRO_CONVERTER, (
        ("basic.auth.credentials.source", "URL"),
        ("schema.registry.url", "https://alice:p%40ss@r1:8081,https://r2:8081")))
    client = registry_for(spec, shared=False)
    assert client.display == "https://r1:8081,https://r2:8081"
    assert client.access.user_info == "alice:p@ss"
    assert client.access.headers()["Authorization"] == "Basic YWxpY2U6cEBzcw=="


# ---- a real TLS handshake ---------------------------------------------------------


def _certificate(name: str, key, issuer_name: str, issuer_key, ca: bool = False, san: bool = True):
    """A certificate; a server's names localhost only (not 127.0.0.1)."""
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    """A CA, a server key pair for localhost in a PKCS12 store (the layout of
    dev/kafka_secure.py's SecureBrokerSecrets), a client key pair as PKCS12 and PEM,
    and a second CA nobody uses."""
    tmp: Path = tmp_path_factory.mktemp("pki")
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test CA", ca_key, "test CA", ca_key, ca=True, san=False)
    other = _certificate("other CA", other_key, "other CA", other_key, ca=True, san=False)
    found = {}
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(role, key, "test CA", ca_key)
        store = tmp / f"{role}.p12"
        store.write_bytes(pkcs12.serialize_key_and_certificates(
            role.encode(), key, cert, [ca],
            serialization.BestAvailableEncryption(PASSWORD.encode())))
        found[role] = {"p12": store, "key": _key_pem(key), "chain": _pem(cert) + _pem(ca)}
    (tmp / "broker.keystore.p12").write_bytes(found["server"]["p12"].read_bytes())
    (tmp / "ca.pem").write_text(_pem(ca))
    (tmp / "other-ca.pem").write_text(_pem(other))
    pem_keystore = tmp / "client.pem"
    pem_keystore.write_text(found["client"]["key"] + found["client"]["chain"])
    return {"dir": tmp, "ca": tmp / "ca.pem", "other_ca": tmp / "other-ca.pem",
            "client_p12": found["client"]["p12"], "client_key": found["client"]["key"],
            "client_chain": found["client"]["chain"], "client_pem": pem_keystore,
            "secrets": SecureBrokerSecrets(tmp, "u", "b", PASSWORD)}


@pytest.fixture(scope="module")
def registry():
    """A small HTTP service answering GET /schemas/ids/N as a registry does."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"schema": '"string"'}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def front(pki, registry):
    """HTTPS with mutual TLS and a bearer token in front of the registry."""
    front = TlsFront(registry, pki["secrets"], token=TOKEN, client_certificates=True)
    yield front
    front.close()


def client_for(front: TlsFront, host: str = "localhost", timeout_s: float = 0.3, **options):
    spec = ConverterSpec("value", AVRO_CONVERTER, tuple(sorted({
        "schema.registry.url": front.url(host=host), **options}.items())))
    return registry_for(spec, retry.RetryPolicy(timeout_s, 0.05), shared=False)


def secured(pki, **more) -> dict:
    return {"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": TOKEN,
            "schema.registry.ssl.truststore.location": str(pki["ca"]),
            "schema.registry.ssl.truststore.type": "PEM",
            "schema.registry.ssl.keystore.location": str(pki["client_p12"]),
            "schema.registry.ssl.keystore.type": "PKCS12",
            "schema.registry.ssl.keystore.password": PASSWORD, **more}


def test_private_ca_client_certificate_and_token_reach_the_registry(pki, front):
    before = len(front.seen)
    assert client_for(front, **secured(pki)).by_id(1) == {"schema": '"string"'}
    seen = front.seen[before:]
    assert [s.authorization for s in seen] == [f"Bearer {TOKEN}"]
    assert dict(x[0] for x in seen[0].client_certificate["subject"])["commonName"] == "client"


def test_pem_forms_inline_and_in_one_file(pki, front):
    inline = secured(pki, **{"schema.registry.ssl.truststore.certificates": pki["ca"].read_text(),
                             "schema.registry.ssl.keystore.key": pki["client_key"],
                             "schema.registry.ssl.keystore.certificate.chain": pki["client_chain"]})
    for key in ("schema.registry.ssl.truststore.location", "schema.registry.ssl.truststore.type",
                "schema.registry.ssl.keystore.location", "schema.registry.ssl.keystore.type",
                "schema.registry.ssl.keystore.password"):
        del inline[key]
    assert client_for(front, **inline).by_id(2) == {"schema": '"string"'}
    one_file = secured(pki, **{"schema.registry.ssl.keystore.location": str(pki["client_pem"]),
                               "schema.registry.ssl.keystore.type": "PEM"})
    del one_file["schema.registry.ssl.keystore.password"]
    assert client_for(front, **one_file).by_id(3) == {"schema": '"string"'}
    # librdkafka's name for the CA file, as for Kafka's own settings
    shorthand = secured(pki, **{"schema.registry.ssl.ca.location": str(pki["ca"])})
    del shorthand["schema.registry.ssl.truststore.location"], shorthand["schema.registry.ssl.truststore.type"]
    assert client_for(front, **shorthand).by_id(4) == {"schema": '"string"'}


def test_an_untrusted_certificate_names_the_truststore_at_once(pki, front):
    for options in (secured(pki, **{"schema.registry.ssl.truststore.location": str(pki["other_ca"])}),
                    {k: v for k, v in secured(pki).items() if "truststore" not in k}):
        client = client_for(front, timeout_s=30, **options)
        with pytest.raises(ConfigError, match="its TLS certificate was refused .*value.converter."
                                              "schema.registry.ssl.truststore.location") as info:
            client.by_id(5)
        assert "Retrying cannot fix this" in str(info.value)


def test_a_host_name_the_certificate_does_not_name(pki, front):
    # the server certificate names localhost, not 127.0.0.1
    client = client_for(front, host="127.0.0.1", timeout_s=30, **secured(pki))
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm"):
        client.by_id(6)
    relaxed = secured(pki, **{"schema.registry.ssl.endpoint.identification.algorithm": ""})
    assert client_for(front, host="127.0.0.1", **relaxed).by_id(6) == {"schema": '"string"'}


def test_a_refused_token_or_a_missing_client_certificate_names_the_setting(pki, front):
    with pytest.raises(ConfigError, match="HTTP 401.*check value.converter.bearer.auth.token") as info:
        client_for(front, **secured(pki, **{"bearer.auth.token": "expired"})).by_id(7)
    assert "expired" not in str(info.value)
    no_keystore = {k: v for k, v in secured(pki).items() if "keystore" not in k}
    with pytest.raises(ConfigError, match="refused the TLS handshake .*client certificate, set "
                                          "value.converter.schema.registry.ssl.keystore.location"):
        client_for(front, timeout_s=30, **no_keystore).by_id(8)  # at once: not retried


def test_a_keystore_that_cannot_be_opened_names_its_keys(pki, front):
    wrong = secured(pki, **{"schema.registry.ssl.keystore.password": "wrong-" + PASSWORD})
    with pytest.raises(ConfigError, match="schema.registry.ssl.keystore.location=.*client.p12 cannot "
                                          "be opened as PKCS12 .*ssl.keystore.password") as info:
        client_for(front, **wrong).by_id(9)
    assert PASSWORD not in str(info.value)
    broken = secured(pki, **{"schema.registry.ssl.truststore.certificates":
                             "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----"})
    del broken["schema.registry.ssl.truststore.location"], broken["schema.registry.ssl.truststore.type"]
    with pytest.raises(ConfigError, match="ssl.truststore.certificates: its certificates cannot be loaded"):
        client_for(front, timeout_s=30, **broken).by_id(10)
    missing = secured(pki, **{"schema.registry.ssl.truststore.location": str(pki["dir"] / "nope.pem")})
    with pytest.raises(ConfigError, match="ssl.truststore.location=.*nope.pem: cannot read the "
                                          "truststore"):
        client_for(front, **missing).by_id(10)


def test_registry_secrets_are_secret_keys():
    from floeline import secrets

    for key in ("value.converter.bearer.auth.token", "value.converter.basic.auth.user.info",
                "value.converter.schema.registry.ssl.keystore.key",
                "value.converter.schema.registry.ssl.key.password"):
        assert secrets.is_secret_key(key), key
    assert not secrets.is_secret_key("value.converter.schema.registry.ssl.keystore.location")
