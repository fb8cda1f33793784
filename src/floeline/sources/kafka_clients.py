"""librdkafka (confluent-kafka) settings from a connector's Kafka security keys: the
admin client, the offset reader, the sampler and the DLQ producer all connect through
`client_config`, so a secured cluster needs nothing beyond the usual Kafka Connect keys.

The mapping: security.protocol as is; sasl.mechanism -> sasl.mechanisms; the username
and password parsed out of sasl.jaas.config -> sasl.username / sasl.password; a JKS or
PKCS12 truststore -> its certificates as PEM (ssl.ca.pem; librdkafka reads no Java
keystore), a PEM one -> ssl.ca.location; ssl.endpoint.identification.algorithm "" ->
"none". Authentication failures are recorded by an error callback (`AuthFailures`)
so a call fails at once with the setting to fix instead of timing out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from functools import lru_cache

from floeline.config.kafka_security import KafkaSecurity
from floeline.errors import ConfigError, ServiceError

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def client_config(bootstrap: str, security: KafkaSecurity | None, **extra) -> dict:
    """The librdkafka settings reaching `bootstrap` with `security`, plus `extra`."""
    config = {"bootstrap.servers": bootstrap}
    security = security or KafkaSecurity()
    if security.protocol != "PLAINTEXT":
        config["security.protocol"] = security.protocol.lower()
    if security.uses_sasl:
        config["sasl.mechanisms"] = security.mechanism or "PLAIN"
        config["sasl.username"] = security.username or ""
        config["sasl.password"] = security.password or ""
    if security.uses_tls:
        config["ssl.endpoint.identification.algorithm"] = security.endpoint_identification or "none"
        if security.truststore_location:
            if security.truststore_type == "PEM":
                config["ssl.ca.location"] = security.truststore_location
            else:
                config["ssl.ca.pem"] = truststore_pem(security.truststore_location,
                                                      security.truststore_type,
                                                      security.truststore_password)
    config.update(extra)
    return config


def truststore_pem(location: str, store_type: str, password: str | None) -> str:
    """The CA certificates of a JKS or PKCS12 truststore as PEM, read with keytool (it
    comes with every JDK and JRE); cached per file version."""
    try:
        version = os.stat(location).st_mtime_ns
    except OSError as exc:
        raise ConfigError(f"ssl.truststore.location={location}: cannot read it "
                          f"({exc.strerror or exc}); point it at the truststore file") from None
    return _truststore_pem(location, store_type, password, version)


@lru_cache(maxsize=8)
def _truststore_pem(location: str, store_type: str, password: str | None, _version: int) -> str:
    if shutil.which("keytool") is None:
        raise ConfigError(f"ssl.truststore.location={location} is a {store_type} truststore and "
                          f"reading it needs `keytool` (part of Java) on PATH; install Java or "
                          f"give the CA as PEM with ssl.ca.location instead")
    cmd = ["keytool", "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-list", "-rfc", "-keystore", location, "-storetype", store_type]
    env = dict(os.environ)
    if password:
        cmd += ["-storepass:env", "FLOELINE_TRUSTSTORE_PASSWORD"]
        env["FLOELINE_TRUSTSTORE_PASSWORD"] = password
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    certificates = _PEM_CERT.findall(done.stdout)
    if done.returncode != 0 or not certificates:
        said = (done.stdout + done.stderr).strip().splitlines()
        reason = said[-1] if said else f"exit {done.returncode}"
        if password:
            reason = reason.replace(password, "****")
        raise ConfigError(f"cannot read the certificates of ssl.truststore.location={location} "
                          f"(ssl.truststore.type={store_type}): {reason}. Check the file, "
                          f"ssl.truststore.type and ssl.truststore.password")
    return "\n".join(certificates) + "\n"


class AuthFailures:
    """librdkafka's error callback, keeping the last authentication or TLS failure.
    Such a failure shows only there: the request itself just times out."""

    def __init__(self):
        self._lock = threading.Lock()
        self.last = None

    def __call__(self, error) -> None:
        from confluent_kafka import KafkaError

        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) or \
                error.code() == getattr(KafkaError, "SASL_AUTHENTICATION_FAILED", None):
            with self._lock:
                self.last = error

    def raise_if_any(self, bootstrap: str, security: KafkaSecurity | None) -> None:
        if self.last is not None:
            raise auth_error(self.last, bootstrap, security)


def auth_error(error, bootstrap: str, security: KafkaSecurity | None) -> ServiceError:
    """A terminal error naming the settings to fix (never their secret values)."""
    from confluent_kafka import KafkaError

    security = security or KafkaSecurity()
    reason = error.str() if hasattr(error, "str") else str(error)
    if error.code() == KafkaError._SSL:
        fix = ("check ssl.truststore.location (it must hold the CA that signed the broker's "
               "certificate), ssl.truststore.type and ssl.endpoint.identification.algorithm")
        what = "the TLS handshake"
    else:
        fix = (f"check the username and password in sasl.jaas.config (user {security.username!r}) "
               f"and sasl.mechanism={security.mechanism}")
        what = "SASL authentication"
    return AuthenticationFailed(f"Kafka at bootstrap.servers={bootstrap}: {what} failed ({reason}); "
                                f"{fix}. Retrying cannot fix this.")


class AuthenticationFailed(ServiceError):
    """The broker refused the client's credentials or certificate check: terminal."""
