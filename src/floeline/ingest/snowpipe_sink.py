"""The SNOWPIPE ingestion method (snowflake.ingestion.method=SNOWPIPE, the 2.x/3.x
connectors' file-based method): records go through files in an internal stage, loaded
by the table's pipe. Used by the pipeline instead of the table sink.

Per table and micro-batch:
  1. the rows that land (landing.py: replays, filtered records,
     ignored tombstones and bad records taken out; bad records to the DLQ / error table);
  2. each channel's (topic partition's) rows become one gzip newline-delimited JSON
     file `{"meta": RECORD_METADATA, "content": <value>}`, in offset order, written by
     Spark and named `<connector>/<table>/<partition>/<start>_<end>_<timeMs>.json.gz`
     in the stage SNOWFLAKE_KAFKA_CONNECTOR_<connector>_STAGE_<table>
     (snowpipe_files.py);
  3. the table's pipe (COPY INTO t (RECORD_METADATA, RECORD_CONTENT) FROM (SELECT
     $1:meta, $1:content FROM @stage), ON_ERROR=SKIP_FILE as Snowpipe) loads them with
     COPY's load (ingest/file_load.py): the rows, the files' load history and the channels' new
     positions in ONE Delta commit, so resuming (table_state.py) works as for streaming;
  4. loaded files are removed; a file that failed (LOAD_FAILED) is moved to the table
     stage `<warehouse>/<DB>/<SCHEMA>/_table_stages/<TABLE>/` with `<file>.error.json`
     beside it, and reported (errors= in the batch line, failed_files[...]).

Exactly once: files are loaded only in the commit that also advances the positions.
A crash after writing files but before that commit leaves files the table never
loaded; their records were never committed, so the source delivers them again (Spark
replays the batch, or resumes from the table's positions). When the connector starts
(and before a table's first write) its stage is cleaned from the file names and the
table's load history: a loaded file left behind (crash before step 4) is removed, a
failed one is moved to the table stage, a file never loaded is removed.

Only local warehouses: the internal stage is a folder of the warehouse (stage_store.py).
Tables have RECORD_METADATA and RECORD_CONTENT (declared VARIANT; stored as
floeline.variant.storage says: JSON text by default, so every engine reads them); an
existing table gets them added if it lacks them, and keeps the form it has; other
columns must allow NULL (they get NULL)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from urllib.parse import quote

import sqlglot

from floeline.errors import TableError, first_lines, storage_full
from floeline.ingest import snowpipe_files
from floeline.ingest.bad_records import BadRecords
from floeline.ingest.landing import landing
from floeline.ingest.progress import BatchReport
from floeline.ingest.sink import TableBatch
from floeline.ingest.table_state import Tables, TableState
from floeline.records.content import sql_string
from floeline.records.shaping import CONTENT_COLUMN
from floeline.sources.base import Committed, max_position_sql, min_position_sql
from floeline.warehouse import load_history, pipes, stage_store, stages, tables
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.load_history import LOAD_FAILED
from floeline.records.columns import METADATA_COLUMN, Column
from floeline.warehouse.commits import commit
from floeline.warehouse.pipe_select import compile_stage_select

log = logging.getLogger("floeline")

TABLE_STAGES_DIR = "_table_stages"
ON_ERROR = "SKIP_FILE"  # Snowpipe's default: a file with a bad record is not loaded
_TMP = "_tmp-"  # Spark's output before the files get their names (hidden from listings)
_PLAIN = re.compile(r"[A-Z_][A-Z0-9_$]*")


def _sql_name(*parts: str) -> str:
    return ".".join(p if _PLAIN.fullmatch(p) else '"' + p.replace('"', '""') + '"' for p in parts)


def _table_pipe(name: str, ref: TableRef, stage: stages.Stage, columns: list[str]) -> pipes.Pipe:
    """The table's pipe, as `CREATE PIPE name AS COPY INTO table (RECORD_METADATA,
    RECORD_CONTENT) FROM (SELECT $1:meta, $1:content FROM @stage) FILE_FORMAT=(TYPE=JSON)`
    stores it (Snowpipe's ON_ERROR=SKIP_FILE; no AUTO_INGEST: the sink loads the files);
    the table's other columns get NULL."""
    select = "SELECT $1:meta, $1:content"
    text = (f"CREATE PIPE IF NOT EXISTS {_sql_name(ref.database, ref.schema, name)} AS "
            f"COPY INTO {_sql_name(ref.database, ref.schema, ref.name)} "
            f"({METADATA_COLUMN}, {CONTENT_COLUMN}) FROM ({select} FROM "
            f"@{_sql_name(ref.database, ref.schema, stage.name)}) FILE_FORMAT=(TYPE=JSON)")
    compiled = compile_stage_select(sqlglot.parse_one(select, read="snowflake"),
                                    [METADATA_COLUMN, CONTENT_COLUMN], None, positional=False)
    by_name = dict(zip((METADATA_COLUMN, CONTENT_COLUMN), compiled))
    copy = {"stage": [stage.database, stage.schema, stage.name], "path": "", "pattern": None,
            "file_format": {"TYPE": "JSON"}, "on_error": ON_ERROR, "match_by_column_name": False,
            "auto_ingest": False, "refreshed_ms": 0, "notification_channel": None}
    return pipes.Pipe(name=name, table=ref.name, kind="pipe", sql=text,
                      columns=tuple(by_name.get(c, pipes.PipeColumn("NULL")) for c in columns),
                      database=ref.database, schema=ref.schema, copy=copy)


def table_stage_dir(warehouse, ref: TableRef) -> Path:
    """Where files that failed to load into `ref` are kept (Snowflake's @%TABLE)."""
    return warehouse.local_schema_dir(ref.database, ref.schema, TABLE_STAGES_DIR) / quote(ref.name, safe="")


class SnowpipeSink:
    """Rows through staged files loaded by the table's pipe (the SNOWPIPE method)."""

    def __init__(self, config, spark, warehouse, tables_: Tables, bad: BadRecords,
                 before_commit: Callable[[], None], route_of: Callable[[str], str]):
        self.config, self.spark, self.warehouse, self.tables = config, spark, warehouse, tables_
        self.bad, self.before_commit, self.route_of = bad, before_commit, route_of
        self.stages: dict[str, tuple] = {}  # table full name -> (stage, pipe), once set up
        self.recovered: set[str] = set()

    # ---- objects -------------------------------------------------------------------

    def stage_for(self, ref: TableRef) -> stages.Stage:
        name = snowpipe_files.stage_name(self.config.name, ref.name)
        return stages.Stage(name=name, database=ref.database, schema=ref.schema,
                            file_format={"TYPE": "JSON"},
                            comment=f"SNOWPIPE files of connector {self.config.name} "
                                    f"for table {ref.name}")

    def _store(self, stage: stages.Stage) -> stage_store.LocalStore:
        store = stage_store.store_for(self.warehouse, stage)
        if not isinstance(store, stage_store.LocalStore):  # pragma: no cover - internal stages are local
            raise TableError(f"the SNOWPIPE method needs a local warehouse (stage {stage.full_name})")
        return store

    def _set_up(self, state: TableState) -> tuple[stages.Stage, pipes.Pipe]:
        """The table (RECORD_METADATA, RECORD_CONTENT), its stage and its pipe, created
        when missing; checked once per table per run."""
        ref = state.ref
        ready = self.stages.get(ref.full_name)
        schema = self.tables.schema(state)
        if ready is not None and schema is not None:
            return ready
        storage = self.config.table_settings.variant_storage
        if schema is None:
            tables.create_table(self.spark, ref, [tables.in_storage(Column(c, "variant"), storage)
                                               for c in (METADATA_COLUMN, CONTENT_COLUMN)],
                                evolution=True, own_checkpoints=True)
            schema = self.tables.schema(state, refresh=True)
        missing = [tables.in_storage(Column(c, "variant"), storage)
                   for c in (METADATA_COLUMN, CONTENT_COLUMN) if schema.find(c) is None]
        if missing:  # as the connector: an existing table gets the two columns
            tables.add_columns(self.spark, ref, missing)
            schema = self.tables.schema(state, refresh=True)
        stage = self.stage_for(ref)
        if stages.load_stage(self.warehouse, ref.database, ref.schema, stage.name) is None:
            stages.save_stage(self.warehouse, stage)
        pipe_name = snowpipe_files.pipe_name(self.config.name, ref.name)
        pipe = pipes.load(self.warehouse, ref.database, ref.schema, "pipe", pipe_name)
        if pipe is None:
            pipe = _table_pipe(pipe_name, ref, stage, [c.name for c in schema.columns])
            pipes.save(self.warehouse, pipe, ref.database, ref.schema)
        self.stages[ref.full_name] = stage, pipe
        return stage, pipe

    # ---- start-up: what a crash left in the stage ----------------------------------

    def start(self) -> None:
        """Clean the stages of the tables known when the connector starts."""
        for state in list(self.tables.states.values()):
            self.recover(state)

    def recover(self, state: TableState) -> None:
        """Remove the files a crash left in the table's stage (loaded, or never loaded:
        their records come again from the source); move failed ones to the table stage."""
        if state.ref.full_name in self.recovered:
            return
        self.recovered.add(state.ref.full_name)
        ref = state.ref
        stage = stages.load_stage(self.warehouse, ref.database, ref.schema, self.stage_for(ref).name)
        if stage is None:
            return
        store = self._store(stage)
        for tmp in store.root.glob(_TMP + "*") if store.root.is_dir() else []:
            shutil.rmtree(tmp, ignore_errors=True)
        mine = [(f, r) for f in store.list(snowpipe_files.table_prefix(self.config.name, ref.name))
                if (r := snowpipe_files.parse_file_name(f.name)) is not None]
        if not mine:
            return
        status = {e.load.file: e.load for e in load_history.read_history(self.spark, ref)
                  if e.load.stage == stage.full_name}
        for f, rng in mine:
            load = status.get(f.name)
            if load is not None and load.status == LOAD_FAILED:
                self._move_failed(store, ref, load)
                continue
            if load is None:
                held = [pos for ch, pos in state.committed.positions.items() if _is_channel(rng, ch)]
                committed = held[0] if len(held) == 1 else None
                log.warning("SNOWPIPE: %s in stage %s was never loaded (offsets %s..%s, the table holds "
                            "up to %s); removed: its records are read again", f.name, stage.full_name,
                            rng.start, rng.end, committed)
            Path(store.root / f.name).unlink(missing_ok=True)

    # ---- one micro-batch -------------------------------------------------------------

    def check(self, batch: TableBatch) -> None:
        """Rows are VARIANT as they come: no row of this method fails a cast."""

    def write(self, batch: TableBatch) -> int:
        """Stage and load this batch's rows of one table, with its channels' new
        positions, in one Delta commit (see the module doc); the rows loaded."""
        state, report = batch.state, batch.report
        ref = state.ref
        self.recover(state)
        lands = landing(batch, self.config.null_values, self.bad)
        if lands.expected <= 0 and self.tables.schema(state) is None:
            state.committed_through(lands.after)  # nothing lands: no table just to hold positions
            return 0
        stage, pipe = self._set_up(state)
        batch.phase("set up")
        if lands.expected <= 0:  # only positions move (records replayed, diverted or skipped)
            stored = self.tables.schema(state).find(METADATA_COLUMN).type  # VARIANT or JSON text
            commit(self.spark.sql(f"SELECT CAST(NULL AS {stored}) AS {METADATA_COLUMN}").limit(0),
                   ref, self.config.name, lands.after, self.before_commit)
            state.committed_through(lands.after)
            return 0
        store = self._store(stage)
        # Each channel's offset range: the batch's statistics, unless some records were
        # taken out (replays, filtered, tombstones, bad records) and the files hold fewer.
        exact = not lands.replayed and not any(c.unusual for c in batch.channels.values())
        ranges = {ch: (c.first, c.last) for ch, c in batch.channels.items()} if exact else None
        files = self._stage_files(batch, lands.rows, store, ranges)
        batch.phase("stage files")
        loads = self._load(state, stage, pipe, files, lands.after)
        batch.phase("load")
        state.committed_through(lands.after)
        self._after_load(store, ref, loads, report)
        loaded = sum(load.rows_loaded for load in loads)
        report.rows_written[ref.name] = report.rows_written.get(ref.name, 0) + loaded
        return loaded

    def _load(self, state: TableState, stage, pipe, files, after: Committed):
        from floeline.ingest.file_load import load_files

        ref = state.ref
        schema = self.tables.schema(state)
        fmt = stages.resolve_format(self.warehouse, stage, None, stage.database, stage.schema)
        pipe_full = f"{ref.database}.{ref.schema}.{pipe.name}"
        what = f"loading staged files into table {ref.full_name} (pipe {pipe_full})"
        try:
            return load_files(self.spark, ref, schema, stage, files, fmt, pipe, ON_ERROR, None,
                              pipe_name=pipe_full, positions=(self.config.name, after),
                              check_owned=self.before_commit, what=what)
        except TableError:
            state.forget_schema()
            raise
        except Exception as exc:
            state.forget_schema()
            raise (storage_full(exc, what, ref.path)
                   or TableError(f"{what} failed: {first_lines(str(exc))}")) from exc

    def _after_load(self, store, ref: TableRef, loads, report: BatchReport) -> None:
        """Remove the loaded files; move the failed ones to the table stage and count
        their rows as errors."""
        for load in loads:
            if load.loaded:
                Path(store.root / load.file).unlink(missing_ok=True)
            else:
                self._move_failed(store, ref, load)
                rows = max(load.rows_parsed, 1)
                report.errors += rows
                report.errors_by_table[ref.name] = report.errors_by_table.get(ref.name, 0) + rows
                self.bad.count_row_errors(ref, rows)
                report.failed_files.append(f"{ref.name}:{load.file}")

    def _partition_parts(self, batch: TableBatch, channels: list[str]) -> dict[str, int]:
        """Each channel's partition folder number: the plain partition, or with the topic
        hash when several routes write to the table (snowpipe_files.py)."""
        routes = set(batch.routes) | {self.route_of(ch) for ch in channels}
        shared = len(routes) > 1
        parts = {}
        for channel in channels:
            route = self.route_of(channel)
            partition = int(channel.rsplit("/", 1)[-1])
            parts[channel] = snowpipe_files.partition_part(partition, route if shared else None)
        return parts

    def _stage_files(self, batch: TableBatch, rows, store, ranges) -> list[stages.StagedFile]:
        """Write each channel's rows as one gzip JSON-lines file in the stage, in
        position order; the staged files. `ranges`: channel -> (first, last) position
        of its rows, or None to compute them."""
        state = batch.state
        if ranges is None:
            ranges = {r["channel"]: (r["first"], r["last"]) for r in rows.groupBy("channel").agg(
                _expr(f"{min_position_sql('position')} AS first"),
                _expr(f"{max_position_sql('position')} AS last")).collect()}
        index = {ch: i for i, ch in enumerate(sorted(ranges))}
        lookup = "map(" + ", ".join(f"{sql_string(ch)}, {i}" for ch, i in index.items()) + ")"
        parts = self._partition_parts(batch, list(index))
        content = "CASE WHEN _tombstone THEN parse_json('{}') ELSE v END"
        tmp = store.root / f"{_TMP}{uuid.uuid4().hex}"
        store.root.mkdir(parents=True, exist_ok=True)
        try:
            (rows.selectExpr(f"element_at({lookup}, channel) AS _i", "length(position) AS _n", "position",
                             f"to_json(named_struct('meta', _meta, 'content', {content})) AS value")
             .repartition(len(index), "_i").sortWithinPartitions("_i", "_n", "position")
             .select("_i", "value").write.partitionBy("_i").option("compression", "gzip")
             .text(str(tmp)))
            now = int(time.time() * 1000)
            staged = []
            for channel, (first, last) in sorted(ranges.items()):
                written = sorted((tmp / f"_i={index[channel]}").glob("part-*"))
                if len(written) != 1:
                    raise TableError(f"staging channel {channel}: expected one file, Spark wrote "
                                     f"{len(written)}")
                name = snowpipe_files.file_name(self.config.name, state.ref.name, parts[channel],
                                                first, last, now)
                target = store.root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                written[0].replace(target)
                staged.append(store.file(name))
            return staged
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _move_failed(self, store, ref: TableRef, load) -> None:
        """Move a file that failed to load to the table stage, its error beside it."""
        source = store.root / load.file
        if not source.exists():
            return
        target = table_stage_dir(self.warehouse, ref) / load.file
        target.parent.mkdir(parents=True, exist_ok=True)
        source.replace(target)
        target.with_name(target.name + ".error.json").write_text(
            json.dumps(asdict(load), ensure_ascii=False, indent=1), encoding="utf-8")
        log.error("SNOWPIPE: %s failed to load into %s (%s, line %s); moved to %s", load.file,
                  ref.full_name, load.first_error, load.first_error_line, target)


def _is_channel(rng: snowpipe_files.StagedRange, channel: str) -> bool:
    route, _, partition = channel.rpartition("/")
    return partition.isdigit() and rng.is_for(route, int(partition))


def _expr(text: str):
    from pyspark.sql import functions

    return functions.expr(text)
