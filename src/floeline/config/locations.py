"""Where a warehouse (or a checkpoint) lives, as a config names it: an absolute local
path or `s3a://bucket/prefix` (s3:// is taken as s3a://), and the S3 settings used to
reach one (`floeline.warehouse.s3.*`, each falling back to its AWS environment
variable). Plain strings and settings: reading and writing there is
warehouse/storage.py's job."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from floeline.errors import ConfigError

S3_SCHEMES = ("s3a", "s3")
DEFAULT_REGION = "us-east-1"
# The settings of a connector config, and the environment variables used when a
# setting is not given (and by `floeline sql` / `floeline pipes`, which have no config).
SETTING_PREFIX = "floeline.warehouse.s3."
_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access.key.id": ("AWS_ACCESS_KEY_ID",),
    "secret.access.key": ("AWS_SECRET_ACCESS_KEY",),
    "session.token": ("AWS_SESSION_TOKEN",),
}
SETTING_KEYS = tuple(SETTING_PREFIX + k for k in _ENV)
SECRET_SETTINGS = frozenset({SETTING_PREFIX + "secret.access.key", SETTING_PREFIX + "session.token"})


@dataclass(frozen=True)
class S3Settings:
    """How floeline and Spark reach an S3 warehouse: an endpoint for S3-compatible
    stores (path-style access then), the region, and static keys (None: the default
    credential chain of boto3 and of s3a). Secrets stay out of repr and messages."""

    endpoint: str | None = None
    region: str = DEFAULT_REGION
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @staticmethod
    def from_settings(settings: dict[str, str] | None = None,
                      env: dict[str, str] | None = None) -> "S3Settings":
        """From `floeline.warehouse.s3.*` keys, each falling back to its standard AWS
        environment variable (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...)."""
        settings = settings or {}
        env = os.environ if env is None else env

        def value(name: str) -> str | None:
            given = settings.get(SETTING_PREFIX + name)
            if given:
                return given.strip()
            return next((env[v] for v in _ENV[name] if env.get(v)), None)

        key_id, secret = value("access.key.id"), value("secret.access.key")
        if bool(key_id) != bool(secret):
            missing = "secret.access.key" if key_id else "access.key.id"
            raise ConfigError(f"an S3 warehouse's static keys need both {SETTING_PREFIX}access.key.id "
                              f"and {SETTING_PREFIX}secret.access.key: set {SETTING_PREFIX}{missing} "
                              f"(or leave both out for the default AWS credential chain)")
        return S3Settings(endpoint=value("endpoint"), region=value("region") or DEFAULT_REGION,
                          access_key_id=key_id, secret_access_key=secret,
                          session_token=value("session.token"))

    def describe(self) -> str:
        """For messages: where, and which key id; never a secret."""
        creds = f"key id {self.access_key_id}" if self.access_key_id else "the default credential chain"
        return f"endpoint {self.endpoint or 'AWS'}, region {self.region}, {creds}"


# ---- locations ---------------------------------------------------------------------


def is_s3(location: str) -> bool:
    return urlparse(str(location)).scheme in S3_SCHEMES


def normalize(location: str | os.PathLike) -> str:
    """A location as the rest of floeline uses it: an absolute local path, or
    s3a://bucket/prefix (no trailing slash). Other schemes are a ConfigError."""
    text = str(location)
    parsed = urlparse(text)
    if parsed.scheme in S3_SCHEMES:
        if not parsed.netloc:
            raise ConfigError(f"warehouse location {text!r} has no bucket: use s3a://bucket/prefix")
        key = parsed.path.strip("/")
        return f"s3a://{parsed.netloc}" + (f"/{key}" if key else "")
    if parsed.scheme == "file":
        return str(Path(parsed.path).absolute())
    if "://" in text:
        raise ConfigError(f"warehouse location {text!r}: {parsed.scheme}:// is not supported "
                          f"(a local path or s3a://bucket/prefix)")
    return str(Path(text).expanduser().absolute())


def join(location: str, *parts: str) -> str:
    """`location` / part / part ... (parts are single names or relative paths)."""
    if is_s3(location):
        return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(location, *parts)


def split_s3(location: str) -> tuple[str, str]:
    """(bucket, key) of s3a://bucket/key."""
    parsed = urlparse(location)
    return parsed.netloc, parsed.path.lstrip("/")


def name_of(location: str) -> str:
    """The last part of a location."""
    return location.rstrip("/").rsplit("/", 1)[-1] if is_s3(location) else os.path.basename(location)
