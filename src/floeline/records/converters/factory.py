"""Building the converter a (checked) converter spec names."""

from __future__ import annotations

from floeline import retry
from floeline.config.decoding import (
    AVRO_CONVERTER, BYTES_CONVERTER, JSON_CONVERTER, JSON_SCHEMA_CONVERTER, PROTOBUF_CONVERTER,
    STRING_CONVERTER, ConverterSpec, parse_avro_schema)
from floeline.records.converters.avro import AvroConverter, ConfigSchemaAvroConverter
from floeline.records.converters.base import STAGES, Converter
from floeline.records.converters.connect_json import JsonConverter
from floeline.records.converters.json_schema import JsonSchemaConverter
from floeline.records.converters.protobuf import ProtobufConverter
from floeline.records.converters.schema_registry import registry_for
from floeline.records.converters.text_and_bytes import ByteArrayConverter, StringConverter


def converter_for(spec: ConverterSpec, registry=None, *, policy: retry.RetryPolicy = retry.DEFAULT,
                  own_registry: bool = False) -> Converter:
    """The converter of `<which>.converter` (value unset: plain JSON; key unset: text,
    as floeline's fast path reads it). A registry converter uses `registry` (anything
    with by_id(id) and by_subject(subject, version) returning the registry's JSON
    answers; tests pass one to avoid HTTP), else a client retrying with `policy`: its
    own with `own_registry` (the driver), else the worker process's (executors)."""
    name = spec.class_name
    if name is None:
        converter: Converter = StringConverter() if spec.which == "key" else JsonConverter(False)
    elif name == JSON_CONVERTER:
        converter = JsonConverter(spec.json_schemas_enabled)
    elif name == STRING_CONVERTER:
        converter = StringConverter(spec.option("encoding") or "UTF-8")
    elif name == BYTES_CONVERTER:
        converter = ByteArrayConverter()
    elif name == AVRO_CONVERTER and spec.option("avro.schema") is not None:
        converter = ConfigSchemaAvroConverter(parse_avro_schema(spec))
    else:
        cls = {AVRO_CONVERTER: AvroConverter, PROTOBUF_CONVERTER: ProtobufConverter,
               JSON_SCHEMA_CONVERTER: JsonSchemaConverter}[name]
        converter = cls(registry if registry is not None
                        else registry_for(spec, policy, shared=not own_registry))
    converter.stage = STAGES[spec.which]
    return converter
