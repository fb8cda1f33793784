"""The pipe service (`floeline pipes run`): every auto-ingest pipe of the warehouse
(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage ...) loads the files that
land in its stage, each once.

It finds new files by listing the stage each poll, and loads them with COPY's own load
(sql/copy.py): the rows of the files and their load-history entries go into the table
in one Delta commit, so the table alone says which files are loaded, and a restart, a
SIGKILL or a lost state directory neither skips nor repeats a file. (There is no Spark
checkpoint to lose: the load history is the only state.) A file that fails under the
pipe's ON_ERROR (SKIP_FILE by default, as Snowpipe) is recorded as LOAD_FAILED and not
tried again until ALTER PIPE p REFRESH."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from floeline.errors import FloelineError
from floeline.sql.copy import load_files
from floeline.warehouse import load_history, pipes, stages, tables
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.load_history import LOAD_FAILED, FileLoad

log = logging.getLogger("floeline")

MAX_FILES_PER_LOAD = 500  # files per commit: bounds a load's memory and its commit's size


@dataclass
class PipeStatus:
    """What SYSTEM$PIPE_STATUS reports for one pipe."""

    pending: int
    last_file: str | None
    last_load_ms: int | None


def stage_pipes(warehouse: Warehouse) -> list[tuple[str, str, pipes.Pipe]]:
    """(database, schema, pipe) of every pipe that loads staged files."""
    return [(d, s, p) for d, s, p in pipes.list_stored(warehouse) if p.loads_files]


def _stage_of(warehouse: Warehouse, pipe: pipes.Pipe) -> stages.Stage:
    database, schema, name = pipe.copy["stage"]
    stage = stages.load_stage(warehouse, database, schema, name)
    if stage is None:
        raise FloelineError(f"pipe {pipe.name}: its stage {database}.{schema}.{name} was dropped; "
                            f"create it again or DROP PIPE {pipe.name}")
    return stage


def pending_files(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe):
    """The pipe's stage files it has still to load (not loaded into its table, and not
    failed by this pipe since its last REFRESH), and the table's history."""
    stage = _stage_of(warehouse, pipe)
    ref = warehouse.table(pipe.database, pipe.schema, pipe.table)
    history = load_history.read_history(spark, ref)
    loaded = load_history.Loaded(history)
    name = f"{database}.{schema}.{pipe.name}"
    failed = {(e.load.file, e.load.size, e.load.modified_ms) for e in history
              if e.load.status == LOAD_FAILED and e.load.pipe == name
              and e.timestamp_ms >= pipe.copy.get("refreshed_ms", 0)}
    listed = stages.select_files(stages.list_files(warehouse, stage, pipe.copy["path"]),
                                 pipe.copy["path"], None, pipe.copy.get("pattern"))
    files = [f for f in listed if not loaded.listed(stage.full_name, f.name, f.size, f.modified_ms)
             and (f.name, f.size, f.modified_ms) not in failed]
    return stage, ref, files, loaded, history


def load_new_files(spark, warehouse: Warehouse, database: str, schema: str,
                   pipe: pipes.Pipe) -> list[FileLoad]:
    """One poll of one pipe: load the files that landed since the last."""
    stage, ref, files, loaded, _ = pending_files(spark, warehouse, database, schema, pipe)
    if not files:
        return []
    table_schema = tables.read_schema(spark, ref)
    if table_schema is None:
        raise FloelineError(f"pipe {pipe.name}: its table {ref.full_name} was dropped; create it "
                            f"again or DROP PIPE {pipe.name}")
    fmt = stages.resolve_format(warehouse, stage, pipe.copy.get("file_format"), stage.database, stage.schema)
    shaping_pipe = None if pipe.copy.get("match_by_column_name") else pipe
    return load_files(spark, ref, table_schema, stage, files[:MAX_FILES_PER_LOAD], fmt, shaping_pipe,
                      pipe.copy["on_error"], loaded, pipe_name=f"{database}.{schema}.{pipe.name}")


def pipe_status(spark, warehouse: Warehouse, database: str, schema: str, pipe: pipes.Pipe) -> PipeStatus:
    _, _, files, _, history = pending_files(spark, warehouse, database, schema, pipe)
    mine = [e for e in history if e.load.pipe == f"{database}.{schema}.{pipe.name}" and e.load.loaded]
    last = mine[-1] if mine else None
    return PipeStatus(len(files), last.load.file if last else None, last.timestamp_ms if last else None)


class PipeService:
    """Polls every auto-ingest pipe of a warehouse."""

    def __init__(self, spark, warehouse: Warehouse, poll_s: float = 1.0, report=print):
        self.spark, self.warehouse, self.poll_s, self.report = spark, warehouse, poll_s, report
        self.failures: dict[str, str] = {}  # pipe -> the last error it met

    def poll(self) -> int:
        """Load what landed for every auto-ingest pipe; the number of files processed."""
        processed = 0
        for database, schema, pipe in stage_pipes(self.warehouse):
            if not pipe.copy.get("auto_ingest"):
                continue
            name = f"{database}.{schema}.{pipe.name}"
            try:
                loads = load_new_files(self.spark, self.warehouse, database, schema, pipe)
            except FloelineError as exc:
                if self.failures.get(name) != str(exc):
                    self.report(f"pipe {name}: {exc}")
                self.failures[name] = str(exc)
                continue
            self.failures.pop(name, None)
            for load in loads:
                error = f" first_error={load.first_error!r} line={load.first_error_line}" if load.errors_seen else ""
                self.report(f"pipe {name}: {load.file} {load.status} rows={load.rows_loaded} "
                            f"errors={load.errors_seen}{error}")
            processed += len(loads)
        return processed

    def run(self, until_caught_up: bool = False) -> int:
        """Poll until interrupted (or, `until_caught_up`, until a poll finds nothing new);
        exit status 1 when a pipe is failing at the end."""
        if not any(p.copy.get("auto_ingest") for _, _, p in stage_pipes(self.warehouse)):
            self.report(f"no auto-ingest pipe in warehouse {self.warehouse.root} "
                        f"(CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @stage)")
        while True:
            processed = self.poll()
            if until_caught_up and not processed:
                return 1 if self.failures else 0
            if not processed:
                time.sleep(self.poll_s)
