"""The one reader of an alias's settings (transforms.<alias>.* / predicates.<alias>.*)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

REQUIRED = object()  # marks an option without a default


class PluginOptions:
    """The settings of one alias, read the way Kafka's ConfigDef reads them (values
    trimmed, lists comma-separated), collecting problems instead of raising."""

    def __init__(self, prefix: str, label: str, values: Mapping[str, str], reserved=()):
        self.prefix, self.label = prefix, label
        self.values = dict(values)  # option name (after `prefix`) -> value as given
        self.known = set(reserved)
        self.problems: list[str] = []

    def string(self, name: str, default: Any = REQUIRED) -> str | None:
        self.known.add(name)
        value = self.values.get(name)
        if value is None:
            if default is REQUIRED:
                self.problems.append(f"missing required setting '{self.prefix}{name}' for {self.label}")
                return None
            return default
        return value.strip()

    def non_empty(self, name: str, default: Any = REQUIRED) -> str | None:
        value = self.string(name, default)
        if value == "":
            self.bad(name, value, "must not be empty")
            return None
        return value

    def list(self, name: str, default: Any = REQUIRED, non_empty: bool = False) -> list[str] | None:
        value = self.string(name, default)
        if value is None or isinstance(value, list):
            return value
        items = [item.strip() for item in value.split(",")] if value else []
        if non_empty and not items:
            self.bad(name, value, "must list at least one entry")
            return None
        return items

    def boolean(self, name: str, default: bool) -> bool:
        value = self.string(name, None)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            self.bad(name, value, "is not a boolean; accepted values: true, false")
            return default
        return value.lower() == "true"

    def choice(self, name: str, default: Any, accepted: tuple[str, ...]) -> str | None:
        """One of `accepted`, case-sensitive as in Kafka's ValidString."""
        value = self.string(name, default)
        if value is not None and value not in accepted:
            self.bad(name, value, f"is not valid; accepted values: {', '.join(accepted)}")
            return None
        return value

    def bad(self, name: str, value: Any, reason: str) -> None:
        self.problems.append(f"{self.prefix}{name}={value!r} {reason} ({self.label})")

    def check_unknown(self) -> None:
        for name in sorted(set(self.values) - self.known):
            close = difflib.get_close_matches(name, sorted(self.known - {"type"}), n=1)
            hint = f"did you mean '{self.prefix}{close[0]}'? " if close else ""
            options = ", ".join(sorted(self.known)) or "none"
            self.problems.append(f"unknown setting '{self.prefix}{name}' for {self.label}; {hint}"
                                 f"its settings are: {options}")


def java_split(text: str, sep: str) -> list[str]:
    """String.split as Java does it: trailing empty strings removed."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts
