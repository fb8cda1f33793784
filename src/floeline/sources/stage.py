"""Staged files read by Spark: one row per record of each file, in the layout COPY
INTO and pipes work on.

Spark's binaryFile source reads each file whole (local or through Hadoop's file
systems); a Python function in the workers (mapInArrow) computes the file's MD5 (its
content identity for the load history) and splits it into records by its file format
(records/file_formats.py), so concatenated JSON, line numbers and per-file errors are
exact. Columns:

  file         string   the path relative to the stage
  size         bigint   bytes
  modified_ms  bigint   last modification, epoch ms
  md5          string   of the file's bytes
  row          bigint   METADATA$FILE_ROW_NUMBER (from 1); 0 on the file's own row
  line         bigint   the line the record starts on
  value        string   the JSON text of $1 (NULL on a bad record)
  error        string   why the record (row >= 1) or the whole file (row 0) is bad
  records      bigint   on row 0: how many records the file has (NULL on the others)
  errors       bigint   on row 0: how many of them are bad (error set)

Every file has a row 0 (so an empty file is still seen, a file that cannot be read at
all says why there, and a load's per-file figures need only these rows when nothing
is bad); its records follow."""

from __future__ import annotations

import hashlib
from urllib.parse import unquote, urlparse

from floeline.errors import FloelineError
from floeline.records.file_formats import FileFormat, FileFormatError, record_columns

RECORDS_SCHEMA = ("file string, size bigint, modified_ms bigint, md5 string, row bigint, "
                  "line bigint, value string, error string, records bigint, errors bigint")
_BATCH_ROWS = 65536
DRIVER_READ_BYTES = 1 << 20  # loads up to this size are read on the driver (read_staged)


def location_key(location: str) -> str:
    """A file location as Spark's binaryFile and a StagedFile write it (file:/x,
    file:///x, s3a://bucket/a%20b) reduced to one form."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return "file://" + unquote(parsed.path)
    return f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}"


class _FileSplitter:
    """The mapInArrow function: binaryFile rows -> record rows (see the module doc)."""

    def __init__(self, names: dict[str, tuple[str, int]], fmt: FileFormat):
        self.names = names  # location key -> (name in the stage, modified_ms as listed)
        self.fmt = fmt

    def __call__(self, batches):
        for batch in batches:
            for entry in batch.to_pylist():
                name, modified = self.names.get(location_key(entry["path"]), (entry["path"], 0))
                yield from file_rows(name, modified, entry["content"], self.fmt).to_batches(
                    max_chunksize=_BATCH_ROWS)


def file_rows(name: str, modified_ms: int, data: bytes, fmt: FileFormat):
    """One file's rows as an Arrow table: row 0 (the file itself), then its records."""
    import pyarrow as pa

    try:
        records, file_error = record_columns(data, name, fmt), None
    except FileFormatError as exc:
        records, file_error = None, str(exc)
    n = len(records.row) if records else 0
    errors = n - records.error.null_count if records else 0

    def column(first, type_, rest):  # row 0's value, then the records'
        return pa.concat_arrays([pa.array([first], type_), rest if records else pa.nulls(0, type_)])

    int64, string = pa.int64(), pa.string()
    nothing = pa.nulls(n, int64)
    return pa.Table.from_arrays([
        pa.repeat(name, n + 1).cast(string), pa.repeat(len(data), n + 1).cast(int64),
        pa.repeat(modified_ms, n + 1).cast(int64), pa.repeat(hashlib.md5(data).hexdigest(), n + 1).cast(string),
        column(0, int64, records and records.row), column(0, int64, records and records.line),
        column(None, string, records and records.value), column(file_error, string, records and records.error),
        column(n, int64, nothing), column(errors, int64, nothing)], schema=_ARROW_SCHEMA)


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([("file", pa.string()), ("size", pa.int64()), ("modified_ms", pa.int64()),
                      ("md5", pa.string()), ("row", pa.int64()), ("line", pa.int64()),
                      ("value", pa.string()), ("error", pa.string()), ("records", pa.int64()),
                      ("errors", pa.int64())])


_ARROW_SCHEMA = _arrow_schema()


def read_staged(spark, files, fmt: FileFormat, read=None):
    """A DataFrame of the records of `files` (StagedFile, from warehouse/stages.py).
    `read` (StagedFile -> bytes): when given and the files are small, they are read and
    split on the driver (read_on_driver); else Spark reads them."""
    table = read_on_driver(files, fmt, read)
    if table is not None:
        return spark.createDataFrame(table, RECORDS_SCHEMA)
    return read_with_spark(spark, files, fmt)


def read_on_driver(files, fmt: FileFormat, read):
    """The rows of `files` as one Arrow table, read with `read` (StagedFile -> bytes) and
    split on the driver: no Spark job and no s3a client, so a pipe's one new file loads
    sooner. None when there is no `read` or the files are over DRIVER_READ_BYTES."""
    import pyarrow as pa

    if not files or read is None or sum(f.size for f in files) > DRIVER_READ_BYTES:
        return None
    return pa.concat_tables([file_rows(f.name, f.modified_ms, _read_listed(read, f), fmt) for f in files])


def read_with_spark(spark, files, fmt: FileFormat):
    """The records of `files`, read and split by Spark's workers."""
    if not files:
        return spark.createDataFrame([], RECORDS_SCHEMA)
    names = {location_key(f.location): (f.name, f.modified_ms) for f in files}
    raw = spark.read.format("binaryFile").load([f.location for f in files])
    # Files are packed into partitions by size; one task per few files keeps both cores
    # busy when a load is many small compressed files.
    partitions = min(len(files), max(2, spark.sparkContext.defaultParallelism * 2))
    if partitions > 1 and raw.rdd.getNumPartitions() < partitions:
        raw = raw.repartition(partitions)
    return raw.select("path", "content").mapInArrow(_FileSplitter(names, fmt), RECORDS_SCHEMA)


def _read_listed(read, f) -> bytes:
    try:
        return read(f)
    except FileNotFoundError:
        raise FloelineError(f"{f.name} was removed from its stage while it was being loaded; "
                            f"load again") from None
