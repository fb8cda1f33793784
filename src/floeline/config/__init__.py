"""Connector configuration: read a Snowflake Kafka connector config, validate it once,
and hand the rest of floeline a typed, frozen ConnectorConfig.

A config written for the Snowflake connector (a .properties file or the Kafka Connect
REST JSON) works unchanged: the same keys and defaults. Keys that only make sense for
Snowflake's cloud or the Kafka Connect runtime are accepted and listed in
`ignored_keys`, never silently dropped; floeline's own settings start with `floeline.`.
Every problem in a config is reported at once, in one ConfigError.

The package's modules, one job each: keys (the key lists), model (ConnectorConfig and
its parts), reader (the typed reader, read_config), describing (the worker's reader,
describe_keys), and the parts' settings (decoding, kafka_security, kinesis, changes,
locations, tls, registry_access, files). This module is the entry points and re-exports
the names the rest of floeline imports from `floeline.config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from floeline.config import changes, kafka_security, kinesis, locations
from floeline.config.changes import ChangeSettings
from floeline.config.decoding import DecodeSpec
from floeline.config.describing import describe_keys
from floeline.config.files import parse_properties, settings_from_json
from floeline.config.kafka_security import KafkaSecurity
from floeline.config.keys import (
    CONNECTOR_CLASSES, DEFAULT_BOOTSTRAP, DEFAULT_SPARK_MASTER, DEFAULT_WAREHOUSE, IGNORED_KEYS,
    IGNORED_PREFIXES, KNOWN_KEYS, PASSTHROUGH_KEYS, PASSTHROUGH_PREFIXES, SPARK_KAFKA_OPTIONS, TYPED_KEYS,
    spark_option_problem,
)
from floeline.config.kinesis import KinesisSettings
from floeline.config.locations import S3Settings
from floeline.config.model import ConnectorConfig, KeyUse, MetadataFlags, MetricsSettings, Problem, TableSettings
from floeline.config.reader import read_config
from floeline.errors import ConfigError

# The entry points; the other names imported above are re-exported for the modules and
# tests that import them from `floeline.config`.
__all__ = ["ConnectorConfig", "KeyUse", "KinesisSettings", "MetadataFlags", "MetricsSettings", "Problem",
           "config_from_dict", "describe_ignored", "describe_keys", "load_config", "parse_properties",
           "read_config"]


def config_from_dict(settings: Mapping[str, str]) -> ConnectorConfig:
    """Validate `settings` and build the ConnectorConfig; raise one ConfigError with
    every problem found, so a user fixes a config in one round."""
    cfg, problems = read_config(settings)
    if problems:
        count = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid connector config ({count} problem{'s' * (count > 1)}):\n{lines}")
    return cfg


def describe_ignored(cfg: ConnectorConfig) -> str:
    """A one-line notice of the settings floeline accepted but does not use, or ""."""
    if not cfg.ignored_keys:
        return ""
    return ("ignored settings (Snowflake cloud or Kafka Connect runtime options floeline does not "
            f"use): {', '.join(cfg.ignored_keys)}")


def load_config(path: str | os.PathLike) -> ConnectorConfig:
    """Read a connector config file: Kafka Connect REST JSON (`.json`, or text starting
    with `{`) or Java properties. Errors name the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8").lstrip("\ufeff")
    except OSError as exc:
        raise ConfigError(f"cannot read connector config {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
            settings = settings_from_json(text)
        else:
            settings = parse_properties(text)
        return config_from_dict(settings)
    except ConfigError as exc:
        raise type(exc)(f"{p}: {exc}") from None
