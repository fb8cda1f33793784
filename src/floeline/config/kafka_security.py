"""How floeline's Kafka clients authenticate and encrypt: the Kafka Connect / Java
client keys (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`,
`ssl.truststore.*`, `ssl.endpoint.identification.algorithm`; each also accepted as
`consumer.override.<key>`, Kafka Connect's per-connector form) read into one typed,
validated KafkaSecurity. Spark's Kafka source takes the keys as they are
(`java_options`); the librdkafka clients (admin, offsets, DLQ producer) get them mapped
in sources/kafka_clients.py.

Problems name the key and never echo a secret value (the JAAS line, a password)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from floeline import secrets
from floeline.config.tls import STORE_TYPES, read_tls
from floeline.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TRUSTSTORE_TYPES = STORE_TYPES
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# ssl.ca.location is librdkafka's name (a CA PEM file); accepted as a shorthand for
# ssl.truststore.type=PEM with that file.
KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.type", "ssl.endpoint.identification.algorithm",
    "ssl.ca.location",
})
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


@dataclass(frozen=True)
class KafkaSecurity:
    """A connector's Kafka security settings; the default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"  # security.protocol
    mechanism: str | None = None  # sasl.mechanism (SASL_* protocols; default PLAIN)
    jaas_config: str | None = field(default=None, repr=False)  # sasl.jaas.config, as given
    username: str | None = None  # parsed out of sasl.jaas.config
    password: str | None = field(default=None, repr=False)  # parsed out of sasl.jaas.config
    truststore_location: str | None = None  # ssl.truststore.location (or ssl.ca.location)
    truststore_password: str | None = field(default=None, repr=False)  # ssl.truststore.password
    truststore_type: str = "JKS"  # ssl.truststore.type: JKS, PKCS12 or PEM
    # ssl.endpoint.identification.algorithm: "https" (check the broker's host name, the
    # default) or "" (do not)
    endpoint_identification: str = "https"

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def java_options(self) -> dict[str, str]:
        """The Java client's keys, for Spark's Kafka source (prefixed `kafka.` there)."""
        options = {"security.protocol": self.protocol}
        if self.uses_sasl:
            options["sasl.mechanism"] = self.mechanism or "PLAIN"
            if self.jaas_config:
                options["sasl.jaas.config"] = self.jaas_config
        if self.uses_tls:
            options["ssl.endpoint.identification.algorithm"] = self.endpoint_identification
            if self.truststore_location:
                options["ssl.truststore.location"] = self.truststore_location
                options["ssl.truststore.type"] = self.truststore_type
                if self.truststore_password:
                    options["ssl.truststore.password"] = self.truststore_password
        return options

    def describe(self) -> str:
        """What `validate` shows: the protocol, mechanism and user, never a secret."""
        parts = [f"security.protocol={self.protocol}"]
        if self.uses_sasl:
            parts.append(f"sasl.mechanism={self.mechanism or 'PLAIN'} user={self.username!r}")
        if self.uses_tls and self.truststore_location:
            parts.append(f"truststore={self.truststore_location} ({self.truststore_type})")
        return " ".join(parts)


def read_security(settings: Mapping[str, str], problems: list[str] | None = None) -> KafkaSecurity:
    """The KafkaSecurity of `settings`. Problems are appended to `problems` when given
    (the config reader collects them), else raised as one ConfigError."""
    collected: list[str] = [] if problems is None else problems
    before = len(collected)
    found = _read(settings, collected)
    if problems is None and len(collected) > before:
        raise ConfigError("; ".join(collected))
    return found


def _value(settings: Mapping[str, str], key: str, problems: list[str]) -> str | None:
    own, override = settings.get(key), settings.get(f"consumer.override.{key}")
    own = own.strip() if own is not None else None
    override = override.strip() if override is not None else None
    if own is not None and override is not None and own != override:
        shown = "(values hidden)" if secrets.is_secret_key(key) else f"({own!r} and {override!r})"
        problems.append(f"{key} and consumer.override.{key} disagree {shown}; keep one")
    return own if own is not None else override


def _choice(settings, key: str, default: str, accepted: tuple[str, ...], problems) -> str:
    value = _value(settings, key, problems)
    if value is None or value == "":
        return default
    for option in accepted:
        if value.upper() == option:
            return option
    problems.append(f"{key}={value!r} is not valid; accepted values: {', '.join(accepted)}")
    return default


def _read(settings: Mapping[str, str], problems: list[str]) -> KafkaSecurity:
    protocol = _choice(settings, "security.protocol", "PLAINTEXT", PROTOCOLS, problems)
    mechanism = _choice(settings, "sasl.mechanism", "PLAIN", MECHANISMS, problems)
    jaas = _value(settings, "sasl.jaas.config", problems)
    username = password = None
    if protocol.startswith("SASL_"):
        if not jaas:
            problems.append(f"security.protocol={protocol} needs sasl.jaas.config, e.g. "
                            f'{_LOGIN_MODULES[mechanism]} required username="..." password="...";')
        else:
            username, password = _jaas_credentials(jaas, mechanism, problems)
    elif jaas or _value(settings, "sasl.mechanism", problems):
        problems.append(f"sasl.mechanism / sasl.jaas.config are set but security.protocol={protocol} "
                        f"does not use SASL; set security.protocol=SASL_SSL (or SASL_PLAINTEXT)")
    tls = read_tls(lambda key: _value(settings, key, problems), problems, keystore=False)
    secrets.remember(jaas, password)
    return KafkaSecurity(protocol, mechanism if protocol.startswith("SASL_") else None, jaas,
                         username, password, tls.truststore_location, tls.truststore_password,
                         tls.truststore_type, tls.endpoint_identification)


def _jaas_credentials(jaas: str, mechanism: str, problems: list[str]) -> tuple[str | None, str | None]:
    """username and password out of a JAAS line `<LoginModule> required username="u"
    password="p";`, checking the module fits the mechanism. librdkafka takes the two
    values, not the line. Problems never quote the line (it holds the password)."""
    module = jaas.split(None, 1)[0] if jaas.split() else ""
    if module != _LOGIN_MODULES[mechanism]:
        shown = f"it starts with {module[:80]!r}" if "=" not in module else "it has no login module"
        problems.append(f"sasl.jaas.config must start with {_LOGIN_MODULES[mechanism]} for "
                        f"sasl.mechanism={mechanism} ({shown})")
        return None, None
    options = {m.group(1): (m.group(2) if m.group(2) is not None else m.group(3))
               for m in _JAAS_OPTION.finditer(jaas)}
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in options.items()}
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        problems.append(f"sasl.jaas.config has no {' and no '.join(missing)} option; write it as "
                        f'{_LOGIN_MODULES[mechanism]} required username="..." password="...";')
        return None, None
    if not jaas.rstrip().endswith(";"):
        problems.append("sasl.jaas.config must end with ';' (as the Java client requires)")
    return options["username"], options["password"]
