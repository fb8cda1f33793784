"""A Confluent schema registry REST client (GET only), with retries and a bound."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from floeline import retry
from floeline.config.decoding import ConverterSpec
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

    def __init__(self, urls: str, user_info: str | None = None,
                 policy: retry.RetryPolicy = retry.DEFAULT):
        self.urls = [u.strip().rstrip("/") for u in urls.split(",") if u.strip()]
        self.display = ",".join(self.urls)
        self._auth = ("Basic " + base64.b64encode(user_info.encode()).decode()) if user_info else None
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

    def _get_once(self, path: str, what: str) -> dict:
        """One GET of `path` from each URL in turn until one answers."""
        problems = []
        for base in self.urls:
            request = urllib.request.Request(base + path, headers={
                "Accept": "application/vnd.schemaregistry.v1+json, application/json"})
            if self._auth:
                request.add_header("Authorization", self._auth)
            try:
                with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as reply:
                    answer = json.loads(reply.read())
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    raise ConfigError(
                        f"the schema registry at {base} refused {what} (HTTP {exc.code}): check "
                        f"<key|value>.converter.basic.auth.credentials.source=USER_INFO and "
                        f"basic.auth.user.info") from None
                if 400 <= exc.code < 500 and exc.code != 429:
                    detail = _registry_message(exc)
                    raise ConverterError(f"unknown {what} at {base}: {exc.code}"
                                         + (f" {detail}" if detail else "")) from None
                problems.append(f"{base}: HTTP {exc.code}")
                continue
            except (urllib.error.URLError, OSError, ValueError) as exc:
                problems.append(f"{base}: {getattr(exc, 'reason', exc)}")
                continue
            self._answers[path] = answer
            return answer
        raise RegistryUnavailable(f"schema registry unavailable while fetching {what} "
                                  f"({'; '.join(problems)})")


def _registry_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
        return str(body.get("message", "")) if isinstance(body, dict) else ""
    except Exception:
        return ""


# Executor-side cache: Spark reuses a Python worker across tasks and batches, so one
# client per registry spec keeps the schemas it parsed (a record fetches its schema
# once per worker, not once per batch). Keyed by everything that makes the client (URLs,
# credentials, retry policy), so connectors with different specs never share or change
# each other's client. The driver does not use it: its converters own their client.
_WORKER_CLIENTS: dict[tuple[str, str | None, retry.RetryPolicy], SchemaRegistryClient] = {}
_WORKER_CLIENTS_LOCK = threading.Lock()


def registry_for(spec: ConverterSpec, policy: retry.RetryPolicy = retry.DEFAULT,
                 shared: bool = True) -> SchemaRegistryClient:
    """The schema registry client of a converter spec: the worker process's client for
    this spec (`shared`), or a new one its caller owns."""
    url = spec.option("schema.registry.url")
    if url is None:
        raise ConfigError(f"{spec.key}={spec.class_name} needs {spec.key}.schema.registry.url")
    user_info = None
    if (spec.option("basic.auth.credentials.source") or "").upper() == "USER_INFO":
        user_info = spec.option("basic.auth.user.info") \
            or spec.option("schema.registry.basic.auth.user.info")
    if not shared:
        return SchemaRegistryClient(url, user_info, policy)
    key = (url, user_info, policy)
    with _WORKER_CLIENTS_LOCK:
        if key not in _WORKER_CLIENTS:
            _WORKER_CLIENTS[key] = SchemaRegistryClient(url, user_info, policy)
        return _WORKER_CLIENTS[key]
