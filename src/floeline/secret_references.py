"""References to secrets kept elsewhere, in Kafka Connect's config provider syntax:

    ${env:NAME}                  the environment variable NAME of the process using it
    ${file:/path/file:key}       `key` of a Java properties file (Kafka's FileConfigProvider)

A stage's CREDENTIALS may hold one instead of the value (AWS_SECRET_KEY='${env:
LANDING_SECRET}'): the definition then stores the reference, not the secret, and each
process resolves it when it reads the stage, so the secret lives where the operator
keeps it (a Kubernetes secret as an environment variable, a mounted file). Resolved
values are remembered for scrubbing (secrets.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from floeline import secrets
from floeline.config.files import parse_properties
from floeline.errors import ConfigError, SqlError

_REFERENCE = re.compile(r"^\$\{(env|file):(.+)\}$")


def is_reference(value: object) -> bool:
    return isinstance(value, str) and value.startswith("${") and value.endswith("}")


def check(value: str, what: str) -> None:
    """A SqlError when `value` looks like a reference but is not one floeline reads."""
    if is_reference(value) and _parse(value) is None:
        raise SqlError(f"{what}: {value!r} is not a reference floeline reads; use ${{env:NAME}} or "
                       f"${{file:/path/to/file.properties:key}}")


def _parse(value: str) -> tuple[str, str, str | None] | None:
    match = _REFERENCE.match(value)
    if match is None:
        return None
    provider, body = match.groups()
    if provider == "env":
        return (provider, body, None) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", body) else None
    path, _, key = body.rpartition(":")
    return (provider, path, key) if path and key else None


def resolve(value: str, what: str) -> str:
    """`value`, or the secret its reference names; `what` (stage X's AWS_SECRET_KEY)
    names it in errors. Errors name the variable or file, never a value."""
    if not is_reference(value):
        return value
    check(value, what)
    provider, where, key = _parse(value)
    if provider == "env":
        found = os.environ.get(where)
        if found is None:
            raise SqlError(f"{what} refers to the environment variable {where} (${{env:{where}}}), "
                           f"which this process does not have: set it where floeline runs")
    else:
        found = _properties(where, what).get(key)
        if found is None:
            raise SqlError(f"{what} refers to key {key} of {where}, which that file does not have")
    secrets.remember(found)
    return found


def _properties(path: str, what: str) -> dict[str, str]:
    """A Java properties file's keys and values, read as a connector config file is."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SqlError(f"{what} refers to the file {path}, which cannot be read "
                       f"({exc.strerror or exc})") from None
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise SqlError(f"{what} refers to the file {path}, which is not a properties file: {exc}") from None
