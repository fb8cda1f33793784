"""Checking a connector's converter settings, and building the converter they name."""

from __future__ import annotations

from collections.abc import Mapping

from floeline.errors import ConfigError
from floeline.records.converters.avro import AvroConverter, ConfigSchemaAvroConverter, config_avro_schema
from floeline.records.converters.base import Converter
from floeline.records.converters.connect_json import JsonConverter
from floeline.records.converters.json_schema import JsonSchemaConverter
from floeline.records.converters.protobuf import ProtobufConverter
from floeline.records.converters.schema_registry import registry_for
from floeline.records.converters.specs import (
    AVRO_CONVERTER, BYTES_CONVERTER, JSON_CONVERTER, JSON_SCHEMA_CONVERTER, PROTOBUF_CONVERTER,
    REGISTRY_CONVERTERS, SNOWFLAKE_CONVERTERS, STAGES, STRING_CONVERTER, SUPPORTED_CONVERTERS, Which,
    converter_class, converter_option, json_schemas_enabled)
from floeline.records.converters.text_and_bytes import ByteArrayConverter, StringConverter


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
        elif name == AVRO_CONVERTER and converter_option(settings, which, "avro.schema") is not None:
            try:
                config_avro_schema(settings, which)
            except ConfigError as exc:
                problems.append(str(exc))
        elif name in REGISTRY_CONVERTERS and converter_option(settings, which, "schema.registry.url") is None:
            problems.append(f"{key}={name} needs {key}.schema.registry.url (the schema "
                            f"registry's base URL, e.g. http://localhost:8081), or for Avro "
                            f"without a registry {key}.avro.schema (the writer schema as JSON)")
        enable = converter_option(settings, which, "schemas.enable")
        if enable is not None and enable.lower() not in ("true", "false"):
            problems.append(f"{key}.schemas.enable={enable!r} is not a boolean; accepted "
                            f"values: true, false")
    if problems:
        raise ConfigError("invalid converter settings:\n" + "\n".join(f"  - {p}" for p in problems))


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
        converter = StringConverter(converter_option(settings, which, "encoding") or "UTF-8")
    elif name == BYTES_CONVERTER:
        converter = ByteArrayConverter()
    elif name == AVRO_CONVERTER and converter_option(settings, which, "avro.schema") is not None:
        converter = ConfigSchemaAvroConverter(config_avro_schema(settings, which))
    else:
        cls = {AVRO_CONVERTER: AvroConverter, PROTOBUF_CONVERTER: ProtobufConverter,
               JSON_SCHEMA_CONVERTER: JsonSchemaConverter}[name]
        converter = cls(registry if registry is not None else registry_for(settings, which))
    converter.stage = STAGES[which]
    return converter
