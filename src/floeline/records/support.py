"""Checks, once at start, that the connector's converters and transforms exist and
are configured completely, so a config error never shows up as a bad record."""

from __future__ import annotations

from floeline.records.converters.factory import check_converters
from floeline.records.decode import transform_chain_for
from floeline.records.header_rules import header_rules


def check_supported(config) -> None:
    """Raise ConfigError naming every converter / header converter / transform setting
    that is wrong."""
    check_converters(config.raw)
    header_rules(config.raw)
    transform_chain_for(config.raw)
