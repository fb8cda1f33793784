"""The table sink of the general path: one table's share of a micro-batch goes in one
Delta commit together with its channels' new positions.

Per table: the rows that land (landing.py: replays, rows a Filter dropped, ignored
tombstones and bad records taken out); create the table on its first record or evolve
it for new keys (table_preparer.py: Snowflake's schema evolution); compute the rows with
the table's pipe (the default pipe `{TABLE}-STREAMING` or the user's,
records/shaping.py); route row errors; append the rows with the positions in the
commit's userMetadata."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from floeline.errors import ServiceUnavailable, TableError
from floeline.ingest.bad_records import BadRecords
from floeline.ingest.identity_order import generates_identity, in_offset_order
from floeline.ingest.landing import Landing, landing
from floeline.ingest.sink import TableBatch
from floeline.ingest.table_preparer import TablePreparer, record_fields
from floeline.ingest.table_state import Tables
from floeline.naming import display_identifier
from floeline.records import shaping, values_to_columns
from floeline.records.columns import TableSchema
from floeline.records.content import quote_column
from floeline.warehouse.commits import commit
from floeline.warehouse.pipes import pipe_for_table

log = logging.getLogger("floeline")


@dataclass
class Shaped:
    """A table's rows computed by its pipe, and how to write them."""
    rows: object  # _c0, _c1, ... per table column, `_row_error` when a row can fail
    columns: list[str]  # the select list of the write
    stage: str  # SQL: the stage a row error is reported at
    fields: dict  # column name -> (keys, type) of the default pipe; {} for a user's pipe
    # Delta numbers an identity column the write leaves out: one task, rows in offset
    # order (identity_order.py)
    offset_order: bool = False

    @property
    def can_fail(self) -> bool:
        return "_row_error" in self.rows.columns


@dataclass(frozen=True)
class DefaultPipe:
    """How the default pipe computes a table's columns from a batch's keys."""
    schema: TableSchema
    all_fields: dict  # column name -> (keys, type): every key of the batch
    fields: dict  # the keys that made columns (without those of too wide records)
    reject_unmatched: bool  # a key without a column is a row error
    rejects: bool  # and the batch has such keys
    evolution_refused: str | None
    table: str  # the table's name in row errors

    def same_rows_as(self, other: DefaultPipe, rules: values_to_columns.Rules) -> bool:
        """True when `other` computes the same columns the same way from the same keys,
        and no row of either can fail (so the batch types of their keys, which decide
        only the per-row checks, may differ: integers of other sizes, say)."""
        return (self.schema.columns == other.schema.columns
                and self.reject_unmatched == other.reject_unmatched and not self.rejects
                and not other.rejects and self._keys() == other._keys()
                and self._always_fits(rules) and other._always_fits(rules))

    def _keys(self) -> dict[str, list[str]]:
        return {name: keys for name, (keys, _type) in self.all_fields.items()}

    def _always_fits(self, rules: values_to_columns.Rules) -> bool:
        return all(values_to_columns.always_fits(shaping.field_for(c, self.all_fields)[1], c, rules)
                   for c in self.schema.columns)

    def rows(self, table_rows, config, carry: tuple[str, ...] = ()) -> Shaped:
        """The table's rows as the default pipe computes them from `table_rows`."""
        schema = self.schema
        shaped = shaping.default_pipe_rows(schema, table_rows, self.all_fields, config.schematization,
                                           self.table, reject_unmatched=self.reject_unmatched,
                                           rules=values_to_columns.rules_for(config.validation),
                                           evolution_refused=self.evolution_refused, carry=carry)
        written = {c.name for i, c in enumerate(schema.columns) if f"_c{i}" in shaped.columns}
        return Shaped(shaped, written_columns(schema, shaped), "'table write'", self.fields,
                      generates_identity(schema, written))


class TableSink:
    """Rows straight into the table (Snowpipe Streaming)."""

    def __init__(self, config, spark, warehouse, tables_: Tables, bad: BadRecords,
                 preparer: TablePreparer, before_commit: Callable[[], None], metrics,
                 declared_types: Callable[[set, set], dict[str, str]]):
        self.config, self.spark, self.warehouse, self.tables = config, spark, warehouse, tables_
        self.bad, self.preparer, self.before_commit = bad, preparer, before_commit
        self.metrics, self.declared_types = metrics, declared_types
        self._ignored_keys: dict[str, set[str]] = {}  # table -> keys logged as ignored

    def start(self) -> None:
        """Nothing to do when the connector starts (the tables hold their positions)."""

    def check(self, batch: TableBatch) -> None:
        """Raise the first row error of the table's rows (errors.tolerance=none)."""
        lands = landing(batch, self.config.null_values, self.bad)
        if self._nothing_lands(batch, lands):
            return
        shaped = self._shape(batch, lands)
        if shaped.can_fail:
            self._divert_row_errors(batch, shaped, lands)

    def write(self, batch: TableBatch) -> int:
        """Append this batch's rows of one table, with its channels' new positions and
        the channels finished in this batch, in one Delta commit; the rows written."""
        state, report = batch.state, batch.report
        lands = landing(batch, self.config.null_values, self.bad)
        if self._nothing_lands(batch, lands):
            # Nothing lands and there is no table: none is created just to hold positions
            # (on a restart, the source's own fallback says where to resume).
            state.committed_through(lands.after)
            return 0
        shaped = self._shape(batch, lands)
        out = self._rows_to_commit(shaped)
        if shaped.can_fail and self.config.errors_tolerance == "all":
            # Bad rows go to the DLQ / error table before the table commit.
            lands.expected -= self._divert_row_errors(batch, shaped, lands)
        self._commit(batch, shaped, out, lands)
        batch.phase("convert+write")
        self._remember(batch, shaped, lands)
        name = state.ref.name
        report.rows_written[name] = report.rows_written.get(name, 0) + lands.expected
        return lands.expected

    # ---- the steps -----------------------------------------------------------------

    def _nothing_lands(self, batch: TableBatch, lands: Landing) -> bool:
        return lands.expected <= 0 and self.tables.schema(batch.state) is None

    def _shape(self, batch: TableBatch, lands: Landing) -> Shaped:
        """The rows as the table's pipe computes them (the user's, else the default)."""
        ref = batch.state.ref
        pipe = pipe_for_table(self.warehouse, ref.database, ref.schema, ref.name)
        if pipe is not None:
            return self._user_pipe_rows(batch, lands, pipe)
        return self._default_pipe_rows(batch, lands)

    def _user_pipe_rows(self, batch: TableBatch, lands: Landing, pipe) -> Shaped:
        """A user-defined pipe (or interactive table) computes the columns itself: no
        key matching, no schema evolution."""
        ref = batch.state.ref
        schema = self.tables.schema(batch.state, refresh=True)
        if schema is None:
            raise TableError(f"table {ref.full_name} has {pipe.kind} {pipe.name} but the table "
                             f"is gone; create it again or DROP PIPE {pipe.name}")
        shaped = shaping.pipe_rows(schema, lands.rows, pipe)
        return Shaped(shaped, written_columns(schema, shaped), "'pipe expression'", {})

    def _default_pipe_rows(self, batch: TableBatch, lands: Landing) -> Shaped:
        """Keys -> columns: the table created or evolved for the batch's keys."""
        fields = self.batch_fields(batch, lands)
        if "" in fields:  # no column can be named by an empty key
            self._divert_empty_keys(batch, lands)
            fields.pop("")
        return self.default_pipe(batch, lands, fields).rows(lands.rows, self.config)

    def batch_fields(self, batch: TableBatch, lands: Landing) -> dict:
        """The batch's keys for the table's columns (none without schematization)."""
        cfg = self.config
        return (record_fields(lands.rows, batch.channels, cfg.column_normalization)
                if cfg.schematization else {})

    def default_pipe(self, batch: TableBatch, lands: Landing, all_fields: dict) -> DefaultPipe:
        """The table created or evolved for the batch's keys `all_fields`, and how the
        default pipe computes its columns from them."""
        cfg, state = self.config, batch.state
        fields = self.preparer.without_wide_records(state, lands.rows, all_fields)
        batch.phase("keys")
        channels = batch.channels.values()
        declared = self.declared_types(set().union(*(c.schema_ids for c in channels)),
                                       set().union(*(c.declared_types for c in channels)))
        schema = self.preparer.prepare(state, lands.rows, fields, declared, first_commit_creates=True)
        batch.phase("table")
        reject = schema.evolution or cfg.validation == "client_side"
        unmatched = shaping.unmatched_keys(schema, all_fields)
        if not reject:
            self._note_ignored_keys(state.ref, unmatched)
        return DefaultPipe(schema, all_fields, fields, reject, bool(unmatched) and reject,
                           state.evolution_refused, display_name(state.ref))

    def _note_ignored_keys(self, ref, keys: list[str]) -> None:
        """Server-side validation with evolution off: the default pipe ignores keys that
        have no column (Snowflake's documented rule), so the record lands without them;
        each such key is logged once per table so that its loss is not silent."""
        seen = self._ignored_keys.setdefault(ref.full_name, set())
        new = sorted(set(keys) - seen)
        if not new:
            return
        seen.update(new)
        shown = ", ".join(repr(k) for k in new[:10]) + (", ..." if len(new) > 10 else "")
        log.warning("table %s: record keys %s match no column and schema evolution is off "
                    "(ENABLE_SCHEMA_EVOLUTION = FALSE); the records land without them, as "
                    "Snowflake's default pipe ignores such keys with snowflake.validation="
                    "server_side. To keep them: ALTER TABLE %s ADD COLUMN ..., or SET "
                    "ENABLE_SCHEMA_EVOLUTION = TRUE; to reject such records instead: "
                    "snowflake.validation=client_side", display_name(ref), shown, display_name(ref))

    def _divert_empty_keys(self, batch: TableBatch, lands: Landing) -> None:
        rows = lands.rows.selectExpr("*", (
            "CASE WHEN try_variant_get(v, '$[\"\"]', 'variant') IS NOT NULL THEN 'the record "
            "has an empty key (\"\"), which cannot be a column name: rename it in the producer "
            "or with the ReplaceField transform' END AS _key_error"))
        lands.rows, rejected = self.bad.divert(rows, "_key_error", "'table write'", batch.state.ref,
                                               batch.report, lands.after)
        lands.expected -= rejected

    def _rows_to_commit(self, shaped: Shaped):
        rows = shaped.rows
        if shaped.can_fail and self.config.errors_tolerance == "none":
            # Checked inside the write: a bad row fails it before anything commits.
            rows = rows.where("assert_true(_row_error IS NULL, _row_error) IS NULL")
        elif shaped.can_fail:
            rows = rows.where("_row_error IS NULL")
        if shaped.offset_order:
            rows = in_offset_order(rows, "_src_channel", "_src_position")
        return rows.selectExpr(*shaped.columns)

    def _divert_row_errors(self, batch: TableBatch, shaped: Shaped, lands: Landing) -> int:
        _, rejected = self.bad.divert(shaped.rows, "_row_error", shaped.stage, batch.state.ref,
                                      batch.report, lands.after, "_src_")
        return rejected

    def _commit(self, batch: TableBatch, shaped: Shaped, out, lands: Landing) -> None:
        state = batch.state
        ref = state.ref
        try:
            commit(out, ref, self.config.name, lands.after, self.before_commit, create=state.creation)
            state.created()
        except (TableError, ServiceUnavailable) as exc:
            if isinstance(exc, TableError) and shaped.can_fail and self.config.errors_tolerance == "none":
                # Name the first bad record (raises RecordError) if that was the cause.
                self._divert_row_errors(batch, shaped, lands)
            state.commit_failed()
            self.metrics.table_commit_error(ref.full_name)
            raise

    @staticmethod
    def _remember(batch: TableBatch, shaped: Shaped, lands: Landing) -> None:
        state = batch.state
        if not batch.channels:  # a commit that only records finished channels changes nothing here
            state.committed_through(lands.after)
            return
        clean = not any(c.unusual for c in batch.channels.values())
        state.general_batch_committed(
            lands.after, (k for keys, _t in shaped.fields.values() for k in keys),
            clean and not lands.replayed and not shaped.can_fail and bool(shaped.fields))


def written_columns(schema, shaped) -> list[str]:
    """The write's select list over default_pipe_rows' `_c<i>` columns (the default pipe
    leaves out keyless columns)."""
    return [f"_c{i} AS {quote_column(c.name)}" for i, c in enumerate(schema.columns)
            if f"_c{i}" in shaped.columns]


def display_name(ref) -> str:
    """DB.SCHEMA.TABLE as SQL writes it (quoted parts where needed), for messages."""
    return ".".join(display_identifier(p) for p in (ref.database, ref.schema, ref.name))

