"""Kafka Connect's offsets API (KIP-875, the sink connectors' shape) over the positions
a connector's tables hold: the tables are the truth, so these offsets mean what the
connector will do.

GET: per channel, the position its table holds.
    Kafka:   {"partition": {"kafka_topic": T, "kafka_partition": P},
              "offset": {"kafka_offset": N}}          N: the next offset to read
                                                      (the last committed + 1, as Connect)
    Kinesis: {"partition": {"stream": S, "shard": ID},
              "offset": {"sequence_number": SEQ}}     SEQ: the last committed sequence
                                                      number, as KCL checkpoints it; a
                                                      shard read to its end: "SHARD_END"
PATCH (the herder allows it only while the connector is STOPPED): where the named
channels resume. A Kafka offset below N re-delivers records (appended again: a replay
the user asked for), one above skips them; a Kinesis shard resumes after SEQ;
"offset": null resets a channel to its earliest record. DELETE resets every channel
to its earliest record.

A change is one commit of no rows per table it affects, carrying the new positions and
who asked (warehouse/offsets_changes.py); the connector's next start sets aside a
Spark checkpoint made before it (ingest/checkpoint_guard.py). Tables are changed one
after another: when one commit fails, those before it keep the change, and the
request can be sent again."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from floeline.config import ConnectorConfig
from floeline.ingest.table_preparer import TablePreparer
from floeline.ingest.table_state import Tables, TableState
from floeline.records.decode import transform_chain_for
from floeline.sources import source_for
from floeline.sources.base import Committed
from floeline.sources.routes import table_for_route
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.warehouse.offsets_changes import (OffsetsChange, changed_positions,
                                                commit_offsets_change)
from floeline.worker.errors import BadRequest

log = logging.getLogger("floeline")

# The consumer group is a mirror: asking it gives up after this many seconds.
MIRROR_BOUND_S = 10.0

ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
SHARD_END = "SHARD_END"  # KCL's checkpoint of a shard read to its end

KAFKA_PARTITION = ("kafka_topic", "kafka_partition")
KAFKA_OFFSET = "kafka_offset"
KINESIS_PARTITION = ("stream", "shard")
KINESIS_OFFSET = "sequence_number"


# ---- the shapes ---------------------------------------------------------------------

def kafka_entry(channel: str, position: str) -> dict:
    """Connect's entry for a topic partition whose last committed offset is `position`."""
    topic, _, partition = channel.rpartition("/")
    return {"partition": {"kafka_topic": topic, "kafka_partition": int(partition)},
            "offset": {KAFKA_OFFSET: int(position) + 1}}


def kinesis_entry(channel: str, position: str) -> dict:
    """The entry for a shard: its last committed sequence number, or SHARD_END."""
    stream, _, shard = channel.partition("/")
    return {"partition": {"stream": stream, "shard": shard},
            "offset": {KINESIS_OFFSET: position}}


def offsets_of(kind: str, committed: Committed) -> list[dict]:
    """The GET answer's entries for what the tables hold, sorted by channel. Channels
    with no position (new, or reset to their earliest record) have none, as in Connect."""
    if kind == "kinesis":
        held = dict(committed.positions)
        held.update({channel: SHARD_END for channel in committed.finished})
        return [kinesis_entry(c, p) for c, p in sorted(held.items())]
    return [kafka_entry(c, p) for c, p in
            sorted(committed.positions.items(), key=lambda cp: _kafka_order(cp[0]))]


def _kafka_order(channel: str) -> tuple[str, int]:
    topic, _, partition = channel.rpartition("/")
    return topic, int(partition)


@dataclass
class Requested:
    """What an alter request asks, per channel: `starts` (Kafka: channel -> the next
    offset to read; Kinesis: channel -> the last sequence number taken as committed;
    None: the channel's earliest record) and `finished` (Kinesis shards set to
    SHARD_END)."""

    starts: dict[str, int | str | None] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)


def parse_offsets(kind: str, offsets) -> Requested:
    """The channels and offsets of a PATCH body's `offsets` list, checked entry by
    entry; BadRequest names the entry and the fix."""
    if not isinstance(offsets, list) or not offsets:
        raise BadRequest("Partitions / offsets need to be provided for an alter offsets request: "
                         "send {\"offsets\": [{\"partition\": {...}, \"offset\": {...}}, ...]}")
    requested = Requested()
    for index, entry in enumerate(offsets):
        channel, start = (_parse_kinesis_entry if kind == "kinesis" else _parse_kafka_entry)(index, entry)
        if channel in requested.starts or channel in requested.finished:
            raise BadRequest(f"offsets[{index}]: {_describe(kind, channel)} is listed twice; "
                             f"give each partition once")
        if start == SHARD_END:
            requested.finished.add(channel)
        else:
            requested.starts[channel] = start
    return requested


def _describe(kind: str, channel: str) -> str:
    if kind == "kinesis":
        stream, _, shard = channel.partition("/")
        return f"stream {stream!r} shard {shard!r}"
    topic, _, partition = channel.rpartition("/")
    return f"topic {topic!r} partition {partition}"


def _entry_parts(index: int, entry, partition_keys: tuple[str, ...], offset_key: str,
                 other_keys: tuple[str, ...], other: str) -> tuple[dict, dict | None]:
    """An entry's partition and offset objects, with the checks both shapes share."""
    where = f"offsets[{index}]"
    example = "an entry looks like " + json.dumps(
        {"partition": {k: "..." for k in partition_keys}, "offset": {offset_key: "..."}})
    if not isinstance(entry, dict) or set(entry) != {"partition", "offset"}:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise BadRequest(f"{where} must be an object with exactly the keys \"partition\" and "
                         f"\"offset\" (got {keys}): {example}")
    partition, offset = entry["partition"], entry["offset"]
    if not isinstance(partition, dict):
        raise BadRequest(f"{where}: the partition for a sink connector offset cannot be null or "
                         f"missing: {example}")
    if set(partition) == set(other_keys):
        raise BadRequest(f"{where} is a {other} partition ({', '.join(other_keys)}), but this "
                         f"connector reads {'Kinesis' if other == 'Kafka' else 'Kafka'}: {example}")
    if set(partition) != set(partition_keys):
        raise BadRequest(f"{where}: the partition must contain exactly the keys "
                         f"{', '.join(repr(k) for k in partition_keys)} (got "
                         f"{', '.join(repr(k) for k in sorted(partition)) or 'none'}): {example}")
    if offset is not None and (not isinstance(offset, dict) or set(offset) != {offset_key}):
        raise BadRequest(f"{where}: the offset must either be null (the earliest record) or "
                         f"contain exactly the key {offset_key!r}: {example}")
    return partition, offset


def _parse_kafka_entry(index: int, entry) -> tuple[str, int | None]:
    partition, offset = _entry_parts(index, entry, KAFKA_PARTITION, KAFKA_OFFSET,
                                     KINESIS_PARTITION, "Kinesis")
    where = f"offsets[{index}]"
    topic, number = partition["kafka_topic"], partition["kafka_partition"]
    if not isinstance(topic, str) or not topic or "/" in topic:
        raise BadRequest(f"{where}: kafka_topic must be a topic name, got {topic!r}")
    number = _integer(number, f"{where}: kafka_partition", "a partition number")
    if number < 0:
        raise BadRequest(f"{where}: kafka_partition must not be negative, got {number}")
    channel = f"{topic}/{number}"
    if offset is None:
        return channel, None
    value = _integer(offset[KAFKA_OFFSET], f"{where} ({_describe('kafka', channel)}): kafka_offset",
                     "the next offset to read")
    if value < 0:
        raise BadRequest(f"{where} ({_describe('kafka', channel)}): kafka_offset must not be "
                         f"negative, got {value}; use null to start at the earliest record")
    return channel, value


def _integer(value, what: str, meaning: str) -> int:
    """An integer from JSON (a number or a string of digits, as Connect accepts)."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, int):
        return value
    raise BadRequest(f"{what} must be an integer ({meaning}), got {value!r}")


def _parse_kinesis_entry(index: int, entry) -> tuple[str, str | None]:
    partition, offset = _entry_parts(index, entry, KINESIS_PARTITION, KINESIS_OFFSET,
                                     KAFKA_PARTITION, "Kafka")
    where = f"offsets[{index}]"
    stream, shard = partition["stream"], partition["shard"]
    for key, value in (("stream", stream), ("shard", shard)):
        if not isinstance(value, str) or not value or "/" in value:
            raise BadRequest(f"{where}: {key} must be a Kinesis {key} name, got {value!r}")
    channel = f"{stream}/{shard}"
    if offset is None:
        return channel, None
    sequence = offset[KINESIS_OFFSET]
    if isinstance(sequence, int) and not isinstance(sequence, bool) and sequence >= 0:
        sequence = str(sequence)
    if sequence != SHARD_END and not (isinstance(sequence, str) and sequence.isdigit()):
        raise BadRequest(f"{where} ({_describe('kinesis', channel)}): sequence_number must be a "
                         f"Kinesis sequence number (a string of digits: the last record taken as "
                         f"committed), \"{SHARD_END}\" or null for the earliest record; got {sequence!r}")
    return channel, str(int(sequence)) if sequence != SHARD_END else SHARD_END


# ---- the connector's tables -------------------------------------------------------

class ConnectorTables:
    """A stopped connector's channels and the tables that hold their positions: its
    source (to list the channels), the route -> table rule, and the tables' state."""

    def __init__(self, config: ConnectorConfig, spark):
        self.config, self.spark = config, spark
        self.source = source_for(config)
        self.transforms = transform_chain_for(config.decoding.transforms)
        self.warehouse = Warehouse(config.warehouse, config.warehouse_s3)
        self.warehouse.prepare_spark(spark, config.checkpoint_dir)
        self.tables = Tables(spark, self.warehouse, config.name)
        self.channels = self.source.channels()

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> "ConnectorTables":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def table_of(self, channel: str) -> TableRef:
        """The table of a channel's route (sources/routes.py)."""
        route = self.source.route_of(channel)
        name = table_for_route(route, self.transforms, self.source.table_name)
        return self.warehouse.table(self.config.database, self.config.schema, name)

    def state(self, channel: str) -> TableState:
        return self.tables.state(self.table_of(channel))

    def held_states(self) -> list[TableState]:
        """The state of every table of a listed channel (read once each)."""
        states = {}
        for channel in self.channels:
            state = self.state(channel.id)
            states[state.ref.full_name] = state
        return list(states.values())

    def committed(self) -> Committed:
        """What the tables hold for the channels, as the connector reads it at start
        (ingest/pipeline.py): a listed channel's position from its route's table, then
        every other channel those tables hold."""
        result = Committed()
        for channel in self.channels:
            held = self.state(channel.id).committed
            if channel.id in held.positions:
                result.positions[channel.id] = held.positions[channel.id]
        for state in self.held_states():
            for channel, position in state.committed.positions.items():
                result.positions.setdefault(channel, position)
            result.finished |= state.committed.finished
        return result

    def known_channels(self) -> set[str]:
        """The channels a request may name: those listed now and those the tables hold."""
        known = {c.id for c in self.channels}
        for state in self.held_states():
            known |= set(state.committed.positions) | state.committed.finished
        return known

    def ensure_table(self, state: TableState) -> None:
        """Create the table as the connector's first record would (its metadata column,
        or metadata and content), so that it can hold positions."""
        if self.warehouse.is_table(state.ref):
            return
        config = self.config
        if config.schematization and not config.metadata.all_:
            raise BadRequest(f"table {state.ref.full_name} does not exist yet, and with "
                             f"snowflake.metadata.all=false it has no column until its first "
                             f"record: run the connector once (or create the table), then set "
                             f"its offsets")
        TablePreparer(config, self.spark, self.tables).prepare(state, None, {})


# ---- the API ----------------------------------------------------------------------

def connector_offsets(config: ConnectorConfig, spark) -> list[dict]:
    """GET /connectors/{name}/offsets's `offsets`: per channel, the position its table
    holds (see the module doc)."""
    with ConnectorTables(config, spark) as tables_:
        return offsets_of(config.source, tables_.committed())


def alter_offsets(config: ConnectorConfig, spark, offsets: list[dict], requested_by: str) -> str:
    """PATCH /connectors/{name}/offsets: set where the named channels resume."""
    requested = parse_offsets(config.source, offsets)
    with ConnectorTables(config, spark) as tables_:
        named = set(requested.starts) | requested.finished
        unknown = sorted(named - tables_.known_channels())
        if unknown:
            index = next(i for i, e in enumerate(offsets)
                         if _channel_of(config.source, e) in unknown)
            listed = sorted({c.route for c in tables_.channels})
            raise BadRequest(
                f"offsets[{index}]: {_describe(config.source, unknown[0])} is not read by connector "
                f"{config.name} (it reads {', '.join(listed) or 'nothing yet'}); name one of its "
                f"{'shards' if config.source == 'kinesis' else 'partitions'}")
        if config.source == "kafka":
            _check_whole_recreated_topics(tables_, named)
        positions = (dict(requested.starts) if config.source == "kinesis"
                     else _kafka_positions(tables_, requested, offsets))
        _apply(tables_, positions, requested.finished, OffsetsChange(requested_by, "alter"))
        if config.source == "kafka":
            _mirror_to_group(tables_, positions)
    return ALTERED


def reset_offsets(config: ConnectorConfig, spark, requested_by: str) -> str:
    """DELETE /connectors/{name}/offsets: every channel resumes at its earliest record."""
    with ConnectorTables(config, spark) as tables_:
        held = [s for s in tables_.held_states() if tables_.warehouse.is_table(s.ref)]
        change = OffsetsChange(requested_by, "reset")
        for state in held:
            channels = ({c.id for c in tables_.channels if tables_.table_of(c.id) == state.ref}
                        | set(state.committed.positions) | state.committed.finished)
            _commit(tables_, state, {c: None for c in channels}, set(), change)
        if config.source == "kafka":
            # A channel whose table does not exist yet falls back to the consumer group.
            source = tables_.source
            _mirror(f"delete consumer group {source.group}",
                    lambda: source.cluster.delete_group(source.group, _mirror_policy(tables_)))
    return RESET


def _channel_of(kind: str, entry: dict) -> str:
    partition = entry["partition"]
    if kind == "kinesis":
        return f"{partition['stream']}/{partition['shard']}"
    return f"{partition['kafka_topic']}/{int(partition['kafka_partition'])}"


def _check_whole_recreated_topics(tables_: ConnectorTables, named: set[str]) -> None:
    """A topic deleted and created again since its positions were committed (its id
    differs from the one the tables hold) is moved whole: the change records the new
    id, and a partition left out would keep an offset of the old topic."""
    by_route = {tables_.source.route_of(c): c for c in sorted(named)}
    now = tables_.source.epochs_of(named)
    for route, channel in sorted(by_route.items()):
        held = tables_.state(channel).committed
        then = held.epochs.get(route)
        if then is None or now.get(route) in (None, then):
            continue
        left = sorted((c for c in held.positions if tables_.source.route_of(c) == route and c not in named),
                      key=_kafka_order)
        if left:
            raise BadRequest(
                f"topic {route!r} was deleted and created again since its offsets were committed "
                f"(topic id {then} is now {now[route]}): give every partition of it the tables hold "
                f"an offset (also {', '.join(c.rpartition('/')[2] for c in left)}), or null for its "
                f"first record")


def _kafka_positions(tables_: ConnectorTables, requested: Requested, offsets: list[dict]
                     ) -> dict[str, str | None]:
    """The last committed offset to record per partition (None: the earliest record),
    from the next offsets asked: at or before the partition's first record means its
    earliest; past its end is refused (Spark would stop on it as lost data)."""
    from floeline.sources.kafka import topic_partition

    asked = {c: n for c, n in requested.starts.items() if n is not None}
    partitions = [topic_partition(c) for c in asked]
    cluster = tables_.source.cluster
    earliest, latest = cluster.earliest(partitions), cluster.latest(partitions)
    positions: dict[str, str | None] = {c: None for c, n in requested.starts.items() if n is None}
    for channel, next_offset in asked.items():
        tp = topic_partition(channel)
        first, end = earliest[tp], latest[tp]
        if next_offset > end:
            index = next(i for i, e in enumerate(offsets) if _channel_of("kafka", e) == channel)
            raise BadRequest(
                f"offsets[{index}] ({_describe('kafka', channel)}): kafka_offset {next_offset} is "
                f"past the partition's end (its next record will have offset {end}); choose an "
                f"offset from {first} to {end}, or null for the earliest record")
        positions[channel] = None if next_offset <= first else str(next_offset - 1)
    return positions


def _mirror_to_group(tables_: ConnectorTables, positions: dict[str, str | None]) -> None:
    """Set the consumer group's offsets to the new ones, as Connect does, so lag tools
    show the change at once (a mirror: the tables hold the truth)."""
    from floeline.sources.kafka import topic_partition

    source = tables_.source
    nexts = {topic_partition(c): int(p) + 1 for c, p in positions.items() if p is not None}
    if nexts:
        _mirror(f"set consumer group {source.group}'s offsets",
                lambda: source.cluster.commit_group_offsets(source.group, nexts, _mirror_policy(tables_)))


def _mirror_policy(tables_: ConnectorTables):
    return tables_.config.retry.at_most(MIRROR_BOUND_S)


def _mirror(what: str, call) -> None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - a mirror only: the change is in the tables
        log.warning("offsets changed in the tables, but could not %s: %s", what, exc)


def _apply(tables_: ConnectorTables, positions: dict[str, str | None], finished: set[str],
           change: OffsetsChange) -> None:
    """One commit per table the change affects."""
    by_table: dict[str, tuple[TableState, dict, set]] = {}
    for channel in sorted(set(positions) | finished):
        state = tables_.state(channel)
        _state, table_positions, table_finished = by_table.setdefault(
            state.ref.full_name, (state, {}, set()))
        if channel in finished:
            table_finished.add(channel)
        else:
            table_positions[channel] = positions[channel]
    for state, table_positions, table_finished in by_table.values():
        _commit(tables_, state, table_positions, table_finished, change)


def _commit(tables_: ConnectorTables, state: TableState, positions: dict[str, str | None],
            finished: set[str], change: OffsetsChange) -> None:
    tables_.ensure_table(state)
    # The routes' epochs now (a Kafka topic created again): the new positions are its.
    epochs = tables_.source.epochs_of(set(positions) | finished)
    after = changed_positions(state.committed, change, positions, finished, epochs)
    commit_offsets_change(tables_.spark, state.ref, tables_.config.name, state.committed, after,
                          change)
    state.committed_through(after)
