"""The error table `<TABLE>_ERRORS` beside each table: the dead-letter queue of a
connector without a DLQ topic or stream (errors.tolerance=all).

It keeps the record as it came (channel, position, the source's own coordinates as
RECORD_SOURCE, key, value, headers, timestamp) and why it failed. Its commits carry the
same channel positions as the table's, so a replayed batch adds no record twice.
RECORD_SOURCE, its one semi-structured column, takes the connector's
floeline.variant.storage, so every engine that reads the tables reads their errors too;
an existing error table keeps its form."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark import StorageLevel

from floeline.ingest.table_state import Tables
from floeline.records.content import sql_string
from floeline.sources.base import Committed
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.commits import commit
from floeline.warehouse.positions import commit_metadata, committed_filter_sql
from floeline.records.columns import Column, stores_json

if TYPE_CHECKING:
    from floeline.ingest.dead_letters import BadRecord

# The error table's layout: the record as it came from its source, and its failure.
ERROR_TABLE_COLUMNS = (
    ("RECORD_CHANNEL", "string"), ("RECORD_POSITION", "string"), ("RECORD_SOURCE", "variant"),
    ("RECORD_TIMESTAMP", "timestamp"), ("RECORD_KEY", "binary"), ("RECORD_VALUE", "binary"),
    ("RECORD_HEADERS", "array<struct<key:string,value:binary>>"),
    ("STAGE", "string"), ("ERROR", "string"), ("ERROR_CLASS", "string"),
    ("CONNECTOR", "string"), ("FAILED_AT", "timestamp"),
)


class ErrorTable:
    """A DeadLetterQueue (dead_letters.py) writing to each table's `<TABLE>_ERRORS`."""
    destination = "error_table"  # the metrics label

    def __init__(self, connector: str, spark, tables_: Tables, variant_storage: str = "json"):
        self.connector, self.spark, self.tables = connector, spark, tables_
        self.variant_storage = variant_storage

    def put_stopping(self, record: BadRecord) -> int:
        """errors.tolerance=none: nothing of the batch is committed, this table included."""
        return 0

    def put(self, bad, ref: TableRef, committed_after: Committed) -> int:
        """Append the bad records to `<TABLE>_ERRORS`, with the same channel positions as
        the table's commit, so a replayed batch adds none twice. Returns how many."""
        errors_ref = self.tables.warehouse.error_table(ref)
        state = self.tables.state(errors_ref)
        source_as_text = self._create_or_complete(state, errors_ref)
        not_held = committed_filter_sql(state.replay_base(
            commit_metadata(self.connector, committed_after)))
        if not_held:
            bad = bad.where(not_held)
        rows = bad.selectExpr(
            "channel AS RECORD_CHANNEL", "position AS RECORD_POSITION",
            f"{'to_json(to_variant_object(source))' if source_as_text else 'to_variant_object(source)'} "
            "AS RECORD_SOURCE",
            "timestamp AS RECORD_TIMESTAMP", "_raw_key AS RECORD_KEY", "_raw_value AS RECORD_VALUE",
            "headers AS RECORD_HEADERS", "_stage_text AS STAGE", "_error_text AS ERROR",
            "coalesce(_class, 'DataException') AS ERROR_CLASS",
            f"{sql_string(self.connector)} AS CONNECTOR", "current_timestamp() AS FAILED_AT",
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            count = rows.count()
            if count:
                commit(rows, errors_ref, self.connector, committed_after, self.tables.check_owned)
                state.committed_through(committed_after)
            return count
        finally:
            rows.unpersist()

    def _create_or_complete(self, state, errors_ref: TableRef) -> bool:
        """Create the error table, or add the columns an older floeline's lacks; returns
        whether its RECORD_SOURCE holds JSON text."""
        columns = [tables.in_storage(Column(n, t), self.variant_storage) for n, t in ERROR_TABLE_COLUMNS]
        schema = self.tables.schema(state)
        if schema is None:
            tables.create_table(self.spark, errors_ref, columns, evolution=False, own_checkpoints=True)
            state.forget_schema()
            return self.variant_storage == "json"
        missing = [c for c in columns if schema.find(c.name) is None]
        if missing:
            tables.add_columns(self.spark, errors_ref, missing)
            state.forget_schema()
        source = schema.find("RECORD_SOURCE")
        return stores_json(source) if source is not None else self.variant_storage == "json"
