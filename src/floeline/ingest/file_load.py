"""Loading staged files into a table: the one load behind COPY INTO, auto-ingest pipes
and the Kafka connector's SNOWPIPE method.

The rows of every file loaded and the files' load-history entries go into the table in
one Delta commit, so a file is in the table whole or not at all. Each file's figures
(rows parsed and loaded, errors seen, the first error) decide under ON_ERROR what is
written, and they are part of the commit, so they must be known before the write:

- the fast way, for a load whose files all split into records without an error (the
  common case): the figures come from each file's row 0 (sources/stage.py) without a
  shuffle, every file is LOADED, and the write job stops with a marked error the
  moment a record turns out not to be JSON or not to fit its column (nothing is
  committed; Parquet files the failed job wrote are left for VACUUM). One parse of
  the records, as a bare Spark job does;
- the careful way, when the split met errors or the fast write stopped: the records
  are parsed and shaped once and kept, each file's row errors counted, ON_ERROR
  applied, and what it keeps written."""

from __future__ import annotations

import time

from floeline.errors import SqlError, TableError
from floeline.records import shaping, values_to_columns
from floeline.records.content import quote_column
from floeline.records.file_formats import FileFormat
from floeline.sources.base import Committed
from floeline.sources.stage import RECORDS_SCHEMA, read_on_driver, read_with_spark
from floeline.warehouse import load_history, stage_store, stages
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.commits import commit
from floeline.warehouse.load_history import LOAD_FAILED, LOADED, PARTIALLY_LOADED, SKIPPED, FileLoad
from floeline.warehouse.pipes import Pipe
from floeline.records.columns import TableSchema

EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"  # of no bytes
_ROW_ERROR_MARK = "floeline-fast-load-row-error"  # the fast write's stop, told from other failures
_FIGURES = ("max(CASE WHEN row = 0 THEN size END) AS size", "max(CASE WHEN row = 0 THEN md5 END) AS md5",
            "max(CASE WHEN row = 0 THEN modified_ms END) AS modified_ms", "count_if(row > 0) AS parsed",
            "count_if(error IS NOT NULL) AS errors",
            "min_by(named_struct('row', row, 'line', line, 'error', error), "
            "CASE WHEN error IS NOT NULL THEN row END) AS first")
_HEAD = ("file", "size", "md5", "modified_ms", "records", "errors", "error")  # row 0's figures
_RECORD_COLUMNS = ("file", "size", "modified_ms", "md5", "row", "line", "error", "records", "errors",
                   "CASE WHEN row > 0 AND error IS NULL THEN try_parse_json(value) END AS v")


def load_files(spark, ref: TableRef, schema: TableSchema, stage: stages.Stage, files, fmt: FileFormat,
               pipe: Pipe | None, on_error: str, history: load_history.Loaded | None,
               pipe_name: str | None = None, positions: tuple[str, Committed] | None = None,
               on_commit=None, check_owned=None, what: str | None = None) -> list[FileLoad]:
    """Load `files` into the table in one commit; the FileLoad of each file processed
    (files whose content the table already holds are left out unless `history` is None).
    `pipe` None: the default pipe's key matching (MATCH_BY_COLUMN_NAME). `positions`:
    (connector, the table's positions after the load) for the commit's userMetadata
    (the SNOWPIPE method's channel positions), committed atomically with the rows and
    the load history. `on_commit(loads)`: called after the commit with every entry it
    recorded (a HistoryCache's `loaded`). `check_owned`: run right before the commit.
    `what`: how a failed commit names the load (warehouse/commits.py)."""
    import pyarrow.compute as pc
    from pyspark import StorageLevel

    if not files:
        return []
    load = _Load(spark, ref, schema, stage, pipe, on_error, history, pipe_name, on_commit,
                 positions or (None, None), check_owned, what or f"loading files into table {ref.full_name}")
    # Spark's file sources skip empty files: they are loaded here, with no rows.
    empty = [{"file": f.name, "size": 0, "md5": EMPTY_MD5, "modified_ms": f.modified_ms, "parsed": 0,
              "errors": 0, "first": None} for f in files if f.size == 0]
    nonempty = [f for f in files if f.size > 0]
    on_driver = read_on_driver(nonempty, fmt, stage_store.reader_for(stage))
    if on_driver is not None:  # small: row 0 is at hand, and the records are a local relation
        heads = on_driver.filter(pc.equal(on_driver["row"], 0)).select(list(_HEAD)).to_pylist()
        return load.run(spark.createDataFrame(on_driver, RECORDS_SCHEMA).selectExpr(*_RECORD_COLUMNS),
                        heads, empty)
    # Read by Spark: an S3 stage's bucket settings go to s3a (refused when another stage
    # on the bucket set others in this session); read on the driver above, boto3 uses
    # the stage's own credentials.
    stage_store.prepare_spark(spark, stage)
    # The files are read, split and parsed once; every job below starts from this (the
    # parsed value is kept: expressions over it, inlined by Spark's optimizer, would
    # parse each record again for every use). Kept deserialized, as DataFrame.cache()
    # does: the serialized level copied every cached batch once more.
    records = read_with_spark(spark, nonempty, fmt).selectExpr(*_RECORD_COLUMNS).persist(
        StorageLevel.MEMORY_AND_DISK_DESER)
    try:
        heads = [row.asDict() for row in records.where("row = 0").select(*_HEAD).collect()]
        return load.run(records, heads, empty)
    finally:
        records.unpersist()


class _Load:
    """One load's table, shaping and ON_ERROR, for both ways of loading."""

    def __init__(self, spark, ref, schema, stage, pipe, on_error, history, pipe_name, on_commit,
                 positions, check_owned, what: str):
        self.spark, self.ref, self.schema, self.stage, self.pipe = spark, ref, schema, stage, pipe
        self.on_error, self.history, self.pipe_name = on_error, history, pipe_name
        self.positions, self.check_owned, self.what = positions, check_owned, what
        self.on_commit = on_commit
        self.scan_time = int(time.time() * 1000)

    def run(self, records, heads: list[dict], empty: list[dict]) -> list[FileLoad]:
        """The fast way when the split found no error (row 0 of each file: `heads`),
        else, or when its write stops, the careful way."""
        if not any(head["error"] or head["errors"] for head in heads):
            loads = self.file_loads([{**head, "parsed": head["records"], "errors": 0, "first": None}
                                     for head in heads] + empty)
            if self.write(self.shaped(records), loads, stop_on_row_error=True):
                return [f for f in loads if f.status != SKIPPED]
        return self.carefully(records, empty)

    def shaped(self, records):
        """The records that split well, shaped into the table's columns
        (_c0, _c1, ...), with file, row, line, error (why the record cannot load)."""
        good = records.where("row > 0 AND error IS NULL").selectExpr(
            "*", "file AS channel", "CAST(row AS STRING) AS position",
            "CAST(NULL AS TIMESTAMP) AS timestamp", "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers",
            "named_struct('line', line, 'unparsed', v IS NULL) AS source", "CAST(NULL AS STRING) AS _error_class",
            "CAST(NULL AS BINARY) AS _raw_key", "CAST(NULL AS BINARY) AS _raw_value",
            "CAST(NULL AS VARIANT) AS _meta", "file AS _file", "row AS _row", "md5 AS _md5",
            "timestamp_millis(modified_ms) AS _file_modified", f"timestamp_millis({self.scan_time}) AS _scan_time")
        if self.pipe is None:
            merged = good.selectExpr("schema_of_variant_agg(v) AS s").first()["s"]
            # COPY's MATCH_BY_COLUMN_NAME ignores keys without a column; BINARY_FORMAT=HEX
            shaped = shaping.default_pipe_rows(self.schema, good, shaping.fields_of(merged) if merged else {},
                                               reject_unmatched=False, rules=values_to_columns.COPY)
        else:
            shaped = shaping.pipe_rows(self.schema, good, self.pipe)
        shaping_error = "_row_error" if "_row_error" in shaped.columns else "CAST(NULL AS STRING)"
        error = (f"CASE WHEN _src_source.unparsed THEN 'invalid JSON (or a value over the 16 MiB VARIANT limit)' "
                 f"ELSE {shaping_error} END")
        # (the default pipe leaves out columns no record has: Delta fills them, DEFAULTs too)
        return shaped.selectExpr("_src_channel AS file", "CAST(_src_position AS BIGINT) AS row",
                                 "_src_source.line AS line", f"{error} AS error",
                                 *[c for c in self._columns() if c in shaped.columns])

    def _columns(self) -> list[str]:
        return [f"_c{i}" for i in range(len(self.schema.columns))]

    def write(self, shaped, loads: list[FileLoad], stop_on_row_error: bool = False) -> bool:
        """Append the shaped rows of the files `loads` keeps, with their load history, in
        one commit. `stop_on_row_error`: the fast way's write, which commits nothing and
        returns False when a row has an error (True when written)."""
        if not loads:
            return True
        keep = [f.file for f in loads if f.loaded]
        out = shaped.where(shaped.file.isin(keep)) if keep else shaped.limit(0)
        if stop_on_row_error:
            out = out.where(f"CASE WHEN error IS NULL THEN true ELSE raise_error('{_ROW_ERROR_MARK}') END")
        else:
            out = out.where("error IS NULL")
        out = out.selectExpr(*[f"{c} AS {quote_column(column.name)}" for c, column in
                               zip(self._columns(), self.schema.columns) if c in shaped.columns])
        connector, after = self.positions
        try:
            commit(out, self.ref, connector, after, self.check_owned, loads=loads, what=self.what)
        except TableError as exc:
            if stop_on_row_error and _ROW_ERROR_MARK in str(exc.__cause__ or exc):
                return False
            raise
        if self.on_commit is not None:
            self.on_commit(loads)
        return True

    def carefully(self, records, empty: list[dict]) -> list[FileLoad]:
        """The careful way: each file's row errors counted before anything is written."""
        from pyspark import StorageLevel

        shaped = self.shaped(records).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        try:
            # Each file's own row (row 0: its identity, or why it could not be read) and
            # the records the split rejected, beside the shaped rows: the figures.
            checked = records.where("row = 0 OR error IS NOT NULL").selectExpr(
                "file", "row", "line", "error", "size", "md5", "modified_ms").unionByName(shaped.selectExpr(
                    "file", "row", "line", "error", "CAST(NULL AS BIGINT) AS size", "CAST(NULL AS STRING) AS md5",
                    "CAST(NULL AS BIGINT) AS modified_ms"))
            figures = checked.groupBy("file").agg(*[_expr(e) for e in _FIGURES]).collect()
            loads = self.file_loads(figures + empty)
            self.write(shaped, loads)
            return [f for f in loads if f.status != SKIPPED]
        finally:
            shaped.unpersist()

    def file_loads(self, figures) -> list[FileLoad]:
        """Each file's FileLoad under ON_ERROR (raises for ABORT_STATEMENT)."""
        stage, loads = self.stage, []
        for figure in sorted(figures, key=lambda r: r["file"]):
            file, size, md5 = figure["file"], figure["size"], figure["md5"]
            if self.history is not None and self.history.holds(stage.full_name, file, size, md5):
                # already loaded (same path and content), touched or re-uploaded since
                loads.append(FileLoad(stage=stage.full_name, file=file, size=size, md5=md5,
                                      modified_ms=figure["modified_ms"], status=SKIPPED, rows_parsed=0,
                                      rows_loaded=0, errors_seen=0, pipe=self.pipe_name))
                continue
            errors_seen, first = figure["errors"], figure["first"]
            first_error = first["error"] if errors_seen else None
            first_line = first["line"] if errors_seen and first["row"] else None
            file_failed = bool(errors_seen) and first["row"] == 0
            if errors_seen and self.on_error == "ABORT_STATEMENT":
                where = "" if file_failed else f", line {first_line} (record {first['row']})"
                raise SqlError(f"file {file} of stage {stage.full_name}{where}: {first_error} "
                               f"(nothing was loaded: ON_ERROR=ABORT_STATEMENT; fix the file, or load "
                               f"the rest with ON_ERROR=CONTINUE or SKIP_FILE)")
            if file_failed or (errors_seen and self.on_error == "SKIP_FILE"):
                status, loaded = LOAD_FAILED, 0
            else:
                loaded = figure["parsed"] - errors_seen
                status = LOADED if not errors_seen else PARTIALLY_LOADED if loaded else LOAD_FAILED
            loads.append(FileLoad(stage=stage.full_name, file=file, size=size, md5=md5,
                                  modified_ms=figure["modified_ms"], status=status,
                                  rows_parsed=figure["parsed"], rows_loaded=loaded, errors_seen=errors_seen,
                                  first_error=first_error, first_error_line=first_line, pipe=self.pipe_name))
        return loads


def _expr(text: str):
    from pyspark.sql import functions

    return functions.expr(text)
