"""The second reader, for the worker: the typed reader, noting how it reads each key
(type, default, accepted values), which the worker's connector-plugins and validate
endpoints list as Connect's config definitions.
"""

from __future__ import annotations

from collections.abc import Mapping

from floeline.config.model import KeyUse
from floeline.config.reader import Reader


def describe_keys(settings: Mapping[str, str]) -> dict[str, KeyUse]:
    """Every key reading `settings` looks at, with how it reads it (defaults can depend
    on other settings, e.g. connector.class): what the worker's connector-plugins
    endpoints list as definitions."""
    reader = DescribingReader(settings)
    reader.build()
    return reader.uses



class DescribingReader(Reader):
    """A Reader that notes how each key is read (describe_keys); the first, most
    specific reading wins (boolean() reads through text())."""

    def __init__(self, settings: Mapping[str, str]):
        super().__init__(settings)
        self.uses: dict[str, KeyUse] = {}

    def _note(self, key: str, use: KeyUse) -> None:
        self.uses.setdefault(key, use)

    def text(self, key: str, default: str | None = None) -> str | None:
        self._note(key, KeyUse("STRING", default))
        return super().text(key, default)

    def boolean(self, key: str, default: bool) -> bool:
        self._note(key, KeyUse("BOOLEAN", str(default).lower()))
        return super().boolean(key, default)

    def integer(self, key: str, default: int, minimum: int) -> int:
        self._note(key, KeyUse("INT", str(default)))
        return super().integer(key, default, minimum)

    def choice(self, key: str, default: str, accepted: tuple[str, ...]) -> str:
        self._note(key, KeyUse("STRING", default, tuple(accepted)))
        return super().choice(key, default, accepted)
