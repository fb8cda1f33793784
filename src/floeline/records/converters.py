"""Kafka Connect converters: a record's key or value bytes -> the Python value Kafka
Connect's converter would hand to the transforms (see record.py for the types), and
the spec's conversion rules from that value to JSON text (`to_json_text`).

Converters, by the class name a connector config gives in `key.converter` /
`value.converter` (options come from `<key|value>.converter.<option>`):

  org.apache.kafka.connect.json.JsonConverter         JSON; with schemas.enable (Kafka
      Connect's default: true) the {"schema", "payload"} envelope, whose schema is
      applied (Decimal, Date, Time, Timestamp logical types, bytes, maps with
      non-string keys)
  org.apache.kafka.connect.storage.StringConverter    text (converter.encoding, UTF-8)
  org.apache.kafka.connect.converters.ByteArrayConverter   the bytes as they are
  io.confluent.connect.avro.AvroConverter             Confluent wire format + Avro
  io.confluent.connect.protobuf.ProtobufConverter     Confluent wire format + Protobuf
  io.confluent.connect.json.JsonSchemaConverter       Confluent wire format + JSON

The three Snowflake converters (SnowflakeJsonConverter, SnowflakeAvroConverter,
SnowflakeAvroConverterWithoutSchemaRegistry) are refused: the spec says the connector
with Snowpipe Streaming does not support them (their errors go to a table stage, which
conflicts with the dead-letter queue); the message names the community converter to
use instead.

Schemas of the Confluent formats come from the schema registry named by
`<key|value>.converter.schema.registry.url` (GET /schemas/ids/{id}); the registry client
and every parsed schema are cached per process. A record that cannot be converted
raises ConverterError with its stage ('key converter' / 'value converter') and the
reason; never a silent NULL.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from floeline import retry
from floeline.errors import ConfigError, RecordError, RetriesExhausted, ServiceUnavailable
from floeline.records.avro_schema import plain_value
from floeline.records.record import Float32, shortest_float32

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
AVRO_CONVERTER = "io.confluent.connect.avro.AvroConverter"
PROTOBUF_CONVERTER = "io.confluent.connect.protobuf.ProtobufConverter"
JSON_SCHEMA_CONVERTER = "io.confluent.connect.json.JsonSchemaConverter"
SUPPORTED_CONVERTERS = (JSON_CONVERTER, STRING_CONVERTER, BYTES_CONVERTER, AVRO_CONVERTER,
                        PROTOBUF_CONVERTER, JSON_SCHEMA_CONVERTER)
REGISTRY_CONVERTERS = (AVRO_CONVERTER, PROTOBUF_CONVERTER, JSON_SCHEMA_CONVERTER)

# Refused by the spec for Snowpipe Streaming; the value is the converter to use instead.
SNOWFLAKE_CONVERTERS = {
    "com.snowflake.kafka.connector.records.SnowflakeJsonConverter": JSON_CONVERTER,
    "com.snowflake.kafka.connector.records.SnowflakeAvroConverter": AVRO_CONVERTER,
    "com.snowflake.kafka.connector.records.SnowflakeAvroConverterWithoutSchemaRegistry":
        AVRO_CONVERTER,
}

KEY_STAGE = "key converter"
VALUE_STAGE = "value converter"
Which = Literal["key", "value"]

_STAGES = {"key": KEY_STAGE, "value": VALUE_STAGE}
_TIMEOUT_S = 10


class ConverterError(RecordError):
    """A record's key or value cannot be converted. `stage` is 'key converter' or
    'value converter'; the message is the reason (the decode stage adds the record's
    coordinates)."""

    def __init__(self, reason: str, stage: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.stage = stage

    def __reduce__(self):  # keep the stage when pickled (Spark ships errors between processes)
        return (type(self), (self.reason, self.stage))


class RegistryUnavailable(ServiceUnavailable):
    """The schema registry could not be reached, or answered with a server error or
    429 (too many requests). Transient: the client retries it (floeline/retry.py); it
    is never the record's fault, so it fails the batch instead of sending the record
    to the dead-letter queue. `stage` and `reason` as ConverterError's."""

    def __init__(self, reason: str, stage: str | None = None):
        super().__init__(reason)
        self.reason, self.stage = reason, stage

    def __reduce__(self):
        return (type(self), (self.reason, self.stage))


# ------------------------------------------------------------------ configuration

def converter_class(settings: Mapping[str, str], which: Which) -> str | None:
    value = settings.get(f"{which}.converter")
    return value.strip() if value is not None and value.strip() else None


def _option(settings: Mapping[str, str], which: Which, name: str) -> str | None:
    value = settings.get(f"{which}.converter.{name}")
    return value.strip() if value is not None and value.strip() else None


def json_schemas_enabled(settings: Mapping[str, str], which: Which) -> bool:
    """Whether a JsonConverter reads the {"schema", "payload"} envelope: the
    `<which>.converter.schemas.enable` setting, default true as in Kafka Connect. With
    no converter configured floeline reads plain JSON (no envelope)."""
    if converter_class(settings, which) is None:
        return False
    value = _option(settings, which, "schemas.enable")
    return True if value is None else value.lower() == "true"


def check_converters(settings: Mapping[str, str]) -> None:
    """Raise one ConfigError naming every bad converter setting (class, registry URL,
    schemas.enable), each with how to fix it."""
    problems = []
    for which in ("key", "value"):
        name = converter_class(settings, which)
        key = f"{which}.converter"
        if name is None:
            continue
        if name in SNOWFLAKE_CONVERTERS:
            problems.append(
                f"{key}={name} is not supported with Snowpipe Streaming (the Snowflake "
                f"converters send bad records to a table stage, which conflicts with the "
                f"dead-letter queue); use {SNOWFLAKE_CONVERTERS[name]} instead")
        elif name not in SUPPORTED_CONVERTERS:
            problems.append(f"{key}={name} is not a converter floeline knows; supported: "
                            f"{', '.join(SUPPORTED_CONVERTERS)}")
        elif name == AVRO_CONVERTER and _option(settings, which, "avro.schema") is not None:
            try:
                _config_avro_schema(settings, which)
            except ConfigError as exc:
                problems.append(str(exc))
        elif name in REGISTRY_CONVERTERS and _option(settings, which, "schema.registry.url") is None:
            problems.append(f"{key}={name} needs {key}.schema.registry.url (the schema "
                            f"registry's base URL, e.g. http://localhost:8081), or for Avro "
                            f"without a registry {key}.avro.schema (the writer schema as JSON)")
        enable = _option(settings, which, "schemas.enable")
        if enable is not None and enable.lower() not in ("true", "false"):
            problems.append(f"{key}.schemas.enable={enable!r} is not a boolean; accepted "
                            f"values: true, false")
    if problems:
        raise ConfigError("invalid converter settings:\n" + "\n".join(f"  - {p}" for p in problems))


# ------------------------------------------------------------------ converters

@dataclass(frozen=True)
class Converted:
    value: Any
    schema_id: int | None = None  # the schema registry id of the Confluent wire formats


class Converter:
    """Turns a record's key or value bytes into a Python value (None stays None)."""

    stage: str = VALUE_STAGE

    def convert(self, data: bytes | None) -> Converted:
        if data is None:
            return Converted(None)
        try:
            return self._convert(bytes(data))
        except ConverterError as exc:
            exc.stage = exc.stage or self.stage
            raise

    def _convert(self, data: bytes) -> Converted:
        raise NotImplementedError

    def error(self, reason: str) -> ConverterError:
        return ConverterError(reason, self.stage)


class ByteArrayConverter(Converter):
    def _convert(self, data: bytes) -> Converted:
        return Converted(data)


class StringConverter(Converter):
    """As Kafka's StringDeserializer: malformed bytes become U+FFFD, never an error."""

    def __init__(self, encoding: str = "UTF-8"):
        try:
            self.encoding = "".join(encoding.split()).replace("_", "-")
            "".encode(self.encoding)
        except LookupError:
            raise ConfigError(f"converter.encoding={encoding!r} is not a known character set; "
                              f"use e.g. UTF-8") from None

    def _convert(self, data: bytes) -> Converted:
        return Converted(data.decode(self.encoding, errors="replace"))


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(data: bytes, what: str) -> Any:
    """JSON bytes -> Python, with the byte offset of the first problem in the error.
    NaN/Infinity literals are refused, as Jackson does."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConverterError(f"{what} is not valid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        at = len(text[:exc.pos].encode("utf-8"))
        raise ConverterError(f"{what} is not valid JSON at byte {at}: {exc.msg}") from None
    except ValueError as exc:
        raise ConverterError(f"{what} is not valid JSON: {exc}") from None


_JSON_SPACE = b" \t\r\n"


class JsonConverter(Converter):
    def __init__(self, schemas_enable: bool):
        self.schemas_enable = schemas_enable

    def _convert(self, data: bytes) -> Converted:
        # Jackson reads empty (or whitespace-only) bytes as no JSON at all: without the
        # envelope that is a null, so an empty value is a tombstone.
        blank = not data.strip(_JSON_SPACE)
        doc = None if blank else parse_json(data, self.stage.split()[0])
        if not self.schemas_enable:
            return Converted(doc)
        if blank or not (isinstance(doc, dict) and set(doc) == {"schema", "payload"}):
            raise self.error(
                'JsonConverter with schemas.enable requires "schema" and "payload" fields and '
                'may not contain additional fields. If you are trying to deserialize plain JSON '
                f'data, set {self.stage.split()[0]}.converter.schemas.enable=false in the connector config')
        return Converted(connect_json_value(doc["schema"], doc["payload"]))


_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_DATE = "org.apache.kafka.connect.data.Date"
_TIME = "org.apache.kafka.connect.data.Time"
_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def connect_json_value(schema: Any, value: Any, path: str = "payload") -> Any:
    """A JsonConverter payload read with its Connect schema, as
    JsonConverter.toConnectData does: defaults and optional fields for nulls, base64
    bytes, maps with non-string keys as [[key, value], ...], and the logical types."""
    if schema is None:  # "schema": null -> schemaless payload
        return value
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
        raise ConverterError(f"schema at {path} has no \"type\"")
    kind = schema["type"]
    if value is None:
        if schema.get("default") is not None:
            return connect_json_value({**schema, "default": None, "optional": True},
                                      schema["default"], path)
        if schema.get("optional", False):
            return None
        raise ConverterError(f"invalid null value for required {kind.upper()} field at {path}")
    name = schema.get("name")
    try:
        if name == _DECIMAL:
            scale = int((schema.get("parameters") or {}).get("scale", 0))
            if isinstance(value, str):
                unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
                return decimal.Decimal(unscaled).scaleb(-scale)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return decimal.Decimal(repr(value)).quantize(decimal.Decimal(1).scaleb(-scale))
            raise ValueError(f"Decimal needs base64 bytes or a number, not {type(value).__name__}")
        if name == _DATE:
            return (_EPOCH + dt.timedelta(days=_int(value))).date()
        if name == _TIME:
            return (_EPOCH + dt.timedelta(milliseconds=_int(value))).time()
        if name == _TIMESTAMP:
            return _EPOCH + dt.timedelta(milliseconds=_int(value))
        if kind in _INT_RANGES:
            number, bits = _int(value), _INT_RANGES[kind]
            if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                raise ValueError(f"{number} is out of range for {kind.upper()}")
            return number
        if kind in ("float32", "float64"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"expected a number, got {type(value).__name__}")
            return Float32(value) if kind == "float32" else float(value)
        if kind == "boolean":
            if not isinstance(value, bool):
                raise ValueError(f"expected a boolean, got {type(value).__name__}")
            return value
        if kind == "string":
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {type(value).__name__}")
            return value
        if kind == "bytes":
            if not isinstance(value, str):
                raise ValueError(f"expected base64 text, got {type(value).__name__}")
            return base64.b64decode(value, validate=True)
        if kind == "array":
            if not isinstance(value, list):
                raise ValueError(f"expected an array, got {type(value).__name__}")
            items = schema.get("items")
            return [connect_json_value(items, v, f"{path}[{i}]") for i, v in enumerate(value)]
        if kind == "map":
            keys, values = schema.get("keys"), schema.get("values")
            if isinstance(keys, dict) and keys.get("type") == "string":
                if not isinstance(value, dict):
                    raise ValueError(f"expected an object, got {type(value).__name__}")
                return {k: connect_json_value(values, v, f"{path}.{k}") for k, v in value.items()}
            if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 2 for e in value):
                raise ValueError("a map with non-string keys must be an array of [key, value] pairs")
            return {_hashable(connect_json_value(keys, k, f"{path}[{i}][0]")):
                    connect_json_value(values, v, f"{path}[{i}][1]") for i, (k, v) in enumerate(value)}
        if kind == "struct":
            if not isinstance(value, dict):
                raise ValueError(f"expected an object, got {type(value).__name__}")
            out = {}
            for field in schema.get("fields") or []:
                fname = field.get("field")
                out[fname] = connect_json_value(field, value.get(fname), f"{path}.{fname}")
            return out
    except ConverterError:
        raise
    except (ValueError, TypeError, OverflowError, decimal.InvalidOperation, binascii.Error) as exc:
        raise ConverterError(f"payload at {path} does not match its {name or kind} schema: {exc}") from None
    raise ConverterError(f"unknown schema type {kind!r} at {path}")


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value}")
        return int(value)
    return value


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple((k, _hashable(v)) for k, v in key.items())
    return key


# ------------------------------------------------------------------ schema registry

class SchemaRegistryClient:
    """A Confluent schema registry REST client (GET only): /schemas/ids/{id} and
    /subjects/{subject}/versions/{version}. Answers are cached for the process;
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


_CLIENTS: dict[tuple[str, str | None], SchemaRegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def registry_client(urls: str, user_info: str | None = None,
                    policy: retry.RetryPolicy = retry.DEFAULT) -> SchemaRegistryClient:
    """The process-wide client (and so the schema cache) for these registry URLs,
    retrying with the latest connector's `policy`."""
    with _CLIENTS_LOCK:
        key = (urls, user_info)
        if key not in _CLIENTS:
            _CLIENTS[key] = SchemaRegistryClient(urls, user_info, policy)
        _CLIENTS[key].policy = policy
        return _CLIENTS[key]


def _registry_for(settings: Mapping[str, str], which: Which) -> SchemaRegistryClient:
    url = _option(settings, which, "schema.registry.url")
    if url is None:
        raise ConfigError(f"{which}.converter={converter_class(settings, which)} needs "
                          f"{which}.converter.schema.registry.url")
    user_info = None
    if (_option(settings, which, "basic.auth.credentials.source") or "").upper() == "USER_INFO":
        user_info = _option(settings, which, "basic.auth.user.info") \
            or _option(settings, which, "schema.registry.basic.auth.user.info")
    return registry_client(url, user_info, retry.policy_from_settings(settings))


# ------------------------------------------------------------------ Confluent wire format

def split_wire_format(data: bytes, fmt: str) -> tuple[int, bytes]:
    """(schema id, payload) of Confluent's framing: magic byte 0, 4-byte big-endian id."""
    if len(data) < 5:
        raise ConverterError(f"corrupt {fmt}: {len(data)} bytes, shorter than the 5-byte "
                             f"Confluent wire-format header (magic byte 0 + schema id)")
    if data[0] != 0:
        raise ConverterError(f"corrupt {fmt}: unknown magic byte {data[0]:#04x}, expected 0x00 "
                             f"(the Confluent wire format); was the record written by a "
                             f"Confluent serializer?")
    return int.from_bytes(data[1:5], "big"), data[5:]


class _RegistryConverter(Converter):
    format_name = ""
    schema_type = ""

    def __init__(self, registry):
        self.registry = registry

    def _convert(self, data: bytes) -> Converted:
        schema_id, payload = split_wire_format(data, self.format_name)
        schema = self._schema(schema_id)
        return Converted(self._decode(schema_id, schema, payload), schema_id)

    def schema_of(self, schema_id: int) -> Any:
        """The parsed schema of `schema_id` (fetched once per process)."""
        return self._schema(schema_id)

    def _schema(self, schema_id: int) -> Any:
        key = (self.schema_type, schema_id)
        cache = getattr(self.registry, "parsed", None)
        if cache is not None and key in cache:
            return cache[key]
        answer = self.registry.by_id(schema_id)
        found = (answer.get("schemaType") or "AVRO").upper()
        if found != self.schema_type:
            raise self.error(f"schema id {schema_id} is a {found} schema, but "
                             f"{self.stage.split()[0]}.converter reads {self.schema_type}")
        parsed = self._parse(schema_id, answer)
        if cache is not None:
            cache[key] = parsed
        return parsed

    def _where(self, schema_id: int) -> str:
        return f"schema id {schema_id}" + (f" at {self.registry.display}"
                                           if hasattr(self.registry, "display") else "")

    def _parse(self, schema_id: int, answer: dict) -> Any:
        raise NotImplementedError

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        raise NotImplementedError


# ------------------------------------------------------------------ Avro

class _StrictReader(io.BytesIO):
    """A BytesIO whose short reads raise: a corrupt length prefix is then an error
    instead of a silently truncated string."""

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise EOFError("negative length")
        data = super().read(size)
        if len(data) < size:
            raise EOFError(f"needed {size} bytes, {len(data)} left")
        return data


class AvroConverter(_RegistryConverter):
    format_name = "Avro"
    schema_type = "AVRO"

    def _parse(self, schema_id: int, answer: dict) -> Any:
        import fastavro

        named: dict = {}
        try:
            self._add_references(answer.get("references") or [], named, set())
            return fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)
        except ConverterError:
            raise
        except Exception as exc:
            raise self.error(f"{self._where(schema_id)} is not a valid Avro schema: "
                             f"{type(exc).__name__}: {exc}") from None

    def _add_references(self, references: list, named: dict, seen: set) -> None:
        import fastavro

        for ref in references:
            key = (ref["subject"], ref["version"])
            if key in seen:
                continue
            seen.add(key)
            answer = self.registry.by_subject(ref["subject"], ref["version"])
            self._add_references(answer.get("references") or [], named, seen)
            fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        import fastavro

        reader = _StrictReader(payload)
        try:
            value = fastavro.schemaless_reader(reader, schema, None)
        except Exception as exc:
            raise self.error(f"corrupt Avro (does not match {self._where(schema_id)}): "
                             f"{type(exc).__name__}: {exc}") from None
        left = len(payload) - reader.tell()
        if left:
            raise self.error(f"corrupt Avro (does not match {self._where(schema_id)}): "
                             f"{left} bytes left over after the record")
        return plain_value(schema, value)


def _config_avro_schema(settings: Mapping[str, str], which: Which) -> Any:
    """The parsed writer schema of `<which>.converter.avro.schema`."""
    import fastavro

    key = f"{which}.converter.avro.schema"
    try:
        return fastavro.parse_schema(json.loads(_option(settings, which, "avro.schema")))
    except Exception as exc:
        raise ConfigError(f"{key} is not a valid Avro schema (JSON): {type(exc).__name__}: "
                          f"{exc}") from None


class ConfigSchemaAvroConverter(Converter):
    """Avro without a schema registry: each record is a plain Avro binary datum written
    with the schema given in `<key|value>.converter.avro.schema` (no wire-format
    header), as producers that share a fixed schema write it."""

    def __init__(self, schema: Any):
        self.schema = schema

    def _convert(self, data: bytes) -> Converted:
        import fastavro

        reader = _StrictReader(data)
        try:
            value = fastavro.schemaless_reader(reader, self.schema, None)
        except Exception as exc:
            raise self.error(f"corrupt Avro (does not match the configured avro.schema): "
                             f"{type(exc).__name__}: {exc}") from None
        if len(data) - reader.tell():
            raise self.error(f"corrupt Avro (does not match the configured avro.schema): "
                             f"{len(data) - reader.tell()} bytes left over after the record")
        return Converted(plain_value(self.schema, value))


# ------------------------------------------------------------------ Protobuf

def _read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ConverterError("corrupt Protobuf: the message-index varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ConverterError("corrupt Protobuf: message-index varint too long")
    return (result >> 1) ^ -(result & 1), pos


def read_message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """Confluent's message-index array (zigzag varints: count, then the indexes; a
    single 0 means [0], the file's first message) and the protobuf bytes after it."""
    count, pos = _read_zigzag(payload, 0)
    if count == 0:
        return [0], payload[pos:]
    if count < 0 or count > 100:
        raise ConverterError(f"corrupt Protobuf: message-index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _read_zigzag(payload, pos)
        indexes.append(index)
    return indexes, payload[pos:]


@dataclass
class _ProtoSchema:
    file_proto: Any  # FileDescriptorProto of the registered schema
    pool: Any  # DescriptorPool holding it and its imports
    classes: dict  # message-index tuple -> message class


class ProtobufConverter(_RegistryConverter):
    format_name = "Protobuf"
    schema_type = "PROTOBUF"

    def _parse(self, schema_id: int, answer: dict) -> Any:
        from google.protobuf import descriptor_pb2, descriptor_pool

        files = {f"floeline_schema_{schema_id}.proto": answer["schema"]}
        self._add_references(answer.get("references") or [], files)
        descriptor_set = _compile_proto(files, f"floeline_schema_{schema_id}.proto",
                                        self.error, self._where(schema_id))
        fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
        pool = descriptor_pool.DescriptorPool()
        for file_proto in fds.file:
            pool.Add(file_proto)
        return _ProtoSchema(fds.file[-1], pool, {})

    def _add_references(self, references: list, files: dict) -> None:
        for ref in references:
            if ref["name"] in files:
                continue
            answer = self.registry.by_subject(ref["subject"], ref["version"])
            files[ref["name"]] = answer["schema"]
            self._add_references(answer.get("references") or [], files)

    def _message_class(self, schema_id: int, schema: _ProtoSchema, indexes: list[int]):
        key = tuple(indexes)
        if key not in schema.classes:
            from google.protobuf import message_factory

            proto, names = schema.file_proto, []
            container = proto.message_type
            for index in indexes:
                # declared messages only: Confluent counts message types as written in
                # the schema, and protoc's generated map-entry types are not among them
                declared = [m for m in container if not m.options.map_entry]
                if not 0 <= index < len(declared):
                    raise self.error(f"corrupt Protobuf: message index {indexes} not in "
                                     f"{self._where(schema_id)}")
                names.append(declared[index].name)
                container = declared[index].nested_type
            full = ".".join(([proto.package] if proto.package else []) + names)
            descriptor = schema.pool.FindMessageTypeByName(full)
            schema.classes[key] = message_factory.GetMessageClass(descriptor)
        return schema.classes[key]

    def _decode(self, schema_id: int, schema: _ProtoSchema, payload: bytes) -> Any:
        indexes, body = read_message_indexes(payload)
        cls = self._message_class(schema_id, schema, indexes)
        try:
            message = cls.FromString(body)
        except Exception as exc:
            raise self.error(f"corrupt Protobuf (does not match {self._where(schema_id)}, "
                             f"message {cls.DESCRIPTOR.full_name}): {exc}") from None
        return protobuf_to_python(message)


def _compile_proto(files: dict[str, str], main: str, error, where: str) -> bytes:
    """Compile .proto texts with protoc (grpcio-tools) to a FileDescriptorSet holding
    `main` last and its imports (well-known types included) before it. protoc runs
    in a subprocess so its error messages can be captured."""
    try:
        import importlib.resources

        import grpc_tools
        well_known = str(importlib.resources.files(grpc_tools) / "_proto")
    except ImportError:
        raise ConfigError("the Protobuf converter needs the grpcio-tools package "
                          "(pip install grpcio-tools)") from None
    with tempfile.TemporaryDirectory(prefix="floeline-proto-") as tmp:
        for name, text in files.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        out = os.path.join(tmp, "schema.desc")
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"-I{well_known}",
               "--include_imports", f"--descriptor_set_out={out}", main]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not os.path.exists(out):
            message = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            raise error(f"{where} is not a valid Protobuf schema: {message}")
        with open(out, "rb") as handle:
            return handle.read()


_WRAPPERS = {f"google.protobuf.{n}Value" for n in
             ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}


def protobuf_to_python(message) -> Any:
    """A protobuf message as Kafka Connect's ProtobufConverter would give it, without
    schema: every field by name (proto3 scalars with their defaults; unset message
    fields and unset fields with presence as None), enums by name, repeated as lists,
    maps as dicts; google.protobuf.Timestamp -> datetime UTC, google.type.Date -> date,
    wrappers -> their value, Struct/Value/ListValue -> their JSON value. Numbers as
    Confluent's converter holds them in Java: uint64/fixed64 in a (signed) long, so
    2^64-1 is -1; float as a float32 (Float32)."""
    full = message.DESCRIPTOR.full_name
    if full == "google.protobuf.Timestamp":
        return _EPOCH + dt.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    if full == "google.type.Date":
        return dt.date(message.year, message.month, message.day)
    if full in _WRAPPERS:
        return _proto_scalar(message.value, message.DESCRIPTOR.fields_by_name["value"])
    if full in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"):
        from google.protobuf import json_format
        return json.loads(json_format.MessageToJson(message))
    out = {}
    for field in message.DESCRIPTOR.fields:
        out[field.name] = _proto_field(message, field)
    return out


def _proto_field(message, field) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    value = getattr(message, field.name)
    is_repeated = getattr(field, "is_repeated", None)
    repeated = is_repeated if is_repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED
    if repeated:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            return {k: _proto_scalar(v, value_field) for k, v in value.items()}
        return [_proto_scalar(v, field) for v in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _proto_scalar(value, field)


def _proto_scalar(value, field) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return protobuf_to_python(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    if field.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        # Confluent's converter holds them in a Java long: 2^64-1 is -1
        return value - (1 << 64) if value >= (1 << 63) else value
    if field.type == FieldDescriptor.TYPE_FLOAT:
        return Float32(value)
    return value


# ------------------------------------------------------------------ JSON Schema

class JsonSchemaConverter(_RegistryConverter):
    """Confluent's JSON Schema format: wire header + JSON text. The schema is fetched
    (an unknown id is an error) but the payload is not validated against it."""

    format_name = "JSON Schema"
    schema_type = "JSON"

    def _parse(self, schema_id: int, answer: dict) -> Any:
        return True

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        return parse_json(payload, self.stage.split()[0])


def converter_for(settings: Mapping[str, str], which: Which, registry=None) -> Converter:
    """The converter of `<which>.converter` (value unset: plain JSON; key unset: text,
    as floeline's fast path reads it). `registry` replaces the HTTP schema registry
    client (anything with by_id(id) and by_subject(subject, version) returning the
    registry's JSON answers) — tests pass one to avoid HTTP."""
    check_converters({k: v for k, v in settings.items() if k.startswith(f"{which}.converter")})
    name = converter_class(settings, which)
    if name is None:
        converter: Converter = StringConverter() if which == "key" else JsonConverter(False)
    elif name == JSON_CONVERTER:
        converter = JsonConverter(json_schemas_enabled(settings, which))
    elif name == STRING_CONVERTER:
        converter = StringConverter(_option(settings, which, "encoding") or "UTF-8")
    elif name == BYTES_CONVERTER:
        converter = ByteArrayConverter()
    elif name == AVRO_CONVERTER and _option(settings, which, "avro.schema") is not None:
        converter = ConfigSchemaAvroConverter(_config_avro_schema(settings, which))
    else:
        cls = {AVRO_CONVERTER: AvroConverter, PROTOBUF_CONVERTER: ProtobufConverter,
               JSON_SCHEMA_CONVERTER: JsonSchemaConverter}[name]
        converter = cls(registry if registry is not None else _registry_for(settings, which))
    converter.stage = _STAGES[which]
    return converter


# ------------------------------------------------------------------ values -> JSON text

_MAX_PRECISION = 38
_ENCODE_STRING = json.encoder.encode_basestring  # type: ignore[attr-defined]


def to_json_text(value: Any) -> str:
    """The spec's conversion rules, as compact JSON text: numbers and booleans as they
    are; a Decimal with precision > 38 as a string; bytes as base64 strings; arrays stay
    arrays and structs/maps nested objects; maps with non-string keys as
    [[key, value], ...]; date/time/datetime as ISO-8601 (UTC, `Z`); float NaN and
    infinities as "NaN", "Inf", "-Inf" (JSON has no literals for them)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_ENCODE_STRING(value))
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float_text(value))
    elif isinstance(value, decimal.Decimal):
        out.append(_decimal_text(value))
    elif isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            out.append("{")
            for i, (k, v) in enumerate(value.items()):
                out.append("," if i else "")
                out.append(_ENCODE_STRING(k))
                out.append(":")
                _write(v, out)
            out.append("}")
        else:
            _write([[k, v] for k, v in value.items()], out)
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            out.append("," if i else "")
            _write(v, out)
        out.append("]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    elif isinstance(value, dt.datetime):
        out.append('"' + _datetime_text(value) + '"')
    elif isinstance(value, dt.date):
        out.append('"' + value.isoformat() + '"')
    elif isinstance(value, dt.time):
        out.append('"' + value.isoformat(timespec="milliseconds" if value.microsecond % 1000 == 0
                                         else "microseconds") + '"')
    elif isinstance(value, uuid.UUID):
        out.append('"' + str(value) + '"')
    else:
        raise TypeError(f"cannot convert a {type(value).__name__} to JSON")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Inf"' if value > 0 else '"-Inf"'
    if isinstance(value, Float32):  # the fewest digits, as Java's Float.toString
        return float.__repr__(shortest_float32(value))
    return float.__repr__(value)


def _decimal_text(value: decimal.Decimal) -> str:
    if not value.is_finite():
        return '"NaN"' if value.is_nan() else ('"-Inf"' if value.is_signed() else '"Inf"')
    sign, digits, exponent = value.as_tuple()
    # digits needed to write the number out in full (Snowflake NUMBER's precision)
    precision = len(digits) + max(exponent, 0)
    text = format(value, "f")
    return '"' + text + '"' if precision > _MAX_PRECISION else text


def _datetime_text(value: dt.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
    return value.isoformat(timespec=spec) + "Z"
