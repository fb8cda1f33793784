"""Checks, once at start, what reading the config could not: each transform's and
predicate's own options (the config checked the converters, the header settings and
how the chain is wired), so a config error never shows up as a bad record."""

from __future__ import annotations

from floeline.records.transforms.chain import chain_for


def check_supported(config) -> None:
    """Raise one ConfigError naming every transform / predicate option that is wrong."""
    chain_for(config.decoding.transforms)
