"""What every transform shares: the failure a chain reports, the $Key/$Value base, and
the helpers for Kafka's messages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from floeline.records.record import Record

if TYPE_CHECKING:
    from floeline.records.transforms.options import PluginOptions


class TransformFailure(Exception):
    """A transform cannot handle a record; TransformChain turns it into a TransformError."""



def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def require_map(value: Any, purpose: str) -> dict:
    """Kafka's Requirements.requireMap, with its message."""
    if not isinstance(value, dict):
        raise TransformFailure(f"Only Map objects supported in absence of schema for [{purpose}], "
                    f"found: {type_name(value)}")
    return value


class KeyOrValueTransform:
    """Base of the $Key/$Value transforms: `data` is the key or the value."""

    def __init__(self, opts: PluginOptions, side: str):
        self.side = side

    def apply(self, record: Record) -> Record | None:
        data = record.value if self.side == "value" else record.key
        new = self.transform(data, record)
        return record.with_(value=new) if self.side == "value" else record.with_(key=new)

    def transform(self, data: Any, record: Record) -> Any:
        raise NotImplementedError
