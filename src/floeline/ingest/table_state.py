"""What the connector knows about each destination table while it runs: the channel
positions it holds (read once from the table, then kept up to date by each commit),
its schema (cached, re-read after DDL, failures and SCHEMA_TTL_S), and what the
one-pass path needs (the record keys earlier batches held).

ENABLE_SCHEMA_EVOLUTION is re-read with the schema, except under client-side validation
(`pins_evolution`): there Snowflake's connector reads it once, when it opens the
table's channel, and keeps that answer until it restarts (its test
test_schema_evolution_disabled_mid_stream: switched off mid-stream, the running
connector still adds the new column), so the first read of a run holds for the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from floeline.sources.base import Committed, position_after
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.owners import TableOwners
from floeline.warehouse.positions import committed_in_log
from floeline.records.columns import TableSchema

# How long a table's cached schema is trusted before it is read again, so that changes
# made from outside (ALTER TABLE, the evolution flag) are picked up while running.
SCHEMA_TTL_S = 30.0


@dataclass
class TableState:
    ref: TableRef
    committed: Committed  # channel -> last committed position, finished channels
    schema: TableSchema | None = None
    schema_read_at: float = 0.0
    # The exact JSON keys earlier batches held, and whether the last batch was clean
    # (no bad records, tombstones or row errors): what the one-pass path needs.
    known_keys: frozenset[str] = frozenset()
    one_pass_ready: bool = False
    one_pass_tried: bool = False  # whether a sample of the first batch set known_keys
    # An error table is written up to twice per batch (decode errors, row errors): both
    # writes filter replays against the positions it held before the batch.
    batch_metadata: str | None = None
    batch_base: Committed | None = None
    # Why this batch's schema evolution left some keys without a column (they were
    # over floeline.schema.evolution.max.new.columns): their records' row error says it.
    evolution_refused: str | None = None
    # Client-side validation: the evolution flag as the run first read it (or created
    # the table with), which every later read of the schema keeps.
    pins_evolution: bool = False
    evolution_at_open: bool | None = None
    # A commit to the table raised: it may still have landed (its log entry written
    # before the failure), so `committed` is read again from the table before use.
    committed_unsure: bool = False
    # A new table whose first append's commit creates it (tables.NewTable): until then
    # `schema` is its columns and nothing of it is on disk.
    creation: tables.NewTable | None = None
    # The source's epochs of the routes of some channels (Source.epochs_of).
    epochs_of: Callable[[set[str]], dict[str, str]] = field(default=lambda _channels: {}, repr=False)

    def holds(self, channel: str, position: str | None) -> bool:
        """True when the table already holds `channel` up to `position` or further."""
        committed = self.committed.positions.get(channel)
        if committed is None or position is None:
            return False
        return not position_after(position, committed)

    def after(self, positions: dict[str, str], finished=frozenset()) -> Committed:
        """This table's positions once `positions` and `finished` are committed, with
        the epochs of their routes as the source reads them."""
        held = self.committed
        epochs = {**held.epochs, **self.epochs_of(set(positions) | set(finished))}
        return Committed({**held.positions, **positions}, held.finished | set(finished),
                         held.earliest - set(positions) - set(finished), held.change, epochs)

    # ---- changes: only through these ---------------------------------------------

    def committed_through(self, after: Committed) -> None:
        """A commit (or a batch with nothing to hold) moved the table to `after`."""
        self.committed = after

    def remember_schema(self, schema: TableSchema | None) -> None:
        """The table's schema as just read (or created); with `pins_evolution`, its
        evolution flag as the run first saw it."""
        if schema is not None and self.pins_evolution:
            if self.evolution_at_open is None:
                self.evolution_at_open = schema.evolution
            schema = replace(schema, evolution=self.evolution_at_open)
        self.schema, self.schema_read_at = schema, time.time()

    def forget_schema(self) -> None:
        """The table may have changed (DDL, a failed write): read it again next time
        (a table not created yet is decided again from the next batch's records)."""
        self.schema = None
        self.creation = None

    def create_with_first_commit(self, table: tables.NewTable, schema: TableSchema) -> None:
        """The table is to be created by its first append's commit, with `schema`."""
        self.remember_schema(schema)
        self.creation = table

    def created(self) -> None:
        """The commit that creates the table landed."""
        self.creation = None

    def first_one_pass_sample(self) -> bool:
        """True the first time a sample of the table's first batch may set its keys
        (once per table, not after every failure)."""
        first = not self.one_pass_tried
        self.one_pass_tried = True
        return first

    def learn_keys(self, keys) -> None:
        """Record keys the table's records hold (what one pass accepts)."""
        self.known_keys |= frozenset(keys)

    def one_pass_failed(self, committing: bool = False) -> None:
        """A one-pass write failed: the general path goes next, the schema is re-read;
        `committing`: it failed in its commit, which may have landed all the same."""
        self.one_pass_ready = False
        if committing:
            self.commit_failed()
        else:
            self.forget_schema()

    def commit_failed(self) -> None:
        """A commit raised: the table may have changed under us (read its schema again),
        and the commit may have landed all the same (read its positions again before
        the next batch: a replay of what landed is then dropped, as after a restart)."""
        self.forget_schema()
        self.committed_unsure = True

    def one_pass_committed(self, after: Committed) -> None:
        self.committed_through(after)
        self.one_pass_ready = True

    def general_batch_committed(self, after: Committed, keys, clean: bool, only_these: bool = False) -> None:
        """A general-path commit with rows: the next batch may take one pass if this
        one held nothing unusual (`clean`). `only_these`: `keys` replace the known keys
        (change events' after images, whose fields one pass expects exactly)."""
        self.committed_through(after)
        if only_these:
            self.known_keys = frozenset()
        self.learn_keys(keys)
        self.one_pass_ready = clean

    def refuse_evolution(self, reason: str | None) -> None:
        """Why this batch's schema evolution left some keys without a column (None: it
        did not)."""
        self.evolution_refused = reason

    def replay_base(self, metadata: str) -> Committed:
        """The positions this table held before the batch whose commits carry
        `metadata` (an error table is written up to twice per batch: both writes filter
        replays against the same base)."""
        if self.batch_metadata != metadata:  # the batch's first write to this table
            self.batch_metadata, self.batch_base = metadata, self.committed
        return self.batch_base


@dataclass
class Tables:
    """The connector's tables by full name, created on first use. `owners`: on S3, the
    owner records that keep each table to this one connector (warehouse/owners.py),
    taken before the table is first read. `pin_evolution`: client-side validation
    (TableState.pins_evolution)."""

    spark: object
    warehouse: Warehouse
    connector: str
    states: dict[str, TableState] = field(default_factory=dict)
    owners: TableOwners | None = None
    pin_evolution: bool = False
    epochs_of: Callable[[set[str]], dict[str, str]] = field(default=lambda _channels: {}, repr=False)

    def check_owned(self) -> None:
        """Before a commit: this connector still owns its tables (S3; else nothing)."""
        if self.owners is not None:
            self.owners.check()

    def state(self, ref: TableRef) -> TableState:
        state = self.states.get(ref.full_name)
        if state is None:
            if self.owners is not None:
                self.owners.acquire(ref)
            state = TableState(ref, self._held(ref), pins_evolution=self.pin_evolution,
                               epochs_of=self.epochs_of)
            self.states[ref.full_name] = state
        elif state.committed_unsure:
            state.committed_through(self._held(ref))
            state.committed_unsure = False
        return state

    def _held(self, ref: TableRef) -> Committed:
        """This connector's positions in the table, read from its Delta log files, not
        with Spark: DeltaTable.history cost 4 Spark jobs and 0.5-1.5 s per table at every
        start (100 tables: minutes); both read the same JSON commits, newest first."""
        held, _commit = committed_in_log(ref.path, self.connector, self.warehouse.storage_for(ref.path))
        return held

    def commits_failed(self) -> None:
        """A batch failed (its query restarts): any of its commits may have landed."""
        for state in self.states.values():
            state.commit_failed()

    def schema(self, state: TableState, refresh: bool = False) -> TableSchema | None:
        if state.creation is not None:  # not on disk yet: nothing else can have changed it
            return state.schema
        if refresh or state.schema is None or time.time() - state.schema_read_at > SCHEMA_TTL_S:
            state.remember_schema(tables.read_schema(self.spark, state.ref))
        return state.schema
