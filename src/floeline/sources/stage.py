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

Every file has a row 0 (so an empty file is still seen, and a file that cannot be read
at all says why there); its records follow."""

from __future__ import annotations

import hashlib
from urllib.parse import unquote, urlparse

from floeline.records.file_formats import FileFormat, FileFormatError, read_records

RECORDS_SCHEMA = ("file string, size bigint, modified_ms bigint, md5 string, row bigint, "
                  "line bigint, value string, error string")
_BATCH_ROWS = 8192


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
        import pyarrow as pa

        columns: dict[str, list] = {k: [] for k in _ARROW_SCHEMA.names}
        for batch in batches:
            for entry in batch.to_pylist():
                data = entry["content"]
                name, modified = self.names.get(location_key(entry["path"]), (entry["path"], 0))
                md5 = hashlib.md5(data).hexdigest()
                try:
                    records = list(read_records(data, name, self.fmt))
                    file_error = None
                except FileFormatError as exc:
                    records, file_error = [], str(exc)
                # Row 0: the file itself; then its records, column by column.
                count = len(records) + 1
                rows, lines, values, errors = zip(*records) if records else ((), (), (), ())
                columns["file"] += [name] * count
                columns["size"] += [len(data)] * count
                columns["modified_ms"] += [modified] * count
                columns["md5"] += [md5] * count
                columns["row"] += [0, *rows]
                columns["line"] += [0, *lines]
                columns["value"] += [None, *values]
                columns["error"] += [file_error, *errors]
                if len(columns["file"]) >= _BATCH_ROWS:
                    yield pa.RecordBatch.from_pydict(columns, schema=_ARROW_SCHEMA)
                    columns = {k: [] for k in _ARROW_SCHEMA.names}
        if columns["file"]:
            yield pa.RecordBatch.from_pydict(columns, schema=_ARROW_SCHEMA)


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([("file", pa.string()), ("size", pa.int64()), ("modified_ms", pa.int64()),
                      ("md5", pa.string()), ("row", pa.int64()), ("line", pa.int64()),
                      ("value", pa.string()), ("error", pa.string())])


_ARROW_SCHEMA = _arrow_schema()


def read_staged(spark, files, fmt: FileFormat):
    """A DataFrame of the records of `files` (StagedFile, from warehouse/stages.py)."""
    if not files:
        return spark.createDataFrame([], RECORDS_SCHEMA)
    names = {location_key(f.location): (f.name, f.modified_ms) for f in files}
    raw = spark.read.format("binaryFile").load([f.location for f in files])
    # Files are packed into partitions by size; one task per few files keeps both cores
    # busy when a load is many small compressed files.
    partitions = min(len(files), max(2, spark.sparkContext.defaultParallelism * 2))
    if raw.rdd.getNumPartitions() < partitions:
        raw = raw.repartition(partitions)
    return raw.select("path", "content").mapInArrow(_FileSplitter(names, fmt), RECORDS_SCHEMA)
