"""One set of s3a settings per bucket and Spark session, claimed by its first user.

Hadoop's s3a takes a bucket's endpoint and credentials from per-bucket settings
(`fs.s3a.bucket.<bucket>.*`) and keeps one client per bucket and process, made on first
use. Two users of one bucket with different credentials (two S3 stages, or a stage and
an S3 warehouse, on the same bucket) would share whichever client came first: the
second silently reads with the first's keys, or changes them under it. So the first
user claims the bucket (its name and a SHA-256 of its settings are kept beside them in
the Hadoop configuration, never the secrets themselves) and a later user whose settings
differ is refused with both names and the fix. Loads small enough to be read on the
driver use boto3 with the stage's own credentials and claim nothing
(ingest/file_load.py)."""

from __future__ import annotations

import hashlib
import json

from floeline.errors import SqlError


def _marks(bucket: str) -> tuple[str, str]:
    return f"fs.s3a.bucket.{bucket}.floeline.user", f"fs.s3a.bucket.{bucket}.floeline.settings.sha256"


def fingerprint(settings: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(settings.items())).encode()).hexdigest()


def claim(spark, bucket: str, settings: dict[str, str], user: str) -> None:
    """Give `spark`'s s3a the bucket's `settings` for `user` (a stage's or the
    warehouse's name), unless another user already gave it different ones in this
    Spark session: then a SqlError naming both."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    user_key, print_key = _marks(bucket)
    wanted, current = fingerprint(settings), conf.get(print_key)
    if current is not None and current != wanted:
        holder = conf.get(user_key)
        same = " (its earlier definition)" if holder == user else ""
        raise SqlError(
            f"{user} reads bucket {bucket} with other credentials or another endpoint than "
            f"{holder}{same}, which this Spark session already reads that bucket with: Hadoop's "
            f"s3a keeps one client per bucket and process, so {user} would silently use the "
            f"other's keys. Give every stage on bucket {bucket} (and the warehouse, when it is "
            f"on that bucket) the same CREDENTIALS and ENDPOINT, or run this load in a process "
            f"of its own (another floeline sql or floeline pipes run)")
    for key, value in settings.items():
        conf.set(key, value)
    if current is None:
        conf.set(user_key, user)
        conf.set(print_key, wanted)
