"""The parts of the shared pipeline one connector's batches use: its source, its
tables and their state, the bad-record router, the table preparer, the sink (table or
SNOWPIPE), and the route -> table rule. Each sink gets the collaborators it uses, not
this object. Nothing here knows which source it is."""

from __future__ import annotations

from floeline.ingest.bad_records import BadRecords
from floeline.ingest.dead_letters import DeadLetterQueue, KafkaTopicQueue, KinesisStreamQueue
from floeline.ingest.declared_types import DeclaredTypes
from floeline.ingest.error_table import ErrorTable
from floeline.ingest.sink import Sink
from floeline.ingest.snowpipe_sink import SnowpipeSink
from floeline.ingest.table_preparer import TablePreparer
from floeline.ingest.table_sink import TableSink
from floeline.ingest.table_state import Tables
from floeline.ingest.upsert_sink import UpsertSink
from floeline.records.decode import needs_python_decode, transform_chain_for
from floeline.records.header_rules import header_rules
from floeline.records.support import check_supported
from floeline.records.transforms.chain import routed_topic
from floeline.sources.base import Committed
from floeline.sources.routes import table_for_route
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.owners import TableOwners
from floeline.warehouse.owners import needed as owners_needed


class Pipeline:
    def __init__(self, config, spark, source, metrics):
        check_supported(config)
        self.config, self.spark, self.source = config, spark, source
        self.decode = needs_python_decode(config)  # converters/transforms run in Python
        # header.converter: without a decode stage, can SQL write every header's text?
        self.headers_check = header_rules(config.decoding.headers).headers_check_sql() if source.has_headers else None
        self.headers_in_sql = not self.decode and self.headers_check is None
        self.transforms = transform_chain_for(config.decoding.transforms)
        self.warehouse = Warehouse(config.warehouse, config.warehouse_s3)
        # Spark reads and writes the tables and its checkpoint: on S3, the buckets' settings.
        self.warehouse.prepare_spark(spark, config.checkpoint_dir)
        owners = (TableOwners(self.warehouse, config.name, config.owner_timeout_ms,
                              standby=source.has_standby)
                  if owners_needed(self.warehouse) else None)
        self.tables = Tables(spark, self.warehouse, config.name, owners=owners,
                             pin_evolution=config.validation == "client_side",
                             epochs_of=source.epochs_of)
        self.metrics = metrics  # the connector's (see Connector): what batches add to its counters
        self.bad = BadRecords(config, source, dead_letter_queue_for(config, spark, self.tables),
                              self.metrics)
        self.before_commit = commit_check(self.tables, source)
        self.preparer = TablePreparer(config, spark, self.tables)
        self.declared_types = DeclaredTypes(config, self.transforms)
        self.sink = self._sink()

    def _sink(self) -> Sink:
        """snowflake.ingestion.method: rows straight into the table (Snowpipe Streaming),
        or through staged files loaded by the table's pipe (SNOWPIPE); insert.mode=upsert:
        changes merged into the table by primary key."""
        if self.config.changes.upsert:
            return UpsertSink(self.config, self.spark, self.warehouse, self.tables, self.bad,
                              self.preparer, self.before_commit, self.metrics, self.declared_types)
        if self.config.ingestion_method == "SNOWPIPE":
            return SnowpipeSink(self.config, self.spark, self.warehouse, self.tables, self.bad,
                                self.before_commit, self.source.route_of)
        return TableSink(self.config, self.spark, self.warehouse, self.tables, self.bad,
                         self.preparer, self.before_commit, self.metrics, self.declared_types)

    def release(self) -> None:
        """When the connector stops: give up its tables' owner records (S3)."""
        if self.tables.owners is not None:
            self.tables.owners.release()

    def table_ref(self, routed_route: str) -> TableRef:
        """The table of a route as transforms left it (a batch's `_route`)."""
        cfg = self.config
        return self.warehouse.table(cfg.database, cfg.schema, self.source.table_name(routed_route))

    def table_of_route(self, route: str) -> TableRef:
        """The table records of the source's `route` go to (sources/routes.py)."""
        cfg = self.config
        return self.warehouse.table(cfg.database, cfg.schema,
                                    table_for_route(route, self.transforms, self.source.table_name))

    def routed(self, route: str) -> str:
        """The route `route`'s records take after transforms (RegexRouter renames topics;
        a restart resumes content-dependent routes from the source's own fallback)."""
        return routed_topic(self.transforms, route)

    def committed(self, channels, routes=()) -> Committed:
        """What the tables hold for the source's channels: each listed channel's
        position from its route's table, and every other channel those tables and the
        tables of `routes` hold (e.g. a closed Kinesis shard no longer listed, a deleted
        Kafka topic), with the finished ones and those an offsets change reset to their
        earliest record."""
        result = Committed()
        by_table: dict[str, Committed] = {}
        for route in set(routes) - {channel.route for channel in channels}:
            ref = self.table_of_route(route)
            if self.warehouse.is_table(ref):
                state = self.tables.state(ref)
                by_table[state.ref.full_name] = state.committed
        for channel in channels:
            state = self.tables.state(self.table_of_route(channel.route))
            by_table[state.ref.full_name] = state.committed
            position = state.committed.positions.get(channel.id)
            if position is not None:
                result.positions[channel.id] = position
            elif channel.id in state.committed.earliest:
                result.earliest.add(channel.id)
        for held in by_table.values():
            for channel, position in held.positions.items():
                result.positions.setdefault(channel, position)
            result.finished |= held.finished
            for route, epoch in held.epochs.items():
                result.epochs.setdefault(route, epoch)
        result.earliest -= set(result.positions) | result.finished
        return result

    def offsets_changes(self, channels) -> set[str]:
        """The ids of the offsets changes the channels' tables follow from (see
        ingest/checkpoint_guard.py)."""
        states = (self.tables.state(self.table_of_route(route))
                  for route in {channel.route for channel in channels})
        return {state.committed.change for state in states if state.committed.change is not None}


def commit_check(tables_: Tables, source):
    """What runs right before a table commit (warehouse/commits.py's ownership check):
    the tables are still this connector's (S3), and whatever the source needs
    (sources/base.py: a Kinesis lease still held)."""
    def check() -> None:
        tables_.check_owned()
        source.before_commit()
    return check


def dead_letter_queue_for(config, spark, tables_) -> DeadLetterQueue:
    """The connector's dead-letter queue: the DLQ topic or stream it names, else the
    error tables."""
    if config.dlq_topic:
        return KafkaTopicQueue(config.bootstrap_servers, config.dlq_topic, config.name,
                               config.dlq_context_headers, config.retry, config.kafka_security)
    if config.kinesis is not None and config.kinesis.dlq_stream:
        return KinesisStreamQueue(config.kinesis.aws, config.kinesis.dlq_stream, config.name,
                                  config.retry)
    return ErrorTable(config.name, spark, tables_, config.table_settings.variant_storage)
