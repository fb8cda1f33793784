"""Confluent's JSON Schema format."""

from __future__ import annotations

from typing import Any

from floeline.records.converters.connect_json import parse_json
from floeline.records.converters.wire_format import RegistryConverter


class JsonSchemaConverter(RegistryConverter):
    """Confluent's JSON Schema format: wire header + JSON text. The schema is fetched
    (an unknown id is an error) but the payload is not validated against it."""

    format_name = "JSON Schema"
    schema_type = "JSON"

    def _parse(self, schema_id: int, answer: dict) -> Any:
        return True

    def _decode(self, schema_id: int, schema: Any, payload: bytes) -> Any:
        return parse_json(payload, self.stage.split()[0])
