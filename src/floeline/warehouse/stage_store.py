"""Where a stage's files live, and how to list them and let Spark read them: a local
directory (file:// URLs and internal stages) or a prefix of an S3 bucket (s3:// URLs,
any S3-compatible store with ENDPOINT), read by Spark through Hadoop's s3a.

`store_for(warehouse, stage)` picks the implementation from the URL's scheme, as
pyiceberg picks a FileIO. Both give the same StagedFile: its name relative to the
stage (what FILES=, PATTERN= and the load history use), the location Spark reads, its
size and its last modification."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, unquote, urlparse

from floeline.errors import SqlError
from floeline.warehouse import s3a_buckets
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.stage_paths import inside_stage
from floeline.warehouse.storage import s3a_bucket_settings

STAGE_FILES_DIR = "_stage_files"
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class StagedFile:
    """A file in a stage: its path relative to the stage, where Spark reads it, its
    size and last modification (epoch ms)."""

    name: str
    location: str
    size: int
    modified_ms: int


def hidden(name: str) -> bool:
    """Files and folders starting with `.` or `_` (temporary and marker files) are not
    staged files, as Spark and Hadoop treat them."""
    return any(part.startswith((".", "_")) for part in name.split("/"))


class StageStore(Protocol):
    def list(self, path: str = "") -> list[StagedFile]:
        """The stage's files whose name starts with `path`, sorted by name."""

    def file(self, name: str) -> StagedFile | None:
        """One file by its name in the stage, or None when it is not there (now)."""

    def prepare_spark(self, spark) -> None:
        """Make the store's locations readable by `spark` (credentials, endpoint)."""


class LocalStore:
    """A directory: a file:// stage's URL, or an internal stage's folder in the warehouse.
    A symbolic link in it is followed only while its target stays inside the folder: a
    cloud stage has no links, and one pointing out of the stage (at /etc/passwd, at
    another stage) is an error naming it, never read."""

    def __init__(self, root: Path, stage: str = ""):
        self.root, self.stage = root, stage or root.as_uri()

    def list(self, path: str = "") -> list[StagedFile]:
        prefix = inside_stage(path, self.stage).lstrip("/")
        found = []
        if not self.root.is_dir():
            return found
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not hidden(d))
            for filename in filenames:
                name = (Path(dirpath) / filename).relative_to(self.root).as_posix()
                if name.startswith(prefix) and not hidden(filename):
                    staged = self.file(name)
                    if staged is not None:  # None: removed while listing
                        found.append(staged)
        return sorted(found, key=lambda f: f.name)

    def file(self, name: str) -> StagedFile | None:
        full = self.root / inside_stage(name, self.stage, "file", as_written=False)
        try:
            st = full.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        self._check_link(name, full)
        return StagedFile(name, full.as_uri(), st.st_size, st.st_mtime_ns // 1_000_000)

    def _check_link(self, name: str, full: Path) -> None:
        """Refuse a file reached through a symbolic link whose target leaves the stage."""
        real, root = full.resolve(), self.root.resolve()
        if not real.is_relative_to(root):
            raise SqlError(f"stage {self.stage}: {name} is a symbolic link to {real}, outside the "
                           f"stage's folder {root}; floeline does not follow links out of a stage "
                           f"(a cloud stage has none): copy the file into the stage instead")

    def prepare_spark(self, spark) -> None:
        pass


class S3Store:
    """A prefix of an S3 bucket: listed with boto3, read by Spark as s3a://bucket/key.
    The stage's credentials (or the default chain) and ENDPOINT go to s3a as settings
    of that bucket only (fs.s3a.bucket.<bucket>.*), so stages on different stores can
    be read by one Spark session; two on one bucket need the same ones (s3a_buckets.py).
    Only keys under the prefix are listed, and a key with a `.` or `..` segment (which
    s3a would normalize to another key) is left out, as hidden files are."""

    def __init__(self, url: str, credentials: dict[str, str], endpoint: str | None, stage: str = ""):
        self.stage = stage or url
        parsed = urlparse(url)
        if not parsed.netloc:
            raise SqlError(f"stage URL {url!r} has no bucket (s3://bucket/prefix/)")
        self.bucket, self.prefix = parsed.netloc, unquote(parsed.path).lstrip("/")
        self.credentials = {k.upper(): v for k, v in credentials.items()}
        self.endpoint = endpoint
        self.region = region()
        self._client = None

    @property
    def client(self):
        from floeline.sources import aws

        if self._client is None:
            self._client = aws.client_for(
                "s3", region=self.region, access_key_id=self.credentials.get("AWS_KEY_ID"),
                secret_access_key=self.credentials.get("AWS_SECRET_KEY"),
                session_token=self.credentials.get("AWS_TOKEN"), endpoint=self.endpoint)
        return self._client

    def _call(self, what: str, fn, **kwargs):
        from floeline.sources import aws

        try:
            return aws.call(f"S3 {what} on s3://{self.bucket}/{self.prefix}", fn, endpoint=self.endpoint,
                            passthrough=frozenset({"NoSuchKey", "404", "NotFound"}), **kwargs)
        except Exception as exc:
            if aws.error_code(exc) == "NoSuchBucket" or "NoSuchBucket" in str(exc):
                raise SqlError(f"bucket {self.bucket} does not exist at "
                               f"{self.endpoint or 'AWS'}; check the stage's URL and ENDPOINT") from None
            raise

    def _staged(self, key: str, size: int, modified) -> StagedFile:
        return StagedFile(key[len(self.prefix):], f"s3a://{self.bucket}/{key}", size,
                          int(modified.timestamp() * 1000))

    def list(self, path: str = "") -> list[StagedFile]:
        found, token = [], None
        while True:
            page = self._call("ListObjectsV2", self.client.list_objects_v2, Bucket=self.bucket,
                              Prefix=self.prefix + inside_stage(path, self.stage).lstrip("/"),
                              **({"ContinuationToken": token} if token else {}))
            for item in page.get("Contents", []):
                name = item["Key"][len(self.prefix):]
                if name and not name.endswith("/") and not hidden(name):
                    found.append(self._staged(item["Key"], item["Size"], item["LastModified"]))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(found, key=lambda f: f.name)

    def file(self, name: str) -> StagedFile | None:
        from floeline.sources import aws

        key = self.prefix + inside_stage(name, self.stage, "file", as_written=False)
        try:
            head = self._call("HeadObject", self.client.head_object, Bucket=self.bucket, Key=key)
        except Exception as exc:
            if aws.error_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return self._staged(key, head["ContentLength"], head["LastModified"])

    def read(self, f: StagedFile) -> bytes:
        """The bytes of a listed file (s3a://bucket/key)."""
        from floeline.sources import aws

        key = unquote(urlparse(f.location).path).lstrip("/")
        try:
            body = self._call("GetObject", self.client.get_object, Bucket=self.bucket, Key=key)["Body"]
        except Exception as exc:
            if aws.error_code(exc) in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f.location) from None
            raise
        try:
            return body.read()
        finally:
            body.close()

    def hadoop_settings(self) -> dict[str, str]:
        """The s3a settings of this bucket (fs.s3a.bucket.<bucket>.<key>)."""
        return s3a_bucket_settings(self.bucket, self.region, self.endpoint,
                                   self.credentials.get("AWS_KEY_ID"),
                                   self.credentials.get("AWS_SECRET_KEY"),
                                   self.credentials.get("AWS_TOKEN"))

    def prepare_spark(self, spark) -> None:
        """The bucket's s3a settings, claimed for this stage (s3a_buckets.py: another
        stage with other credentials on the same bucket is refused, not shared)."""
        s3a_buckets.claim(spark, self.bucket, self.hadoop_settings(), f"stage {self.stage}")


def store_for(warehouse: Warehouse, stage) -> StageStore:
    """The store of a stage (warehouse/stages.py's Stage), by its URL's scheme."""
    if stage.url is None:
        return LocalStore(warehouse.local_schema_dir(stage.database, stage.schema, STAGE_FILES_DIR)
                          / quote(stage.name, safe=""), stage.full_name)
    parsed = urlparse(stage.url)
    if parsed.scheme == "file":
        return LocalStore(Path(unquote(parsed.path)), stage.full_name)
    if is_s3(stage):
        return S3Store(stage.url, stage.resolved_credentials(), stage.endpoint, stage.full_name)
    raise SqlError(f"stage {stage.full_name}: {parsed.scheme}:// stages are not supported "
                   f"(file://, s3:// and internal stages are)")


def is_s3(stage) -> bool:
    return urlparse(stage.url or "").scheme in ("s3", "s3a")


def region() -> str:
    """The AWS region of S3 stages and their queues: AWS_REGION, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def reader_for(stage):
    """A function reading a listed file of the stage (StagedFile -> bytes) on the
    driver: small loads read their files there, without a Spark job."""
    if is_s3(stage):
        return S3Store(stage.url, stage.resolved_credentials(), stage.endpoint, stage.full_name).read
    return lambda f: Path(unquote(urlparse(f.location).path)).read_bytes()


def prepare_spark(spark, stage) -> None:
    """Let `spark` read the stage's locations (nothing to do for local stages)."""
    if is_s3(stage):
        S3Store(stage.url, stage.resolved_credentials(), stage.endpoint, stage.full_name).prepare_spark(spark)
