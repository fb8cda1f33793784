"""What the connector knows about each destination table while it runs: the channel
positions it holds (read once from the table, then kept up to date by each commit),
its schema (cached, re-read after DDL, failures and SCHEMA_TTL_S), and what the
one-pass path needs (the record keys earlier batches held)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from floeline.sources.base import Committed, position_after
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.owners import TableOwners
from floeline.warehouse.positions import read_committed
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

    def holds(self, channel: str, position: str | None) -> bool:
        """True when the table already holds `channel` up to `position` or further."""
        committed = self.committed.positions.get(channel)
        if committed is None or position is None:
            return False
        return not position_after(position, committed)

    def after(self, positions: dict[str, str], finished=frozenset()) -> Committed:
        """This table's positions once `positions` and `finished` are committed."""
        return Committed({**self.committed.positions, **positions},
                         self.committed.finished | set(finished))


@dataclass
class Tables:
    """The connector's tables by full name, created on first use. `owners`: on S3, the
    owner records that keep each table to this one connector (warehouse/owners.py),
    taken before the table is first read."""

    spark: object
    warehouse: Warehouse
    connector: str
    states: dict[str, TableState] = field(default_factory=dict)
    owners: TableOwners | None = None

    def check_owned(self) -> None:
        """Before a commit: this connector still owns its tables (S3; else nothing)."""
        if self.owners is not None:
            self.owners.check()

    def state(self, ref: TableRef) -> TableState:
        state = self.states.get(ref.full_name)
        if state is None:
            if self.owners is not None:
                self.owners.acquire(ref)
            state = TableState(ref, read_committed(self.spark, ref, self.connector))
            self.states[ref.full_name] = state
        return state

    def schema(self, state: TableState, refresh: bool = False) -> TableSchema | None:
        if refresh or state.schema is None or time.time() - state.schema_read_at > SCHEMA_TTL_S:
            state.schema = tables.read_schema(self.spark, state.ref)
            state.schema_read_at = time.time()
        return state.schema
