"""Column types as the values' schemas declare them, so a new column's type comes
from its schema, not from the batch's values: what the decode stage read from each
record's schema (JsonConverter's envelope, Avro; through transforms that keep them,
such as ExtractNewRecordState), and the Avro schemas of the batch's schema ids."""

from __future__ import annotations

import json

from functools import cached_property

from floeline.config.decoding import AVRO_CONVERTER
from floeline.records.avro_schema import column_types
from floeline.records.converters.avro import ConfigSchemaAvroConverter
from floeline.records.converters.factory import converter_for


class DeclaredTypes:
    """Top-level field -> column type: the records' own declarations, then those of the
    batch's Avro schema ids (later ids win). The schema ids are read only without
    transforms (which reshape values without schemas; those that keep the declarations
    pass them on in the records')."""

    def __init__(self, config, transforms):
        self.config, self.transforms = config, transforms

    def __call__(self, schema_ids, record_types=()) -> dict[str, str]:
        """`record_types`: the decode stage's _declared_types texts of the batch."""
        declared: dict[str, str] = {}
        for text in sorted(record_types):
            declared.update(json.loads(text))
        converter = self._schema_converter
        if converter is None:
            return declared
        if isinstance(converter, ConfigSchemaAvroConverter):
            return {**declared, **column_types(converter.schema)}
        for schema_id in sorted(schema_ids):
            declared.update(column_types(converter.schema_of(schema_id)))
        return declared

    @cached_property
    def _schema_converter(self):
        if self.config.value_converter != AVRO_CONVERTER or self.transforms is not None:
            return None
        return converter_for(self.config.decoding.value, policy=self.config.retry, own_registry=True)
