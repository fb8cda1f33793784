"""TLS settings as Kafka's and Confluent's Java clients name them, under any prefix
(Kafka's own keys have none; a converter's schema registry client takes them as
`schema.registry.ssl.*`):

- whom to trust: `ssl.truststore.location` with `ssl.truststore.type` (JKS, PKCS12 or
  PEM) and `ssl.truststore.password`, or the PEM text itself in
  `ssl.truststore.certificates`; librdkafka's `ssl.ca.location` (a CA PEM file) is
  accepted as a shorthand for a PEM truststore;
- who we are (mutual TLS): `ssl.keystore.location` with `ssl.keystore.type` (JKS,
  PKCS12 or PEM: one file holding the private key and its certificates),
  `ssl.keystore.password` and `ssl.key.password`, or the PEM texts in `ssl.keystore.key`
  and `ssl.keystore.certificate.chain`;
- `ssl.endpoint.identification.algorithm`: https (check the server's host name, the
  default) or empty (do not).

read_tls checks the combination and gives a frozen TlsSettings (no file is read then:
a cluster's executors read the same paths). The files are read when a client connects:
`ca_pem` gives the trusted certificates as PEM (keytool reads a JKS or PKCS12 store),
`ssl_context` the whole context of an HTTP client. Problems name the key and never echo
a password or a key."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from floeline import secrets
from floeline.errors import ConfigError

STORE_TYPES = ("JKS", "PKCS12", "PEM")
# The keys read_tls reads, without their prefix.
KEYS = ("ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
        "ssl.truststore.certificates", "ssl.ca.location", "ssl.keystore.location",
        "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password", "ssl.keystore.key",
        "ssl.keystore.certificate.chain", "ssl.endpoint.identification.algorithm")
# keytool is a short-lived JVM: the quick JIT tier and the serial GC start it faster.
_KEYTOOL = ("keytool", "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC")
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)

Lookup = Callable[[str], "str | None"]  # a key's value (trimmed), None when not set


@dataclass(frozen=True)
class TlsSettings:
    """A client's TLS settings; the default trusts the system's CAs and checks host names."""

    prefix: str = ""  # put before every key named in a message ("schema.registry.")
    truststore_location: str | None = None
    truststore_type: str = "JKS"
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = None  # PEM text (ssl.truststore.certificates)
    keystore_location: str | None = None
    keystore_type: str = "JKS"
    keystore_password: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)  # PEM text (ssl.keystore.key)
    keystore_chain: str | None = None  # PEM text (ssl.keystore.certificate.chain)
    endpoint_identification: str = "https"  # "https" or "" (do not check the host name)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key)

    def key(self, name: str) -> str:
        return self.prefix + name

    def describe(self) -> str:
        """What `validate` may show: the files and types, never a password or key."""
        parts = []
        if self.truststore_location:
            parts.append(f"truststore={self.truststore_location} ({self.truststore_type})")
        elif self.truststore_certificates:
            parts.append("truststore=inline PEM")
        if self.keystore_location:
            parts.append(f"keystore={self.keystore_location} ({self.keystore_type})")
        elif self.keystore_key:
            parts.append("keystore=inline PEM")
        if not self.endpoint_identification:
            parts.append("host name not checked")
        return " ".join(parts)


def read_tls(value: Lookup, problems: list[str], prefix: str = "", keystore: bool = True) -> TlsSettings:
    """The TlsSettings of the keys `prefix` + KEYS, as `value` gives them; every problem
    is appended to `problems`. `keystore=False`: the truststore and host name check only
    (Kafka's own keys: floeline's Kafka clients show no certificate)."""
    if not keystore:
        every_key = value

        def value(name: str) -> str | None:
            skipped = "keystore" in name or name.endswith("ssl.key.password")
            return None if skipped else every_key(name)

    def key(name: str) -> str:
        return prefix + name

    def choice(name: str, default: str, accepted: tuple[str, ...]) -> str:
        given = value(key(name))
        if not given:
            return default
        for option in accepted:
            if given.upper() == option:
                return option
        problems.append(f"{key(name)}={given!r} is not valid; accepted values: {', '.join(accepted)}")
        return default

    store = value(key("ssl.truststore.location")) or None
    ca_location = value(key("ssl.ca.location")) or None
    certificates = value(key("ssl.truststore.certificates")) or None
    store_type = choice("ssl.truststore.type", "PEM" if certificates else "JKS", STORE_TYPES)
    if ca_location:
        if store:
            problems.append(f"{key('ssl.truststore.location')} and {key('ssl.ca.location')} are both "
                            f"set; keep one ({key('ssl.ca.location')} is a CA PEM file, "
                            f"{key('ssl.truststore.type')}=PEM)")
        store, store_type = ca_location, "PEM"
    if certificates:
        if store:
            problems.append(f"{key('ssl.truststore.certificates')} and {key('ssl.truststore.location')} "
                            f"are both set; keep one (the certificates' PEM text, or the file)")
        elif store_type != "PEM":
            problems.append(f"{key('ssl.truststore.certificates')} is PEM text, but "
                            f"{key('ssl.truststore.type')}={store_type}; set it to PEM (or leave it out)")
        elif not _PEM_CERT.search(certificates):
            problems.append(f"{key('ssl.truststore.certificates')} holds no PEM certificate "
                            f"(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")

    keystore = value(key("ssl.keystore.location")) or None
    inline_key = value(key("ssl.keystore.key")) or None
    chain = value(key("ssl.keystore.certificate.chain")) or None
    keystore_type = choice("ssl.keystore.type", "PEM" if (inline_key or chain) else "JKS", STORE_TYPES)
    if inline_key or chain:
        if keystore:
            problems.append(f"{key('ssl.keystore.location')} and {key('ssl.keystore.key')} / "
                            f"{key('ssl.keystore.certificate.chain')} are both set; keep one (the file, "
                            f"or the PEM texts)")
        elif not (inline_key and chain):
            given, missing = (("ssl.keystore.key", "ssl.keystore.certificate.chain") if inline_key
                              else ("ssl.keystore.certificate.chain", "ssl.keystore.key"))
            problems.append(f"{key(given)} is set without {key(missing)}; mutual TLS needs both "
                            f"(the private key and its certificate chain, PEM)")
        elif keystore_type != "PEM":
            problems.append(f"{key('ssl.keystore.key')} is PEM text, but {key('ssl.keystore.type')}="
                            f"{keystore_type}; set it to PEM (or leave it out)")
    keystore_password = value(key("ssl.keystore.password")) or None
    key_password = value(key("ssl.key.password")) or None
    for name, given in (("ssl.keystore.password", keystore_password), ("ssl.key.password", key_password)):
        if given and not (keystore or inline_key):
            problems.append(f"{key(name)} is set but no keystore is ({key('ssl.keystore.location')}, "
                            f"or {key('ssl.keystore.key')} with {key('ssl.keystore.certificate.chain')})")
    store_password = value(key("ssl.truststore.password")) or None

    algorithm = value(key("ssl.endpoint.identification.algorithm"))
    if algorithm is None:
        algorithm = "https"
    elif algorithm.lower() not in ("https", ""):
        problems.append(f"{key('ssl.endpoint.identification.algorithm')}={algorithm!r} is not valid; "
                        f"accepted values: https (check the server's host name), or empty (do not)")
        algorithm = "https"
    secrets.remember(store_password, keystore_password, key_password, inline_key)
    return TlsSettings(prefix, store, store_type, store_password, certificates, keystore,
                       keystore_type, keystore_password, key_password, inline_key, chain,
                       algorithm.lower())


# ------------------------------------------------------------------ reading the files

def ca_pem(tls: TlsSettings) -> str | None:
    """The trusted certificates as PEM text, None when no truststore is set."""
    if tls.truststore_certificates:
        return tls.truststore_certificates
    if not tls.truststore_location:
        return None
    if tls.truststore_type == "PEM":
        text = _read_text(tls.truststore_location, tls.key("ssl.truststore.location"), "truststore")
        if not _PEM_CERT.search(text):
            raise ConfigError(f"{tls.key('ssl.truststore.location')}={tls.truststore_location} holds no "
                              f"PEM certificate; point it at the CA's PEM file or set "
                              f"{tls.key('ssl.truststore.type')} to JKS or PKCS12")
        return text
    return truststore_pem(tls.truststore_location, tls.truststore_type, tls.truststore_password,
                          tls.prefix)


def truststore_pem(location: str, store_type: str, password: str | None, prefix: str = "") -> str:
    """The CA certificates of a JKS or PKCS12 truststore as PEM, read with keytool (it
    comes with every JDK and JRE); cached per file version."""
    try:
        version = os.stat(location).st_mtime_ns
    except OSError as exc:
        raise ConfigError(f"{prefix}ssl.truststore.location={location}: cannot read it "
                          f"({exc.strerror or exc}); point it at the truststore file") from None
    return _truststore_pem(location, store_type, password, version, prefix)


@lru_cache(maxsize=8)
def _truststore_pem(location: str, store_type: str, password: str | None, _version: int,
                    prefix: str) -> str:
    if shutil.which("keytool") is None:
        raise ConfigError(f"{prefix}ssl.truststore.location={location} is a {store_type} truststore "
                          f"and reading it needs `keytool` (part of Java) on PATH; install Java or "
                          f"give the CA as PEM ({prefix}ssl.truststore.type=PEM)")
    cmd = [*_KEYTOOL, "-list", "-rfc", "-keystore", location, "-storetype", store_type]
    env = dict(os.environ)
    if password:
        cmd += ["-storepass:env", "FLOELINE_TRUSTSTORE_PASSWORD"]
        env["FLOELINE_TRUSTSTORE_PASSWORD"] = password
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    certificates = _PEM_CERT.findall(done.stdout)
    if done.returncode != 0 or not certificates:
        raise ConfigError(f"cannot read the certificates of {prefix}ssl.truststore.location={location} "
                          f"({prefix}ssl.truststore.type={store_type}): "
                          f"{_keytool_reason(done, password)}. Check the file, "
                          f"{prefix}ssl.truststore.type and {prefix}ssl.truststore.password")
    return "\n".join(certificates) + "\n"


def _keytool_reason(done: subprocess.CompletedProcess, password: str | None) -> str:
    said = (done.stdout + done.stderr).strip().splitlines()
    reason = said[-1] if said else f"exit {done.returncode}"
    return reason.replace(password, secrets.MASK) if password else reason


def _read_text(location: str, key: str, what: str) -> str:
    try:
        return Path(location).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{key}={location}: cannot read the {what} "
                          f"({getattr(exc, 'strerror', None) or exc}); point it at the file") from None


def ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """An HTTP client's context: the truststore's CAs (else the system's), the keystore's
    key and certificates for mutual TLS, host names checked unless the algorithm is
    empty. ConfigError naming the key when a file cannot be read or does not fit."""
    cadata = ca_pem(tls)
    try:
        context = ssl.create_default_context(cadata=cadata) if cadata else ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        where = (tls.key("ssl.truststore.location") if tls.truststore_location
                 else tls.key("ssl.truststore.certificates"))
        raise ConfigError(f"{where}: its certificates cannot be loaded ({getattr(exc, 'reason', None) or exc}); "
                          f"give the CA's certificates as PEM") from None
    if not tls.endpoint_identification:
        context.check_hostname = False
    if tls.has_keystore:
        _load_keystore(context, tls)
    return context


def _load_keystore(context: ssl.SSLContext, tls: TlsSettings) -> None:
    """Python's ssl loads a key and its chain from PEM files only: a PKCS12 or JKS store
    (JKS through keytool's conversion to PKCS12) is written as PEM into a private
    temporary directory for the load, then removed."""
    where = tls.key("ssl.keystore.location")
    with tempfile.TemporaryDirectory(prefix="floeline-tls-") as tmp:
        pem, password = None, tls.key_password
        if tls.keystore_key:
            pem, where = tls.keystore_key + "\n" + (tls.keystore_chain or ""), tls.key("ssl.keystore.key")
        elif tls.keystore_type == "PEM":
            _read_text(tls.keystore_location, where, "keystore")
        else:
            store = tls.keystore_location
            if tls.keystore_type == "JKS":
                store = _jks_as_pkcs12(tls, Path(tmp))
            pem, password = _pkcs12_as_pem(store, tls), None
        path = tls.keystore_location
        if pem is not None:
            path = os.path.join(tmp, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(pem)
        try:
            context.load_cert_chain(path, password=password or None)
        except ssl.SSLError as exc:
            raise ConfigError(f"{where}: the private key and certificate chain cannot be loaded "
                              f"({exc.reason or exc}); check that it holds the key and its "
                              f"certificate and {tls.key('ssl.key.password')}") from None


def _jks_as_pkcs12(tls: TlsSettings, tmp: Path) -> str:
    if shutil.which("keytool") is None:
        raise ConfigError(f"{tls.key('ssl.keystore.location')}={tls.keystore_location} is a JKS "
                          f"keystore and reading it needs `keytool` (part of Java) on PATH; install "
                          f"Java or use a PKCS12 or PEM keystore")
    if tls.key_password and tls.key_password != tls.keystore_password:
        raise ConfigError(f"{tls.key('ssl.keystore.location')} is a JKS keystore whose key password "
                          f"({tls.key('ssl.key.password')}) differs from its store password; floeline "
                          f"reads such a key from a PKCS12 or PEM keystore: convert it with keytool "
                          f"-importkeystore -deststoretype PKCS12")
    target = str(tmp / "keystore.p12")
    password = tls.keystore_password or ""
    done = subprocess.run(
        [*_KEYTOOL, "-importkeystore", "-noprompt", "-srckeystore", tls.keystore_location,
         "-srcstoretype", "JKS", "-srcstorepass:env", "FLOELINE_STOREPASS", "-destkeystore", target,
         "-deststoretype", "PKCS12", "-deststorepass:env", "FLOELINE_STOREPASS"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "FLOELINE_STOREPASS": password})
    if done.returncode != 0:
        raise ConfigError(f"cannot read {tls.key('ssl.keystore.location')}={tls.keystore_location} "
                          f"({tls.key('ssl.keystore.type')}=JKS): {_keytool_reason(done, password)}. "
                          f"Check the file and {tls.key('ssl.keystore.password')}")
    return target


def _pkcs12_as_pem(location: str, tls: TlsSettings) -> str:
    shown = f"{tls.key('ssl.keystore.location')}={tls.keystore_location}"
    try:
        data = Path(location).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read the keystore ({exc.strerror or exc}); point it at "
                          f"the file") from None
    try:
        return pkcs12_pem(data, tls.keystore_password)
    except ValueError as exc:
        raise ConfigError(f"{shown} cannot be opened as {tls.keystore_type} ({exc}); check "
                          f"{tls.key('ssl.keystore.type')}, {tls.key('ssl.keystore.password')} and "
                          f"that it holds the client's key pair") from None


def pkcs12_pem(data: bytes, password: str | None) -> str:
    """A PKCS12 store's private key (unencrypted) and certificates, as PEM text; ValueError
    when it cannot be opened or holds no key with its certificate."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, certificate, chain = pkcs12.load_key_and_certificates(
        data, password.encode() if password else None)
    if key is None or certificate is None:
        raise ValueError("it holds no private key with its certificate")
    encoding = serialization.Encoding.PEM
    text = key.private_bytes(encoding, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()
    for cert in (certificate, *chain):
        text += cert.public_bytes(encoding).decode()
    return text
