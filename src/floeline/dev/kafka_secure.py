"""What makes the local broker a secured one (`floeline kafka start --secure`): TLS
certificates made with keytool, the users and their passwords, the SASL_SSL listener's
settings and the client configs a connector uses to reach it.

Everything is made once per state directory and kept there (mode 0600): a CA, the
broker's key pair signed by it, truststores (JKS and PKCS12) and the CA as PEM for
clients; one user, `floeline`, who may log in with SASL PLAIN or SCRAM-SHA-512 (its
SCRAM credential is added when the storage is formatted), and a `broker` user for the
broker's own connections. Passwords are random, so a test can grep for them."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from floeline.dev.services import HOST
from floeline.errors import SetupError
from floeline.processes import last_lines

USER = "floeline"
BROKER_USER = "broker"
MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_SAN = f"SAN=dns:localhost,ip:{HOST}"
# keytool is a short-lived JVM: the quick JIT tier and the serial GC start it about
# twice as fast.
KEYTOOL_JVM_FLAGS = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-J-Xshare:auto")


@dataclass(frozen=True)
class SecureBrokerSecrets:
    """The secured broker's passwords and TLS files (all under `tls_dir`)."""

    tls_dir: Path
    user_password: str  # the `floeline` user's, for PLAIN and SCRAM-SHA-512
    broker_password: str  # the broker's own inter-broker login (PLAIN)
    store_password: str  # the keystore's and truststores'

    @property
    def keystore(self) -> Path:
        return self.tls_dir / "broker.keystore.p12"

    @property
    def truststore_jks(self) -> Path:
        return self.tls_dir / "truststore.jks"

    @property
    def truststore_p12(self) -> Path:
        return self.tls_dir / "truststore.p12"

    @property
    def ca_pem(self) -> Path:
        return self.tls_dir / "ca.pem"


def jaas_line(mechanism: str, username: str, password: str) -> str:
    """A client's sasl.jaas.config for `mechanism`, as the Java client takes it."""
    return f'{_LOGIN_MODULES[mechanism]} required username="{username}" password="{password}";'


def client_settings(bootstrap: str, found: SecureBrokerSecrets, mechanism: str = "SCRAM-SHA-512",
                    password: str | None = None) -> dict[str, str]:
    """The Kafka Connect keys a connector needs to reach the secured broker."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": jaas_line(mechanism, USER, found.user_password if password is None else password),
        "ssl.truststore.location": str(found.truststore_jks),
        "ssl.truststore.password": found.store_password,
        "ssl.truststore.type": "JKS",
    }


def ensure_secrets(state: Path) -> SecureBrokerSecrets:
    """The state dir's passwords and certificates, made on first use."""
    tls = state / "tls"
    tls.mkdir(mode=0o700, parents=True, exist_ok=True)
    saved = tls / "secrets.json"
    if saved.exists():
        values = json.loads(saved.read_text())
    else:
        values = {k: secrets.token_urlsafe(18) for k in ("user_password", "broker_password", "store_password")}
    found = SecureBrokerSecrets(tls, **values)
    if not found.truststore_p12.exists():
        _make_certificates(found)
    if not saved.exists():
        write_private(saved, json.dumps(values))
    return found


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _make_certificates(found: SecureBrokerSecrets) -> None:
    """A CA, the broker's key pair with a certificate for localhost and 127.0.0.1 signed
    by it, and truststores holding the CA. The store password reaches keytool through
    its environment (`-storepass:env`), never its command line."""
    tls = found.tls_dir
    for leftover in tls.glob("*"):
        if leftover.name != "secrets.json":
            leftover.unlink()
    store = ["-storepass:env", "FLOELINE_STOREPASS"]
    key = ["-keyalg", "EC", "-groupname", "secp256r1", "-validity", "3650"]  # EC: a fast key pair
    ca, keystore = str(tls / "ca.p12"), str(found.keystore)
    steps = [
        ["-genkeypair", "-alias", "ca", *key, "-dname", "CN=floeline local CA", "-ext", "bc:c",
         "-keystore", ca, "-storetype", "PKCS12", *store],
        ["-exportcert", "-rfc", "-alias", "ca", "-keystore", ca, *store, "-file", str(found.ca_pem)],
        ["-genkeypair", "-alias", "broker", *key, "-dname", "CN=localhost", "-ext", _SAN,
         "-keystore", keystore, "-storetype", "PKCS12", *store],
        ["-certreq", "-alias", "broker", "-keystore", keystore, *store, "-file", str(tls / "broker.csr")],
        ["-gencert", "-alias", "ca", "-keystore", ca, *store, "-infile", str(tls / "broker.csr"),
         "-outfile", str(tls / "broker.pem"), "-rfc", "-validity", "3650", "-ext", _SAN,
         "-ext", "eku=serverAuth,clientAuth"],
        ["-importcert", "-alias", "ca", "-file", str(found.ca_pem), "-keystore", keystore, *store,
         "-noprompt"],
        ["-importcert", "-alias", "broker", "-file", str(tls / "broker.pem"), "-keystore", keystore,
         *store, "-noprompt"],
        ["-importcert", "-alias", "ca", "-file", str(found.ca_pem), "-keystore", str(found.truststore_jks),
         "-storetype", "JKS", *store, "-noprompt"],
        ["-importcert", "-alias", "ca", "-file", str(found.ca_pem), "-keystore", str(found.truststore_p12),
         "-storetype", "PKCS12", *store, "-noprompt"],
    ]
    env = {**os.environ, "FLOELINE_STOREPASS": found.store_password}
    for step in steps:
        done = subprocess.run(["keytool", *KEYTOOL_JVM_FLAGS, *step], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise SetupError(f"making the secured broker's certificates failed: `keytool "
                             f"{' '.join(step)}` exited {done.returncode} (keytool comes with "
                             f"the JDK):\n{last_lines(done.stdout + done.stderr, 20)}")
    (tls / "ca.p12").chmod(0o600)
    found.keystore.chmod(0o600)


def listener_settings(found: SecureBrokerSecrets, port: int, controller_port: int) -> dict[str, object]:
    """server.properties entries for one SASL_SSL listener (PLAIN and SCRAM-SHA-512, TLS)
    that clients and the broker itself use; the controller stays on loopback plaintext."""
    plain_users = (f'username="{BROKER_USER}" password="{found.broker_password}" '
                   f'user_{BROKER_USER}="{found.broker_password}" user_{USER}="{found.user_password}"')
    return {
        "listeners": f"SASL_SSL://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"{_LOGIN_MODULES['PLAIN']} required {plain_users};",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            f"{_LOGIN_MODULES['SCRAM-SHA-512']} required;",
        "ssl.keystore.location": found.keystore,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": found.store_password,
        "ssl.key.password": found.store_password,
        "ssl.truststore.location": found.truststore_p12,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": found.store_password,
        "ssl.client.auth": "none",
    }


def scram_format_arguments(found: SecureBrokerSecrets) -> list[str]:
    """kafka-storage format's --add-scram for the `floeline` user."""
    return ["--add-scram", f"SCRAM-SHA-512=[name={USER},password={found.user_password}]"]


def client_config_paths(state: Path) -> list[Path]:
    return [state / f"client-{mechanism.lower()}.properties" for mechanism in MECHANISMS]


def write_client_configs(state: Path, bootstrap: str, found: SecureBrokerSecrets) -> list[Path]:
    """client-<mechanism>.properties in the state dir (mode 0600): the keys to add to a
    connector config, one file per mechanism."""
    paths = []
    for mechanism, path in zip(MECHANISMS, client_config_paths(state)):
        lines = [f"{k}={v}" for k, v in client_settings(bootstrap, found, mechanism).items()]
        write_private(path, "\n".join(lines) + "\n")
        paths.append(path)
    return paths
