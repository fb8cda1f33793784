"""Column types as the values' Avro schemas declare them, so a new column's type comes
from its schema, not from the batch's values."""

from __future__ import annotations

from functools import cached_property

from floeline.config.decoding import AVRO_CONVERTER
from floeline.records.avro_schema import column_types
from floeline.records.converters.avro import ConfigSchemaAvroConverter
from floeline.records.converters.factory import converter_for


class DeclaredTypes:
    """Top-level field -> column type for a batch's schema ids (later ids win). Empty
    for other converters, and with transforms (which reshape values without schemas)."""

    def __init__(self, config, transforms):
        self.config, self.transforms = config, transforms

    def __call__(self, schema_ids) -> dict[str, str]:
        converter = self._schema_converter
        if converter is None:
            return {}
        if isinstance(converter, ConfigSchemaAvroConverter):
            return column_types(converter.schema)
        declared: dict[str, str] = {}
        for schema_id in sorted(schema_ids):
            declared.update(column_types(converter.schema_of(schema_id)))
        return declared

    @cached_property
    def _schema_converter(self):
        if self.config.value_converter != AVRO_CONVERTER or self.transforms is not None:
            return None
        return converter_for(self.config.decoding.value, policy=self.config.retry, own_registry=True)
