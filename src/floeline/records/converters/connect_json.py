"""Kafka Connect's JsonConverter: plain JSON, or the {"schema", "payload"} envelope with
its schema applied."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
from typing import Any

from floeline.records.connect_columns import connect_field_types
from floeline.records.debezium_types import debezium_value, is_debezium_type
from floeline.records.record import Float32
from floeline.records.converters.base import Converted, Converter, ConverterError


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
        return Converted(connect_json_value(doc["schema"], doc["payload"]),
                         field_types=connect_field_types(doc["schema"]))


_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_DATE = "org.apache.kafka.connect.data.Date"
_TIME = "org.apache.kafka.connect.data.Time"
_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
# JsonConverter writes FLOAT32/FLOAT64 as "float"/"double" (its JsonSchema names); the
# Connect type names are read too.
_FLOAT_TYPES = {"float": 32, "double": 64, "float32": 32, "float64": 64}


def connect_json_value(schema: Any, value: Any, path: str = "payload") -> Any:
    """A JsonConverter payload read with its Connect schema, as
    JsonConverter.toConnectData does: defaults and optional fields for nulls, base64
    bytes, maps with non-string keys as [[key, value], ...], and the logical types:
    Connect's own and Debezium's (debezium_types.py)."""
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
        if is_debezium_type(name):  # its base type first, then what Debezium's name says
            base = connect_json_value({k: v for k, v in schema.items() if k != "name"}, value, path)
            return debezium_value(name, base)
        if name == _DECIMAL:
            scale = int((schema.get("parameters") or {}).get("scale", 0))
            if isinstance(value, str):
                unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
                return decimal.Decimal(unscaled).scaleb(-scale)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return decimal.Decimal(repr(value)).quantize(decimal.Decimal(1).scaleb(-scale))
            raise ValueError(f"Decimal needs base64 bytes or a number, not {type(value).__name__}")
        if name == _DATE:
            return (EPOCH + dt.timedelta(days=_int(value))).date()
        if name == _TIME:
            return (EPOCH + dt.timedelta(milliseconds=_int(value))).time()
        if name == _TIMESTAMP:
            return EPOCH + dt.timedelta(milliseconds=_int(value))
        if kind in _INT_RANGES:
            number, bits = _int(value), _INT_RANGES[kind]
            if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                raise ValueError(f"{number} is out of range for {kind.upper()}")
            return number
        if kind in _FLOAT_TYPES:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"expected a number, got {type(value).__name__}")
            return Float32(value) if _FLOAT_TYPES[kind] == 32 else float(value)
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
