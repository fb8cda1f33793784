"""Secrets masked on the way out of the REST API, and kept when a masked value comes
back in.

The herder stores a connector's config as the user sent it, secrets included (the
connector needs them). Every endpoint that shows a config (GET config, GET connector,
?expand=info, tasks, validate) passes it through `mask_config` first: the value of a
secret-named key (floeline.secrets.is_secret_key: passwords, keys, tokens,
sasl.jaas.config, ...) becomes MASK, Kafka Connect's own rendering of a password
("[hidden]"), unless it is a `${env:...}`/`${file:...}` reference, which names where
the secret lives and not the secret, and is shown as written. A tool that GETs a
config, edits one key and PUTs it all back sends MASK for the secrets it never saw:
`unmask_config` puts the stored values back, so the round trip keeps them."""

from __future__ import annotations

from collections.abc import Mapping

from floeline.secret_references import is_reference
from floeline.secrets import is_secret_key

MASK = "[hidden]"


def mask_value(key: str, value: str | None) -> str | None:
    """`value` as the REST API shows it under `key`."""
    if value is None or not is_secret_key(key) or is_reference(value) or value == "":
        return value
    return MASK


def mask_config(config: Mapping[str, str | None]) -> dict[str, str | None]:
    """A copy of `config` with every secret value masked."""
    return {key: mask_value(key, value) for key, value in config.items()}


def unmask_config(sent: Mapping[str, str | None], stored: Mapping[str, str] | None) -> dict[str, str | None]:
    """`sent` with every masked secret replaced by the stored value of its key. A masked
    value for a key with nothing stored stays MASK (the config check then refuses it or
    the connector uses it literally, as Connect would); a new value replaces the secret."""
    stored = stored or {}
    return {key: stored[key] if value == MASK and is_secret_key(key) and key in stored else value
            for key, value in sent.items()}


def mask_info(info: Mapping) -> dict:
    """A ConnectorInfo ({"name", "config", "tasks", "type"}) with its config masked."""
    return {**info, "config": mask_config(info.get("config") or {})}


def mask_tasks(tasks: list[Mapping]) -> list[dict]:
    """GET .../tasks: each task's config masked."""
    return [{**task, "config": mask_config(task.get("config") or {})} for task in tasks]
