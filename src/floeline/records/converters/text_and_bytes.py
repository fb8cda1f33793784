"""StringConverter and ByteArrayConverter."""

from __future__ import annotations

from floeline.config.decoding import java_charset
from floeline.errors import ConfigError
from floeline.records.converters.base import Converted, Converter


class ByteArrayConverter(Converter):
    def _convert(self, data: bytes) -> Converted:
        return Converted(data)


class StringConverter(Converter):
    """As Kafka's StringDeserializer: malformed bytes become U+FFFD, never an error."""

    def __init__(self, encoding: str = "UTF-8"):
        try:
            self.encoding = java_charset(encoding)
        except LookupError:
            raise ConfigError(f"converter.encoding={encoding!r} is not a known character set; "
                              f"use e.g. UTF-8") from None

    def _convert(self, data: bytes) -> Converted:
        return Converted(data.decode(self.encoding, errors="replace"))
