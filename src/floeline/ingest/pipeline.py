"""The parts of the shared pipeline one connector's batches use: its source, its
tables and their state, the bad-record router, the sink (table or SNOWPIPE), and the route ->
table rule. Nothing here knows which source it is."""

from __future__ import annotations

from floeline.ingest.bad_records import BadRecords
from floeline.ingest.dead_letters import dead_letter_queue_for
from floeline.ingest.snowpipe_sink import SnowpipeSink
from floeline.ingest.table_sink import TableSink
from floeline.ingest.table_state import Tables
from floeline.records.decode import needs_python_decode, transform_chain_for
from floeline.records.support import check_supported
from floeline.records.transforms import routed_topic
from floeline.sources.base import Committed
from floeline.warehouse.catalog import TableRef, Warehouse


class Pipeline:
    def __init__(self, config, spark, source):
        check_supported(config)
        self.config, self.spark, self.source = config, spark, source
        self.decode = needs_python_decode(config)  # converters/transforms run in Python
        self.transforms = transform_chain_for(config.raw)
        self.warehouse = Warehouse(config.warehouse)
        self.tables = Tables(spark, self.warehouse, config.name)
        self.bad = BadRecords(config, spark, self.tables, source, dead_letter_queue_for(config))
        # snowflake.ingestion.method: rows straight into the table (Snowpipe Streaming),
        # or through staged files loaded by the table's pipe (SNOWPIPE).
        self.sink = SnowpipeSink(self) if config.ingestion_method == "SNOWPIPE" else TableSink(self)
        self.routes: list[str] = []  # the source's routes when the query started

    def table_ref(self, route: str) -> TableRef:
        """The table records of `route` (after transforms such as RegexRouter) go to."""
        cfg = self.config
        return self.warehouse.table(cfg.database, cfg.schema, self.source.table_name(route))

    def routed(self, route: str) -> str:
        """The route `route`'s records take after transforms (RegexRouter renames topics;
        a restart resumes content-dependent routes from the source's own fallback)."""
        return routed_topic(self.transforms, route)

    def committed(self, channels) -> Committed:
        """What the tables hold for the source's channels: each listed channel's
        position from its route's table, and every other channel those tables hold
        (e.g. a closed Kinesis shard no longer listed), with the finished ones."""
        result = Committed()
        by_table: dict[str, Committed] = {}
        for channel in channels:
            state = self.tables.state(self.table_ref(self.routed(channel.route)))
            by_table[state.ref.full_name] = state.committed
            position = state.committed.positions.get(channel.id)
            if position is not None:
                result.positions[channel.id] = position
        for held in by_table.values():
            for channel, position in held.positions.items():
                result.positions.setdefault(channel, position)
            result.finished |= held.finished
        return result
