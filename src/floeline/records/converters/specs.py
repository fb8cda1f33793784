"""The converter class names floeline knows, the decode stages, and reading a
`<key|value>.converter.*` option."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal


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

STAGES = {"key": KEY_STAGE, "value": VALUE_STAGE}


def converter_class(settings: Mapping[str, str], which: Which) -> str | None:
    value = settings.get(f"{which}.converter")
    return value.strip() if value is not None and value.strip() else None


def converter_option(settings: Mapping[str, str], which: Which, name: str) -> str | None:
    value = settings.get(f"{which}.converter.{name}")
    return value.strip() if value is not None and value.strip() else None


def json_schemas_enabled(settings: Mapping[str, str], which: Which) -> bool:
    """Whether a JsonConverter reads the {"schema", "payload"} envelope: the
    `<which>.converter.schemas.enable` setting, default true as in Kafka Connect. With
    no converter configured floeline reads plain JSON (no envelope)."""
    if converter_class(settings, which) is None:
        return False
    value = converter_option(settings, which, "schemas.enable")
    return True if value is None else value.lower() == "true"
