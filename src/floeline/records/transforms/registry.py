"""The supported transform and predicate classes, by Kafka's class names and short aliases."""

from __future__ import annotations

from floeline.records.transforms.cast import Cast
from floeline.records.transforms.fields import (
    ExtractField, Flatten, HoistField, InsertField, MaskField, ReplaceField, ValueToKey)
from floeline.records.transforms.header_transforms import DropHeaders, InsertHeader
from floeline.records.transforms.predicates import HasHeaderKey, RecordIsTombstone, TopicNameMatches
from floeline.records.transforms.routing import Filter, RegexRouter, TimestampRouter
from floeline.records.transforms.timestamps import TimestampConverter

PACKAGE = "org.apache.kafka.connect.transforms."
PREDICATES_PACKAGE = PACKAGE + "predicates."

TRANSFORM_CLASSES: dict[str, tuple[type, str | None]] = {}
for _cls in (Cast, ExtractField, Flatten, HoistField, InsertField, MaskField, ReplaceField,
             TimestampConverter):
    for _side in ("Key", "Value"):
        TRANSFORM_CLASSES[f"{PACKAGE}{_cls.__name__}${_side}"] = (_cls, _side.lower())
for _cls in (DropHeaders, Filter, InsertHeader, RegexRouter, TimestampRouter, ValueToKey):
    TRANSFORM_CLASSES[PACKAGE + _cls.__name__] = (_cls, None)
PREDICATE_CLASSES: dict[str, tuple[type, None]] = {
    PREDICATES_PACKAGE + _cls.__name__: (_cls, None)
    for _cls in (HasHeaderKey, RecordIsTombstone, TopicNameMatches)}

# Short names: Kafka Connect's own plugin aliases (the simple class names that are
# unique, e.g. RegexRouter, TopicNameMatches) plus floeline's HoistField$Value style.
SHORT_NAMES = {name.rsplit(".", 1)[-1]: name for name in [*TRANSFORM_CLASSES, *PREDICATE_CLASSES]}

SUPPORTED_TRANSFORMS = tuple(sorted(TRANSFORM_CLASSES))
SUPPORTED_PREDICATES = tuple(sorted(PREDICATE_CLASSES))
del _cls, _side
