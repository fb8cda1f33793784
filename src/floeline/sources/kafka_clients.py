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

import threading

from floeline.config.kafka_security import KafkaSecurity
from floeline.config.tls import truststore_pem
from floeline.errors import ServiceError


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
