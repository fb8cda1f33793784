"""The warehouse's secrets store: secret values a definition needs (an S3 stage's
AWS_SECRET_KEY and AWS_TOKEN) kept apart from the definitions, so that no stage or
pipe definition holds a secret and the definitions can be read, copied and backed up
without leaking one.

    <warehouse>/_secrets/<DB>/<SCHEMA>/<kind>/<NAME>.json     {"AWS_SECRET_KEY": "..."}

On a local warehouse the `_secrets` folder is owner-only (0700) and each file is
written whole with mode 0600; on an S3 warehouse the objects live under the
`<prefix>/_secrets/` prefix, which a bucket policy can restrict to the writers. The
definition keeps the names of its secret keys only (warehouse/stages.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from floeline import secrets
from floeline.warehouse.catalog import Warehouse, folder_name

SECRETS_DIR = "_secrets"
DIR_MODE, FILE_MODE = 0o700, 0o600


def location(warehouse: Warehouse, kind: str, database: str, schema: str, name: str) -> str:
    """Where the secrets of one definition (kind: "stages") live."""
    return warehouse.path(SECRETS_DIR, folder_name(database), folder_name(schema), kind,
                          quote(name, safe="") + ".json")


def save(warehouse: Warehouse, kind: str, database: str, schema: str, name: str,
         values: dict[str, str]) -> None:
    """Keep `values` (key -> secret) for the definition, owner-only."""
    where = location(warehouse, kind, database, schema, name)
    if warehouse.is_local:
        _owner_only_folders(Path(warehouse.location), Path(where).parent)
    warehouse.storage.write_text(where, json.dumps(values))
    if warehouse.is_local:
        os.chmod(where, FILE_MODE)


def load(warehouse: Warehouse, kind: str, database: str, schema: str, name: str) -> dict[str, str] | None:
    """The definition's secrets (remembered for scrubbing), or None when none are kept."""
    text = warehouse.storage.read_text(location(warehouse, kind, database, schema, name))
    if text is None:
        return None
    values = json.loads(text)
    secrets.remember(*values.values())
    return values


def delete(warehouse: Warehouse, kind: str, database: str, schema: str, name: str) -> None:
    warehouse.storage.delete(location(warehouse, kind, database, schema, name))


def _owner_only_folders(root: Path, folder: Path) -> None:
    """Create `folder` and the folders between the warehouse root and it with mode 0700
    (the `_secrets` folder first, so nothing under it is ever readable by others)."""
    top = root / SECRETS_DIR
    for path in [top, *reversed([p for p in folder.parents if p.is_relative_to(top) and p != top]), folder]:
        path.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(path, DIR_MODE)
