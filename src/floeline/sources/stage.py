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
    """A file location as Spark's binaryFile and a StagedFile write it (file:/x, file:///x)
    reduced to one form."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return "file://" + unquote(parsed.path)
    return location


class _FileSplitter:
    """The mapInArrow function: binaryFile rows -> record rows (see the module doc)."""

    def __init__(self, names: dict[str, tuple[str, int]], fmt: FileFormat):
        self.names = names  # location key -> (name in the stage, modified_ms as listed)
        self.fmt = fmt

    def __call__(self, batches):
        import pyarrow as pa

        columns = {k: [] for k in ("file", "size", "modified_ms", "md5", "row", "line", "value", "error")}

        def flush():
            batch = pa.RecordBatch.from_pydict(columns, schema=_ARROW_SCHEMA)
            for values in columns.values():
                values.clear()
            return batch

        def add(file, size, modified, md5, row, line, value, error):
            for key, item in zip(columns, (file, size, modified, md5, row, line, value, error)):
                columns[key].append(item)

        for batch in batches:
            for entry in batch.to_pylist():
                data = entry["content"]
                name, modified = self.names.get(location_key(entry["path"]), (entry["path"], 0))
                md5 = hashlib.md5(data).hexdigest()
                size = len(data)
                try:
                    records = list(read_records(data, name, self.fmt))
                except FileFormatError as exc:
                    add(name, size, modified, md5, 0, 0, None, str(exc))
                    continue
                add(name, size, modified, md5, 0, 0, None, None)
                for record in records:
                    add(name, size, modified, md5, record.row, record.line, record.value, record.error)
                    if len(columns["file"]) >= _BATCH_ROWS:
                        yield flush()
                if len(columns["file"]) >= _BATCH_ROWS:
                    yield flush()
        if columns["file"]:
            yield flush()


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
