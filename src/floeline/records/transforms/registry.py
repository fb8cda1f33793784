"""The class that implements each transform and predicate config/decoding.py lists."""

from __future__ import annotations

from floeline.config.decoding import (
    DEBEZIUM_TRANSFORMS, DEBEZIUM_TRANSFORMS_PACKAGE, KEY_OR_VALUE_TRANSFORMS, PREDICATES,
    PREDICATES_PACKAGE, RECORD_TRANSFORMS, TRANSFORMS_PACKAGE)
from floeline.records.transforms.cast import Cast
from floeline.records.transforms.debezium import ExtractNewRecordState
from floeline.records.transforms.fields import (
    ExtractField, Flatten, HoistField, InsertField, MaskField, ReplaceField, ValueToKey)
from floeline.records.transforms.header_transforms import DropHeaders, InsertHeader
from floeline.records.transforms.predicates import HasHeaderKey, RecordIsTombstone, TopicNameMatches
from floeline.records.transforms.routing import Filter, RegexRouter, TimestampRouter
from floeline.records.transforms.timestamps import TimestampConverter

_CLASSES = {cls.__name__: cls for cls in (
    Cast, ExtractField, Flatten, HoistField, InsertField, MaskField, ReplaceField, TimestampConverter,
    DropHeaders, Filter, InsertHeader, RegexRouter, TimestampRouter, ValueToKey,
    HasHeaderKey, RecordIsTombstone, TopicNameMatches, ExtractNewRecordState)}

# Full Kafka class name -> (class, "key" | "value" | None: the whole record)
TRANSFORM_CLASSES: dict[str, tuple[type, str | None]] = {
    **{f"{TRANSFORMS_PACKAGE}{name}${side}": (_CLASSES[name], side.lower())
       for name in KEY_OR_VALUE_TRANSFORMS for side in ("Key", "Value")},
    **{TRANSFORMS_PACKAGE + name: (_CLASSES[name], None) for name in RECORD_TRANSFORMS},
    **{DEBEZIUM_TRANSFORMS_PACKAGE + name: (_CLASSES[name], None) for name in DEBEZIUM_TRANSFORMS}}
PREDICATE_CLASSES: dict[str, type] = {PREDICATES_PACKAGE + name: _CLASSES[name] for name in PREDICATES}
