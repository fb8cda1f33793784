"""A batch's tables written by one Spark job, then committed one by one (issue 26).

The general path writes a batch's tables one after another, a write job and a commit
each: ~0.5-1 s a table whatever its rows (bench/RESULTS.md: 100 tables ran at 0.06-0.1x
the rows/s of one). When every table of the batch has the same columns and the default
pipe computes them the same way from the same keys (topics of one kind of record, or
RECORD_METADATA and RECORD_CONTENT without schematization), one projection over the
batch computes every row with its table's key, one job writes every table's files
(warehouse/shared_write.py), and each table commits its files with its positions
(commits.FilesCommits): exactly once as before, since a table's rows and positions are
still in one commit.

Anything else takes the per-table path, decided before anything is written: bad
records, tombstones or rows a Filter dropped (their rules are the sinks'), replays,
user-defined pipes, tables whose columns or keys differ, rows that may fail their
column's type, a table whose layout a plain file write would not honour
(FilesCommits.usable), SNOWPIPE and upserts."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from floeline.errors import TableError, first_lines, storage_full
from floeline.ingest.sink import TableBatch
from floeline.ingest.landing import landing
from floeline.ingest.read_tasks import read_task_limit
from floeline.ingest.onepass import FAILURE_MARK
from floeline.ingest.table_sink import TableSink
from floeline.ingest.table_state import TableState
from floeline.records.content import sql_string
from floeline.records.values_to_columns import rules_for
from floeline.sources.base import Committed
from floeline.warehouse import shared_write, tables
from floeline.warehouse.catalog import folder_name
from floeline.warehouse.commits import FilesCommits, plain_fields_of
from floeline.warehouse.pipes import pipe_for_table

# Tables committed side by side: a commit is driver work (the Delta log's files, the
# snapshot after it) that waits on storage more than on a core.
COMMIT_THREADS = 4


def write_tables_together(pipeline, rows, groups, batches: list[TableBatch]) -> bool:
    """Write and commit `batches` (the batch's tables) with one write job when they all
    allow it (see the module doc); False, with nothing written, when they do not."""
    cfg, sink = pipeline.config, pipeline.sink
    if (len(batches) < 2 or not isinstance(sink, TableSink)
            or any(g["bad"] or g["tombstones"] or g["filtered"] for g in groups)):
        return False
    for batch in batches:
        ref = batch.state.ref
        if (not batch.channels or pipe_for_table(pipeline.warehouse, ref.database, ref.schema, ref.name)
                or any(batch.state.holds(ch, c.first) for ch, c in batch.channels.items())):
            return False
    pipes, rules = [], rules_for(cfg.validation)
    for batch in batches:
        lands = landing(batch, cfg.null_values, pipeline.bad)  # no job: nothing to take out
        fields = sink.batch_fields(batch, lands)
        if "" in fields:
            return False
        pipes.append(sink.default_pipe(batch, lands, fields))
        if not pipes[-1].same_rows_as(pipes[0], rules):
            return False
    shaped = pipes[0].rows(rows, cfg, carry=("_route",))
    if shaped.can_fail or shaped.offset_order:
        return False
    key_of_table = {b.state.ref.full_name: f"t{i}" for i, b in enumerate(batches)}
    key_of_route = {route: key_of_table[pipeline.table_ref(route).full_name]
                    for route in {g["_route"] for g in groups}}
    frame = shaped.rows.selectExpr(table_column_sql(key_of_route, "_route"), *shaped.columns)
    shares = [TableShare(b.state, b.state.after({ch: c.last for ch, c in b.channels.items()}, b.finished),
                         sum(c.records for c in b.channels.values()),
                         tuple(k for keys, _t in p.fields.values() for k in keys), bool(p.fields))
              for b, p in zip(batches, pipes)]
    written = write_and_commit(pipeline, frame, shares, batches[0].phase)
    if written is None:
        return False
    for batch, share in zip(batches, shares):
        ref = share.state.ref
        batch.report.rows_written[ref.name] = batch.report.rows_written.get(ref.name, 0) + written[ref.full_name]
    return True


def table_column_sql(key_of_route: dict[str, str], route: str) -> str:
    """SQL: shared_write.TABLE_COLUMN, each row's table key (`t<i>`: write_and_commit's
    shares[i]) from its `route` column."""
    lookup = ", ".join(f"{sql_string(r)}, {sql_string(k)}" for r, k in sorted(key_of_route.items()))
    # A route without a table fails the write (nothing commits): its rows cannot be dropped.
    return (f"coalesce(element_at(map({lookup}), {route}), raise_error({sql_string(FAILURE_MARK)})) "
            f"AS {shared_write.TABLE_COLUMN}")


@dataclass
class TableShare:
    """One table's share of a batch written together: its positions once committed,
    its rows (None: not known before the write), and what its commit teaches its state
    (the keys its rows had; `clean`: the next batch may take one pass)."""
    state: TableState
    after: Committed
    rows: int | None
    keys: tuple[str, ...]
    clean: bool


def write_and_commit(pipeline, frame, shares: list[TableShare], phase) -> dict[str, int] | None:
    """Write `frame` (the tables' columns and TABLE_COLUMN: `t<i>` for `shares[i]`) in
    one job, then commit each table's files with its positions, COMMIT_THREADS at a
    time; the rows committed per table (full name). None, with nothing written, when a
    table does not take such files (FilesCommits.usable) or the session has no table
    commits jar. Raises the write's failure (nothing committed) or the first commit's."""
    if [c.lower() for c in frame.columns].count(shared_write.TABLE_COLUMN) != 1:
        return None  # a table column of that name: the tables are written one by one
    fields = plain_fields_of(frame.drop(shared_write.TABLE_COLUMN))
    commits = FilesCommits.start(pipeline.spark, [s.state.ref for s in shares], fields,
                                 [s.state.creation for s in shares], COMMIT_THREADS)
    if commits is None or not all(commits.usable):
        return None
    phase("prepare commits")
    staging = pipeline.warehouse.path("_staging", folder_name(pipeline.config.name))
    try:
        try:
            staged = shared_write.write_files_by_table(frame, staging, read_task_limit(pipeline.spark))
        except Exception as exc:
            raise _write_failure(exc, len(shares), staging) from exc
        phase("write together")
        if set(staged) - {f"t{i}" for i in range(len(shares))}:
            raise TableError(f"writing the batch's tables together: rows of no table "
                             f"({sorted(set(staged), key=str)}), so nothing of the batch was committed "
                             f"(a floeline bug: please report it)")
        files = [staged.get(f"t{i}", []) for i in range(len(shares))]
        rows = [sum(json.loads(f.add.get("stats") or "{}").get("numRecords", -1) for f in table_files)
                for table_files in files]
        _check_counts(shares, rows)
        with ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="floeline-commit") as pool:
            for done in [pool.submit(_commit_table, pipeline, share, commits, i, table_files)
                         for i, (share, table_files) in enumerate(zip(shares, files))]:
                done.result()  # the first failure is the batch's (the others ran on)
        phase("commits")
    finally:
        shared_write.empty(pipeline.spark, staging)
    return {s.state.ref.full_name: n for s, n in zip(shares, rows)}


def _check_counts(shares: list[TableShare], rows: list[int]) -> None:
    """Before any commit: each table's files hold as many rows as its share of the
    batch had records (when known), so a row without its table cannot go unnoticed."""
    for share, written in zip(shares, rows):
        if written < 0 or (share.rows is not None and written != share.rows):
            raise TableError(f"writing the batch's tables together: table {share.state.ref.full_name} "
                             f"got {written} rows in its files for {share.rows} records, so nothing of the "
                             f"batch was committed (a floeline bug: please report it with this message)")


def _write_failure(exc: BaseException, count: int, staging: str) -> Exception:
    """The error of a failed shared write: StorageFull or TableError (nothing committed)."""
    what = f"writing the files of {count} tables in one job"
    return storage_full(exc, what, staging) or TableError(
        f"{what} failed: {first_lines(str(exc))}; nothing of the batch was committed")


def _commit_table(pipeline, share: TableShare, commits: FilesCommits, index: int, files) -> None:
    """Move the table's files in and commit them with its channels' new positions."""
    state = share.state
    existed = tables.folder_exists(state.ref)
    try:
        commits.commit(index, files, pipeline.config.name, share.after, pipeline.before_commit)
    except Exception:
        if commits.creations[index] is not None:  # no half-made table left behind
            tables.discard_failed_creation(state.ref, existed)
        state.commit_failed()
        pipeline.metrics.table_commit_error(state.ref.full_name)
        raise
    state.created()
    state.general_batch_committed(share.after, share.keys, share.clean)
