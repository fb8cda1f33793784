"""Where the warehouse's own files live: a local directory or a prefix of an S3 bucket.

Spark reads and writes the Delta tables and its checkpoint through Hadoop (s3a:// for
S3); everything floeline reads or writes itself without Spark (pipe, stage and file
format definitions, Spark's offset log for the one-pass path, the Delta log for
`floeline status`, the tables' owner records) goes through this one seam, picked by
the location's scheme, so nothing else asks "is this S3?":

  LocalStorage  a directory (a path, or file://); what every local warehouse used before
  S3Storage     s3a://bucket/prefix (s3:// is taken as s3a://), through boto3 with the
                warehouse's endpoint and credentials (S3Settings)

Locations are plain strings: an absolute path, or `s3a://bucket/key`
(config/locations.py: their helpers and S3Settings). Both give the
same operations: read, write whole (a reader sees the old or the new text), delete,
list a folder's children, and compare-and-swap writes (`put_if`) for the owner records
(owners.py): on S3 with conditional writes (If-None-Match / If-Match on the ETag), on a
local disk under an flock."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

from floeline.config.locations import SETTING_PREFIX, S3Settings, is_s3, split_s3
from floeline.errors import ConfigError
from floeline.warehouse import s3a_buckets


# ---- the seam ----------------------------------------------------------------------


class Storage(Protocol):
    # Delta's log on this storage is safe with one writer per table only (S3: no
    # atomic put-if-absent in Delta's S3SingleDriverLogStore).
    single_writer: bool

    def read_bytes(self, location: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""

    def read_text(self, location: str) -> str | None:
        """The file's text (UTF-8), or None when there is no such file."""

    def write_text(self, location: str, text: str) -> None:
        """Write a whole file: a reader sees the old text or the new, never a part."""

    def delete(self, location: str) -> bool:
        """Remove a file; False when there was none."""

    def children(self, location: str) -> tuple[list[str], list[str]]:
        """(folders, files) directly in `location`, by name, sorted; ([], []) when none."""

    def is_dir(self, location: str) -> bool:
        """True when `location` holds anything."""

    def version(self, location: str) -> object | None:
        """A token that changes whenever the file is replaced; None when absent."""

    def put_if(self, location: str, text: str, expected: object | None) -> object | None:
        """Write `text` only if the file's version is still `expected` (None: only if
        there is no file); the new version, or None when someone else got there first."""

    def delete_if(self, location: str, expected: object) -> bool:
        """Delete the file only if its version is still `expected`."""

    def delete_tree(self, location: str) -> None:
        """Remove `location` and everything under it."""

    def prepare_spark(self, spark, location: str) -> None:
        """Let `spark` read and write under `location` (credentials, endpoint)."""


class LocalStorage:
    single_writer = False

    def read_bytes(self, location: str) -> bytes | None:
        try:
            return Path(location).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def read_text(self, location: str) -> str | None:
        data = self.read_bytes(location)
        return None if data is None else data.decode("utf-8")

    def write_text(self, location: str, text: str) -> None:
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def delete(self, location: str) -> bool:
        try:
            Path(location).unlink()
        except FileNotFoundError:
            return False
        return True

    def children(self, location: str) -> tuple[list[str], list[str]]:
        try:
            entries = list(os.scandir(location))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        folders = sorted(e.name for e in entries if e.is_dir())
        files = sorted(e.name for e in entries if e.is_file())
        return folders, files

    def is_dir(self, location: str) -> bool:
        return os.path.isdir(location)

    def version(self, location: str) -> object | None:
        try:
            st = os.stat(location)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @contextlib.contextmanager
    def _locked(self, location: str):
        """An exclusive flock on `<file>.lock` beside the file: compare-and-swap
        between processes of this machine (or of a file system with working locks)."""
        import fcntl

        Path(location).parent.mkdir(parents=True, exist_ok=True)
        with open(location + ".lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def put_if(self, location: str, text: str, expected: object | None) -> object | None:
        with self._locked(location):
            if self.version(location) != expected:
                return None
            self.write_text(location, text)
            return self.version(location)

    def delete_if(self, location: str, expected: object) -> bool:
        with self._locked(location):
            return self.version(location) == expected and self.delete(location)

    def delete_tree(self, location: str) -> None:
        import shutil

        shutil.rmtree(location, ignore_errors=True)

    def prepare_spark(self, spark, location: str) -> None:
        pass


class S3Storage:
    """s3a://bucket/key locations through boto3 (with floeline's AWS retry rule)."""

    single_writer = True

    def __init__(self, settings: S3Settings):
        self.settings = settings
        self._client = None

    @property
    def client(self):
        from floeline.sources import aws

        if self._client is None:
            s = self.settings
            self._client = aws.client_for("s3", region=s.region, access_key_id=s.access_key_id,
                                          secret_access_key=s.secret_access_key,
                                          session_token=s.session_token, endpoint=s.endpoint)
        return self._client

    def _call(self, what: str, location: str, fn, passthrough=frozenset(), **kwargs):
        from floeline.sources import aws

        try:
            return aws.call(f"S3 {what} on {location}", fn, endpoint=self.settings.endpoint,
                            passthrough=frozenset({"NoSuchKey", "404", "NotFound", "NoSuchBucket",
                                                   *passthrough}), **kwargs)
        except Exception as exc:
            if aws.error_code(exc) == "NoSuchBucket":
                bucket, _key = split_s3(location)
                raise ConfigError(f"bucket {bucket} of warehouse location {location} does not exist "
                                  f"({self.settings.describe()}); create it, or check "
                                  f"floeline.warehouse and {SETTING_PREFIX}endpoint") from None
            raise

    @staticmethod
    def _missing(exc: BaseException) -> bool:
        from floeline.sources import aws

        return aws.error_code(exc) in ("NoSuchKey", "404", "NotFound")

    @staticmethod
    def _lost_race(exc: BaseException) -> bool:
        from floeline.sources import aws

        return aws.error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict")

    def read_bytes(self, location: str) -> bytes | None:
        bucket, key = split_s3(location)
        try:
            body = self._call("GetObject", location, self.client.get_object, Bucket=bucket, Key=key)["Body"]
        except Exception as exc:
            if self._missing(exc):
                return None
            raise
        try:
            return body.read()
        finally:
            body.close()

    def read_text(self, location: str) -> str | None:
        data = self.read_bytes(location)
        return None if data is None else data.decode("utf-8")

    def write_text(self, location: str, text: str) -> None:
        bucket, key = split_s3(location)
        self._call("PutObject", location, self.client.put_object, Bucket=bucket, Key=key,
                   Body=text.encode("utf-8"))

    def delete(self, location: str) -> bool:
        if self.version(location) is None:
            return False
        bucket, key = split_s3(location)
        self._call("DeleteObject", location, self.client.delete_object, Bucket=bucket, Key=key)
        return True

    def _pages(self, location: str, **kwargs):
        bucket, key = split_s3(location)
        prefix = key.rstrip("/") + "/" if key else ""
        token = None
        while True:
            page = self._call("ListObjectsV2", location, self.client.list_objects_v2, Bucket=bucket,
                              Prefix=prefix, **kwargs, **({"ContinuationToken": token} if token else {}))
            yield prefix, page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def children(self, location: str) -> tuple[list[str], list[str]]:
        folders, files = set(), set()
        for prefix, page in self._pages(location, Delimiter="/"):
            folders.update(p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", []))
            files.update(o["Key"][len(prefix):] for o in page.get("Contents", []))
        files.discard("")  # a "folder" marker object
        return sorted(folders - {""}), sorted(files)

    def is_dir(self, location: str) -> bool:
        for _prefix, page in self._pages(location, MaxKeys=1):
            return bool(page.get("KeyCount") or page.get("Contents"))
        return False

    def version(self, location: str) -> object | None:
        bucket, key = split_s3(location)
        try:
            head = self._call("HeadObject", location, self.client.head_object, Bucket=bucket, Key=key)
        except Exception as exc:
            if self._missing(exc):
                return None
            raise
        return head["ETag"]

    def put_if(self, location: str, text: str, expected: object | None) -> object | None:
        bucket, key = split_s3(location)
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": str(expected)}
        try:
            done = self._call("PutObject", location, self.client.put_object,
                              passthrough=frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"}),
                              Bucket=bucket, Key=key, Body=text.encode("utf-8"), **condition)
        except Exception as exc:
            if self._lost_race(exc) or (expected is not None and self._missing(exc)):
                return None
            raise
        return done["ETag"]

    def delete_if(self, location: str, expected: object) -> bool:
        bucket, key = split_s3(location)
        try:
            self._call("DeleteObject", location, self.client.delete_object,
                       passthrough=frozenset({"PreconditionFailed", "412"}),
                       Bucket=bucket, Key=key, IfMatch=str(expected))
        except Exception as exc:
            if self._lost_race(exc) or self._missing(exc):
                return False
            raise
        return True

    def delete_tree(self, location: str) -> None:
        bucket, _key = split_s3(location)
        for _prefix, page in self._pages(location):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self._call("DeleteObjects", location, self.client.delete_objects, Bucket=bucket,
                           Delete={"Objects": keys, "Quiet": True})

    def hadoop_settings(self, bucket: str) -> dict[str, str]:
        """The s3a settings of `bucket` (fs.s3a.bucket.<bucket>.*)."""
        s = self.settings
        return s3a_bucket_settings(bucket, s.region, s.endpoint, s.access_key_id,
                                   s.secret_access_key, s.session_token)

    def prepare_spark(self, spark, location: str) -> None:
        bucket, _key = split_s3(location)
        s3a_buckets.claim(spark, bucket, self.hadoop_settings(bucket), f"the S3 warehouse (s3a://{bucket})")


def s3a_bucket_settings(bucket: str, region: str, endpoint: str | None, access_key_id: str | None,
                        secret_access_key: str | None, session_token: str | None) -> dict[str, str]:
    """Hadoop s3a settings for one bucket only (fs.s3a.bucket.<bucket>.<key>), so the
    warehouse and stages on other stores can be read by one Spark session. An endpoint
    means an S3-compatible store: path-style access, TLS as its URL says."""
    settings = {"endpoint.region": region}
    if endpoint:
        settings.update({"endpoint": endpoint, "path.style.access": "true",
                         "connection.ssl.enabled": str(endpoint.startswith("https")).lower()})
    if access_key_id:
        settings.update({"access.key": access_key_id, "secret.key": secret_access_key or ""})
        if session_token:
            settings.update({"session.token": session_token, "aws.credentials.provider":
                             "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"})
        else:
            settings["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return {f"fs.s3a.bucket.{bucket}.{k}": v for k, v in settings.items()}


_LOCAL = LocalStorage()


def storage_for(location: str, s3: S3Settings | None = None) -> Storage:
    """The storage of a location, by its scheme; S3 locations use `s3` (default: the
    AWS environment variables)."""
    if is_s3(location):
        return S3Storage(s3 if s3 is not None else S3Settings.from_settings())
    return _LOCAL
