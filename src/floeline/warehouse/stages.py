"""Stages and named file formats: where staged files live and how to read them,
stored in the warehouse like pipes (JSON files written whole, locally or on S3):

  <warehouse>/<DB>/<SCHEMA>/_stages/<STAGE>.json              CREATE STAGE
  <warehouse>/<DB>/<SCHEMA>/_file_formats/<FORMAT>.json       CREATE FILE FORMAT
  <warehouse>/<DB>/<SCHEMA>/_stage_files/<STAGE>/...          an internal stage's files

A stage is external (URL='file:///dir/' or 's3://bucket/prefix/', with CREDENTIALS and
an ENDPOINT for S3-compatible stores) or internal (no URL: its files live in the
warehouse). Its file format is inline options, a named format, or the default (CSV,
as in Snowflake). Secrets are kept for reading the store and never shown: `masked()`
is what SHOW/DESCRIBE print. They are not in the definition either: the values of
SECRET_KEYS go to the warehouse's secrets store (warehouse/secret_store.py, owner-only)
and the definition names the keys kept there (`"stored_secrets"`). A definition an
older floeline wrote with the secrets inline still loads; CREATE OR REPLACE STAGE
rewrites it in the new form."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from urllib.parse import quote

from floeline.errors import SqlError
from floeline.records.file_formats import FileFormat, FileFormatError
from floeline.secret_references import is_reference, resolve
from floeline.secrets import remember
from floeline.warehouse import secret_store
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.pipes import definition_files
from floeline.warehouse.stage_store import StagedFile, store_for  # noqa: F401 - StagedFile re-exported

STAGES_DIR, FORMATS_DIR = "_stages", "_file_formats"
SECRET_KEYS = ("AWS_SECRET_KEY", "AWS_TOKEN")
_FORMAT = 1


@dataclass(frozen=True)
class Stage:
    name: str
    database: str
    schema: str
    url: str | None = None  # None: an internal stage
    credentials: dict[str, str] = field(default_factory=dict)  # AWS_KEY_ID, AWS_SECRET_KEY
    endpoint: str | None = None
    file_format: dict[str, object] = field(default_factory=dict)  # options or FORMAT_NAME
    comment: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    @property
    def kind(self) -> str:
        return "INTERNAL" if self.url is None else "EXTERNAL"

    def masked(self) -> dict[str, str]:
        """The credentials as SHOW/DESCRIBE print them: secrets replaced."""
        return {k: ("****" if k.upper() in SECRET_KEYS and not is_reference(v) else v)
                for k, v in self.credentials.items()}

    def resolved_credentials(self) -> dict[str, str]:
        """The credentials to use: references (${env:NAME}, ${file:path:key}) read now."""
        return {k: resolve(v, f"stage {self.full_name} CREDENTIALS {k}") for k, v in self.credentials.items()}

    def secret_credentials(self) -> dict[str, str]:
        """The credentials that are secret (kept in the secrets store, not the definition);
        a reference (${env:NAME}, ${file:path:key}) is no secret and stays in the definition."""
        return {k: v for k, v in self.credentials.items() if k.upper() in SECRET_KEYS and not is_reference(v)}

    def to_json(self) -> str:
        """The definition, without the secret credentials' values (only their names)."""
        data = asdict(self)
        kept = self.secret_credentials()
        data["credentials"] = {k: v for k, v in self.credentials.items() if k not in kept}
        data["stored_secrets"] = sorted(kept)
        return json.dumps({**data, "format": _FORMAT}, ensure_ascii=False, indent=1)

    @staticmethod
    def from_json(text: str, stored_secrets: dict[str, str] | None = None) -> "Stage":
        """The stage of a definition; `stored_secrets`: the values of the keys it names
        under "stored_secrets" (from the secrets store)."""
        data = json.loads(text)
        data.pop("format", None)
        wanted = data.pop("stored_secrets", [])
        missing = [k for k in wanted if k not in (stored_secrets or {})]
        if missing:
            raise KeyError(f"its secrets ({', '.join(missing)}) are missing from the warehouse's "
                           f"secrets store")
        data["credentials"] = {**data.get("credentials", {}), **{k: stored_secrets[k] for k in wanted}}
        return Stage(**data)


def _definition(warehouse: Warehouse, database: str, schema: str, folder: str, name: str) -> str:
    return warehouse.schema_path(database, schema, folder, quote(name, safe="") + ".json")


def save_stage(warehouse: Warehouse, stage: Stage) -> None:
    """Store the definition; its secret credentials go to the secrets store first (a
    replaced stage without them has its old ones removed after)."""
    kept = stage.secret_credentials()
    if kept:
        secret_store.save(warehouse, STAGES_DIR, stage.database, stage.schema, stage.name, kept)
    warehouse.storage.write_text(_definition(warehouse, stage.database, stage.schema, STAGES_DIR,
                                             stage.name), stage.to_json())
    if not kept:
        secret_store.delete(warehouse, STAGES_DIR, stage.database, stage.schema, stage.name)


def load_stage(warehouse: Warehouse, database: str, schema: str, name: str) -> Stage | None:
    return _stage_at(warehouse, _definition(warehouse, database, schema, STAGES_DIR, name))


def _stage_at(warehouse: Warehouse, location: str) -> Stage | None:
    text = warehouse.storage.read_text(location)
    if text is None:
        return None
    try:
        data = json.loads(text)
        kept = None
        if data.get("stored_secrets"):
            kept = secret_store.load(warehouse, STAGES_DIR, data["database"], data["schema"], data["name"])
            if kept is None:
                raise SqlError(
                    f"stage {data['database']}.{data['schema']}.{data['name']}: its secret credentials "
                    f"({', '.join(data['stored_secrets'])}) are not in the warehouse's secrets store "
                    f"({secret_store.location(warehouse, STAGES_DIR, data['database'], data['schema'], data['name'])}"
                    f"; a definition copied without its {secret_store.SECRETS_DIR} folder?): recreate it "
                    f"with CREATE OR REPLACE STAGE ... CREDENTIALS=(...)")
        else:  # an older definition may hold its secrets inline: scrub them from messages all the same
            remember(*(v for k, v in data.get("credentials", {}).items() if k.upper() in SECRET_KEYS))
        return Stage.from_json(text, kept)
    except (ValueError, KeyError, TypeError) as exc:
        raise SqlError(f"stage definition {location} is unreadable ({exc}); recreate it with "
                       f"CREATE OR REPLACE STAGE") from None


def delete_stage(warehouse: Warehouse, database: str, schema: str, name: str) -> bool:
    secret_store.delete(warehouse, STAGES_DIR, database, schema, name)
    return warehouse.storage.delete(_definition(warehouse, database, schema, STAGES_DIR, name))


def list_stages(warehouse: Warehouse) -> list[Stage]:
    found = []
    for _db, _schema, location in definition_files(warehouse, STAGES_DIR):
        stage = _stage_at(warehouse, location)
        if stage is not None:
            found.append(stage)
    return sorted(found, key=lambda s: s.full_name)


def save_file_format(warehouse: Warehouse, database: str, schema: str, name: str,
                     options: dict[str, object]) -> None:
    warehouse.storage.write_text(_definition(warehouse, database, schema, FORMATS_DIR, name),
                                 json.dumps({"name": name, "options": options, "format": _FORMAT}, indent=1))


def load_file_format(warehouse: Warehouse, database: str, schema: str, name: str) -> dict | None:
    text = warehouse.storage.read_text(_definition(warehouse, database, schema, FORMATS_DIR, name))
    return None if text is None else json.loads(text)["options"]


def delete_file_format(warehouse: Warehouse, database: str, schema: str, name: str) -> bool:
    return warehouse.storage.delete(_definition(warehouse, database, schema, FORMATS_DIR, name))


def list_file_formats(warehouse: Warehouse) -> list[tuple[str, str, str, dict]]:
    """(database, schema, name, options) of every named file format."""
    found = []
    for database, schema, location in definition_files(warehouse, FORMATS_DIR):
        text = warehouse.storage.read_text(location)
        if text is not None:
            data = json.loads(text)
            found.append((database, schema, data["name"], data["options"]))
    return found


def resolve_format(warehouse: Warehouse, stage: Stage | None, options: dict[str, object] | None,
                   database: str, schema: str) -> FileFormat:
    """The file format a load uses: the statement's own FILE_FORMAT (inline options or
    FORMAT_NAME) if it has one, else the stage's, else the default (CSV). A FORMAT_NAME
    is looked up in the statement's schema unless qualified."""
    chosen = options or (stage.file_format if stage is not None else None) or {}
    merged = {k.upper(): v for k, v in chosen.items()}
    name = merged.pop("FORMAT_NAME", None)
    if name is not None:
        parts = [p.upper() for p in str(name).split(".")]
        db, sch = ([database, schema] + parts[:-1])[-2:] if len(parts) < 3 else parts[:2]
        named = load_file_format(warehouse, db, sch, parts[-1])
        if named is None:
            raise SqlError(f"file format {name} does not exist (CREATE FILE FORMAT {name} TYPE=...)")
        merged = {**named, **merged}
    try:
        return FileFormat().with_options(merged)
    except FileFormatError as exc:
        raise SqlError(str(exc)) from None


# ---- the files of a stage --------------------------------------------------------------


def list_files(warehouse: Warehouse, stage: Stage, path: str = "") -> list[StagedFile]:
    """The stage's files under `path` (a prefix relative to the stage), sorted by name;
    hidden files (starting with `.` or `_`) are left out. See stage_store.py."""
    return store_for(warehouse, stage).list(path)


def select_files(files: list[StagedFile], prefix: str, names: list[str] | None,
                 pattern: str | None) -> list[StagedFile]:
    """FILES=(...) (names relative to the `prefix` the statement gives after @stage) and
    PATTERN='regex' (matched against the whole path relative to the stage, as Snowflake
    does)."""
    if names is not None:
        base = prefix.strip("/")
        wanted = {f"{base}/{n.lstrip('/')}" if base else n.lstrip("/") for n in names}
        files = [f for f in files if f.name in wanted]
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise SqlError(f"PATTERN {pattern!r} is not a valid regular expression ({exc})") from None
        files = [f for f in files if regex.fullmatch(f.name)]
    return files
