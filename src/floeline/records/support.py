"""What this floeline version can decode, checked once at start: a config asking for a
converter or transform floeline does not implement yet is refused with a clear error
rather than ingested wrongly."""

from __future__ import annotations

from floeline.errors import ConfigError

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"

# The value is read as JSON text; the key is stored as text in RECORD_METADATA.key.
VALUE_CONVERTERS = {None, JSON_CONVERTER}
KEY_CONVERTERS = {None, JSON_CONVERTER, STRING_CONVERTER}


def check_supported(config) -> None:
    problems = []
    if config.value_converter not in VALUE_CONVERTERS:
        problems.append(f"value.converter={config.value_converter} is not supported yet; "
                        f"use {JSON_CONVERTER} (schemaless JSON values)")
    elif str(config.raw.get("value.converter.schemas.enable", "false")).lower() == "true":
        problems.append("value.converter.schemas.enable=true (the JSON schema envelope) is not "
                        "supported yet; set it to false for plain JSON values")
    if config.key_converter not in KEY_CONVERTERS:
        problems.append(f"key.converter={config.key_converter} is not supported yet; use "
                        f"{STRING_CONVERTER} or {JSON_CONVERTER}")
    if str(config.raw.get("transforms", "")).strip():
        problems.append(f"transforms={config.raw['transforms']} are not supported yet; remove "
                        f"them (records must be JSON objects)")
    if config.dlq_topic:
        problems.append("errors.deadletterqueue.topic.name is not supported yet; with "
                        "errors.tolerance=all bad records are skipped and counted (logged "
                        "with errors.log.enable=true)")
    if problems:
        raise ConfigError("this connector config needs features floeline does not have yet:\n"
                          + "\n".join(f"  - {p}" for p in problems))
