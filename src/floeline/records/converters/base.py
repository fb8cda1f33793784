"""What every converter shares: Converter, its Converted result, and its errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from floeline.errors import RecordError, ServiceUnavailable

KEY_STAGE = "key converter"
VALUE_STAGE = "value converter"
STAGES = {"key": KEY_STAGE, "value": VALUE_STAGE}


class ConverterError(RecordError):
    """A record's key or value cannot be converted. `stage` is 'key converter' or
    'value converter'; the message is the reason (the decode stage adds the record's
    coordinates)."""

    def __init__(self, reason: str, stage: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.stage = stage

    def __reduce__(self):  # keep the stage when pickled (Spark ships errors between processes)
        return (type(self), (self.reason, self.stage))


class RegistryUnavailable(ServiceUnavailable):
    """The schema registry could not be reached, or answered with a server error or
    429 (too many requests). Transient: the client retries it (floeline/retry.py); it
    is never the record's fault, so it fails the batch instead of sending the record
    to the dead-letter queue. `stage` and `reason` as ConverterError's."""

    def __init__(self, reason: str, stage: str | None = None):
        super().__init__(reason)
        self.reason, self.stage = reason, stage

    def __reduce__(self):
        return (type(self), (self.reason, self.stage))



@dataclass(frozen=True)
class Converted:
    value: Any
    schema_id: int | None = None  # the schema registry id of the Confluent wire formats
    # the columns the value's schema declares (connect_columns.FieldTypes); None: no schema
    field_types: dict | None = None


class Converter:
    """Turns a record's key or value bytes into a Python value (None stays None)."""

    stage: str = VALUE_STAGE

    def convert(self, data: bytes | None) -> Converted:
        if data is None:
            return Converted(None)
        try:
            return self._convert(bytes(data))
        except ConverterError as exc:
            exc.stage = exc.stage or self.stage
            raise

    def _convert(self, data: bytes) -> Converted:
        raise NotImplementedError

    def error(self, reason: str) -> ConverterError:
        return ConverterError(reason, self.stage)
