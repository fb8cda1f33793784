"""The Sink protocol: what the batch flow asks of a table's sink (rows straight into the
table, or staged files loaded by a pipe), and the one table's share of a batch it gets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from floeline.ingest.progress import BatchReport
from floeline.ingest.results import ChannelStats
from floeline.ingest.table_state import TableState


@dataclass
class TableBatch:
    """One table's share of a micro-batch: its rows (decoded, with `_error`, `_meta`,
    ...), each channel's statistics, the channels finished in this batch, and the
    query's routes whose records go to this table."""
    state: TableState
    rows: object  # a Spark DataFrame
    channels: dict[str, ChannelStats]
    finished: set[str]
    report: BatchReport
    phase: Callable[[str], None] = lambda _name: None
    routes: set[str] = field(default_factory=set)


class Sink(Protocol):
    def start(self) -> None:
        """When the connector starts (e.g. clean what a crash left in a stage)."""

    def check(self, batch: TableBatch) -> None:
        """errors.tolerance=none with several tables: raise the first row error of the
        table's rows (a RecordError) before any table commits; writes nothing."""

    def write(self, batch: TableBatch) -> int:
        """Commit the table's rows with its channels' new positions; the rows written."""
