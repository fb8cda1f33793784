"""A Confluent schema registry REST client (GET only), with retries and a bound, Basic
or bearer auth and TLS (a private CA, mutual TLS) as config/registry_access.py reads
them from the converter's options."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from floeline import retry
from floeline.config.decoding import ConverterSpec
from floeline.config.registry_access import RegistryAccess, read_registry_access
from floeline.config.tls import ssl_context
from floeline.errors import ConfigError, RetriesExhausted
from floeline.records.converters.base import ConverterError, RegistryUnavailable


_TIMEOUT_S = 10


class SchemaRegistryClient:
    """A Confluent schema registry REST client (GET only): /schemas/ids/{id} and
    /subjects/{subject}/versions/{version}. Answers are cached for the client's life;
    `parsed` caches what converters build from them (parsed Avro schemas, protobuf
    message classes).

    A registry that cannot be reached, or answers 5xx or 429, is retried with backoff
    until `policy`'s bound (errors.retry.timeout); then RetriesExhausted. Once a call
    has spent its bound, the next calls within that bound try each URL once, so a
    batch of records does not wait the bound once per record. 401/403 is a ConfigError
    (the credentials); any other 4xx (an unknown schema id) is the record's
    ConverterError."""

    def __init__(self, urls: str | RegistryAccess, user_info: str | None = None,
                 policy: retry.RetryPolicy = retry.DEFAULT):
        access = urls if isinstance(urls, RegistryAccess) else RegistryAccess(urls, user_info)
        self.access = access
        self.urls = [u.strip().rstrip("/") for u in access.urls.split(",") if u.strip()]
        self.display = ",".join(self.urls)
        self._headers = access.headers()
        self._context: ssl.SSLContext | None = None  # made on the first https request
        self._answers: dict[str, dict] = {}
        self.parsed: dict[Any, Any] = {}
        self.lock = threading.Lock()
        self.policy = policy
        self._gave_up: tuple[float, RetriesExhausted] | None = None  # when, and the error

    def by_id(self, schema_id: int) -> dict:
        return self._get(f"/schemas/ids/{schema_id}", f"schema id {schema_id}")

    def by_subject(self, subject: str, version: int | str) -> dict:
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
        return self._get(path, f"subject {subject!r} version {version}")

    def _get(self, path: str, what: str) -> dict:
        if path in self._answers:
            return self._answers[path]
        policy = self.policy
        if self._gave_up is not None:
            since, error = self._gave_up
            if not policy.spent(time.monotonic() - since):
                try:  # the registry was down a moment ago: one try, no waiting
                    return self._get_once(path, what)
                except RegistryUnavailable:
                    raise error from None
        try:
            answer = retry.call(lambda: self._get_once(path, what), policy=policy,
                                what=f"schema registry GET {what} at {self.display}",
                                service="schema registry",
                                fix="Check that the registry is running and the converter's "
                                    "schema.registry.url.")
        except RetriesExhausted as exc:
            self._gave_up = (time.monotonic(), exc)
            raise
        self._gave_up = None
        return answer

    def _tls(self, base: str) -> ssl.SSLContext | None:
        """The TLS context of https URLs (schema.registry.ssl.*; read once per client)."""
        if not base.lower().startswith("https:"):
            return None
        if self._context is None:
            self._context = ssl_context(self.access.tls)
        return self._context

    def _get_once(self, path: str, what: str) -> dict:
        """One GET of `path` from each URL in turn until one answers."""
        problems = []
        for base in self.urls:
            request = urllib.request.Request(base + path, headers={
                "Accept": "application/vnd.schemaregistry.v1+json, application/json",
                **self._headers})
            try:
                with urllib.request.urlopen(request, timeout=_TIMEOUT_S,
                                            context=self._tls(base)) as reply:
                    answer = json.loads(reply.read())
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    raise ConfigError(
                        f"the schema registry at {base} refused {what} (HTTP {exc.code}): "
                        f"{self.access.auth_fix()}") from None
                if 400 <= exc.code < 500 and exc.code != 429:
                    detail = _registry_message(exc)
                    raise ConverterError(f"unknown {what} at {base}: {exc.code}"
                                         + (f" {detail}" if detail else "")) from None
                problems.append(f"{base}: HTTP {exc.code}")
                continue
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if isinstance(reason, ssl.SSLCertVerificationError):
                    raise ConfigError(_certificate_refused(base, reason, self.access)) from None
                if isinstance(reason, ssl.SSLError) and "ALERT" in str(reason.reason or ""):
                    # the registry refused the handshake: it wants a client certificate, or
                    # does not trust ours (a connection cut mid-handshake is retried)
                    raise ConfigError(f"the schema registry at {base} refused the TLS handshake "
                                      f"({reason.reason}): {_tls_hint(self.access)}. Retrying "
                                      f"cannot fix this.") from None
                if isinstance(reason, ssl.SSLError):
                    reason = f"TLS: {reason.reason or reason} ({_tls_hint(self.access)})"
                problems.append(f"{base}: {reason}")
                continue
            self._answers[path] = answer
            return answer
        raise RegistryUnavailable(f"schema registry unavailable while fetching {what} "
                                  f"({'; '.join(problems)})")


def _certificate_refused(base: str, error: ssl.SSLCertVerificationError,
                         access: RegistryAccess) -> str:
    tls = access.tls
    said = str(error.verify_message or error).lower()
    if "mismatch" in said or "hostname" in said or "not valid for" in said:
        fix = (f"use the host name the certificate names in schema.registry.url, or set "
               f"{tls.key('ssl.endpoint.identification.algorithm')}= (empty) to skip the check")
    elif tls.has_truststore:
        fix = (f"{tls.key('ssl.truststore.location')} (or .certificates) must hold the CA that "
               f"signed the registry's certificate")
    else:
        fix = (f"a registry with a private CA needs {tls.key('ssl.truststore.location')} (with "
               f"{tls.key('ssl.truststore.type')} and .password) naming that CA")
    return (f"the schema registry at {base}: its TLS certificate was refused "
            f"({error.verify_message or error}); {fix}. Retrying cannot fix this.")


def _tls_hint(access: RegistryAccess) -> str:
    if not access.tls.has_keystore:
        return (f"if the registry asks for a client certificate, set "
                f"{access.tls.key('ssl.keystore.location')} with its type and password")
    return f"check {access.tls.key('ssl.keystore.location')}: does the registry trust its certificate?"


def _registry_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
        return str(body.get("message", "")) if isinstance(body, dict) else ""
    except Exception:
        return ""


# Executor-side cache: Spark reuses a Python worker across tasks and batches, so one
# client per registry spec keeps the schemas it parsed (a record fetches its schema
# once per worker, not once per batch). Keyed by everything that makes the client (URLs,
# credentials, TLS settings, retry policy), so connectors with different specs never
# share or change each other's client. The driver does not use it: its converters own
# their client.
_WORKER_CLIENTS: dict[tuple[RegistryAccess, retry.RetryPolicy], SchemaRegistryClient] = {}
_WORKER_CLIENTS_LOCK = threading.Lock()


def registry_access(spec: ConverterSpec) -> RegistryAccess:
    """The converter's registry URL, credentials and TLS settings; ConfigError naming
    every bad setting."""
    if spec.option("schema.registry.url") is None:
        raise ConfigError(f"{spec.key}={spec.class_name} needs {spec.key}.schema.registry.url")
    problems: list[str] = []
    access = read_registry_access(dict(spec.options), spec.key, problems)
    if problems:
        raise ConfigError("invalid schema registry settings:\n"
                          + "\n".join(f"  - {p}" for p in problems))
    return access


def registry_for(spec: ConverterSpec, policy: retry.RetryPolicy = retry.DEFAULT,
                 shared: bool = True) -> SchemaRegistryClient:
    """The schema registry client of a converter spec: the worker process's client for
    this spec (`shared`), or a new one its caller owns."""
    access = registry_access(spec)
    if not shared:
        return SchemaRegistryClient(access, policy=policy)
    key = (access, policy)
    with _WORKER_CLIENTS_LOCK:
        if key not in _WORKER_CLIENTS:
            _WORKER_CLIENTS[key] = SchemaRegistryClient(access, policy=policy)
        return _WORKER_CLIENTS[key]
