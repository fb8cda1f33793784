"""The offsets API's shapes and body checks, the positions an offsets change leaves,
their round trip through a commit's userMetadata, and the checkpoint guard's steps
(no Spark: plain objects and a local directory)."""

from __future__ import annotations

import json

import pytest

from floeline.ingest.checkpoint_guard import (checkpoint_follows_changes, marker_location,
                                              read_marker, write_marker)
from floeline.sources.base import Committed
from floeline.sources.kinesis.offsets import TRIM_HORIZON, Shard, ShardState, start_states
from floeline.warehouse.offsets_changes import OffsetsChange, changed_positions
from floeline.warehouse.positions import commit_metadata, parse_commit_metadata
from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import BadRequest
from floeline.worker.offsets import SHARD_END, offsets_of, parse_offsets


def kafka(topic, partition, offset):
    return {"partition": {"kafka_topic": topic, "kafka_partition": partition},
            "offset": None if offset is None else {"kafka_offset": offset}}


def kinesis(stream, shard, sequence):
    return {"partition": {"stream": stream, "shard": shard},
            "offset": None if sequence is None else {"sequence_number": sequence}}


# ---- GET's shape ----------------------------------------------------------------------

def test_kafka_offsets_are_the_next_offset_to_read_in_partition_order():
    held = Committed({"orders/10": "4", "orders/2": "19", "audit/0": "0"}, earliest={"orders/3"})
    assert offsets_of("kafka", held) == [
        {"partition": {"kafka_topic": "audit", "kafka_partition": 0}, "offset": {"kafka_offset": 1}},
        {"partition": {"kafka_topic": "orders", "kafka_partition": 2}, "offset": {"kafka_offset": 20}},
        {"partition": {"kafka_topic": "orders", "kafka_partition": 10}, "offset": {"kafka_offset": 5}},
    ]


def test_kinesis_offsets_are_the_last_sequence_number_or_shard_end():
    seq = "49590338271490256608559692538361571095921575989136588898"
    held = Committed({"events/shardId-000000000001": seq, "events/shardId-000000000000": "7"},
                     {"events/shardId-000000000000"})
    assert offsets_of("kinesis", held) == [
        {"partition": {"stream": "events", "shard": "shardId-000000000000"},
         "offset": {"sequence_number": SHARD_END}},
        {"partition": {"stream": "events", "shard": "shardId-000000000001"},
         "offset": {"sequence_number": seq}},
    ]


# ---- PATCH bodies ---------------------------------------------------------------------

def test_kafka_body_parses_offsets_strings_and_nulls():
    requested = parse_offsets("kafka", [kafka("orders", 0, 10), kafka("orders", "1", "0"),
                                        kafka("orders", 2, None)])
    assert requested.starts == {"orders/0": 10, "orders/1": 0, "orders/2": None}
    assert requested.finished == set()


def test_kinesis_body_parses_sequence_numbers_shard_end_and_nulls():
    big = "4959033827149025660855969253836157109592157598913658889812345"
    requested = parse_offsets("kinesis", [kinesis("ev", "shardId-1", big), kinesis("ev", "shardId-2", None),
                                          kinesis("ev", "shardId-0", SHARD_END), kinesis("ev", "shardId-3", 42)])
    assert requested.starts == {"ev/shardId-1": big, "ev/shardId-2": None, "ev/shardId-3": "42"}
    assert requested.finished == {"ev/shardId-0"}


@pytest.mark.parametrize("kind, offsets, message", [
    ("kafka", [], r"Partitions / offsets need to be provided"),
    ("kafka", None, r"Partitions / offsets need to be provided"),
    ("kafka", [kafka("t", 0, -1)], r"offsets\[0\] \(topic 't' partition 0\): kafka_offset must not be negative"),
    ("kafka", [kafka("t", 0, 1), kafka("t", -2, 1)], r"offsets\[1\]: kafka_partition must not be negative"),
    ("kafka", [kafka("t", 0, "ten")], r"offsets\[0\].*kafka_offset must be an integer"),
    ("kafka", [kafka("t", 0, True)], r"kafka_offset must be an integer"),
    ("kafka", [kafka("t", "zero", 1)], r"offsets\[0\]: kafka_partition must be an integer"),
    ("kafka", [kafka("t", 0, 1), kafka("t", 0, 2)], r"offsets\[1\]: topic 't' partition 0 is listed twice"),
    ("kafka", [{"partition": {"kafka_topic": "t"}, "offset": {"kafka_offset": 1}}],
     r"offsets\[0\]: the partition must contain exactly the keys 'kafka_topic', 'kafka_partition'"),
    ("kafka", [{"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"offset": 1}}],
     r"offsets\[0\]: the offset must either be null .* 'kafka_offset'"),
    ("kafka", [{"partition": None, "offset": {"kafka_offset": 1}}],
     r"offsets\[0\]: the partition for a sink connector offset cannot be null"),
    ("kafka", [{"partition": {"kafka_topic": "t", "kafka_partition": 0}}],
     r"offsets\[0\] must be an object with exactly the keys \"partition\" and \"offset\""),
    ("kafka", ["t/0"], r"offsets\[0\] must be an object"),
    ("kafka", [kinesis("ev", "shardId-0", "1")], r"offsets\[0\] is a Kinesis partition .* this connector reads Kafka"),
    ("kinesis", [kafka("t", 0, 1)], r"offsets\[0\] is a Kafka partition .* this connector reads Kinesis"),
    ("kinesis", [kinesis("ev", "shardId-0", "-5")], r"offsets\[0\] \(stream 'ev' shard 'shardId-0'\): sequence_number must be"),
    ("kinesis", [kinesis("ev", "shardId-0", "LATEST")], r"sequence_number must be a Kinesis sequence number"),
    ("kinesis", [kinesis("ev", "", "1")], r"offsets\[0\]: shard must be a Kinesis shard name"),
])
def test_bad_bodies_name_the_entry_and_the_fix(kind, offsets, message):
    with pytest.raises(BadRequest, match=message) as raised:
        parse_offsets(kind, offsets)
    assert raised.value.status == 400


# ---- the positions a change leaves ------------------------------------------------------

def test_a_change_sets_positions_resets_to_earliest_and_finishes():
    held = Committed({"s/a": "10", "s/b": "20", "s/c": "30"}, {"s/d"}, change="old")
    change = OffsetsChange("alice", "alter")
    after = changed_positions(held, change, {"s/a": "5", "s/b": None, "s/d": "3"}, {"s/c"})
    assert after.positions == {"s/a": "5", "s/c": "30", "s/d": "3"}
    assert after.earliest == {"s/b"} and after.finished == {"s/c"} and after.change == change.id
    assert held.positions["s/b"] == "20" and held.change == "old"  # not changed in place


def test_earliest_and_change_round_trip_through_the_commit_metadata():
    committed = Committed({"t/0": "9"}, earliest={"t/1", "t/0"}, change="abc")
    text = commit_metadata("conn", committed)
    entry = json.loads(text)["floeline.channels"]
    assert entry["earliest"] == ["t/1"]  # a channel with a position is not at its earliest
    back = parse_commit_metadata(text, "conn")
    assert back.positions == {"t/0": "9"} and back.earliest == {"t/1"} and back.change == "abc"
    plain = json.loads(commit_metadata("conn", Committed({"t/0": "9"})))["floeline.channels"]
    assert "earliest" not in plain and "change" not in plain  # unchanged for ordinary commits


def test_a_kinesis_shard_reset_to_earliest_starts_at_trim_horizon():
    shards = [Shard("ev/a"), Shard("ev/b"), Shard("ev/c", ("ev/a",))]
    states = start_states(shards, {}, set(), "AT_TIMESTAMP:1000", earliest={"ev/a", "ev/c"})
    assert states["ev/a"] == ShardState(None, TRIM_HORIZON, False)
    assert states["ev/c"] == ShardState(None, TRIM_HORIZON, False)
    assert states["ev/b"] == ShardState(None, "AT_TIMESTAMP:1000", False)


# ---- the checkpoint guard -------------------------------------------------------------

def make_checkpoint(path):
    (path / "offsets").mkdir(parents=True)
    (path / "offsets" / "0").write_text("v1")
    return str(path)


def test_a_checkpoint_made_before_a_change_is_set_aside(tmp_path):
    files, checkpoint = LocalStorage(), make_checkpoint(tmp_path / "ckpt")
    assert checkpoint_follows_changes(files, checkpoint, set(), True, "c") is True  # no change
    assert checkpoint_follows_changes(files, checkpoint, {"x"}, True, "c") is False
    assert not (tmp_path / "ckpt" / "offsets").exists()
    assert read_marker(files, checkpoint) == {"x"}
    # Spark writes a new checkpoint; it follows change x and is kept.
    make_checkpoint(tmp_path / "ckpt")
    assert checkpoint_follows_changes(files, checkpoint, {"x"}, True, "c") is True
    assert (tmp_path / "ckpt" / "offsets" / "0").exists()
    # Another table's change y: set aside again.
    assert checkpoint_follows_changes(files, checkpoint, {"x", "y"}, True, "c") is False
    assert read_marker(files, checkpoint) == {"x", "y"}


def test_without_a_checkpoint_the_marker_records_the_changes_it_starts_after(tmp_path):
    files, checkpoint = LocalStorage(), str(tmp_path / "ckpt")
    assert checkpoint_follows_changes(files, checkpoint, set(), False, "c") is False
    assert files.read_text(marker_location(checkpoint)) is None  # nothing to record
    assert checkpoint_follows_changes(files, checkpoint, {"x"}, False, "c") is False
    assert read_marker(files, checkpoint) == {"x"}


def test_a_crash_while_setting_the_checkpoint_aside_sets_it_aside_again(tmp_path):
    files, checkpoint = LocalStorage(), make_checkpoint(tmp_path / "ckpt")
    write_marker(files, checkpoint, {"x"})
    files.delete(marker_location(checkpoint))  # the first step done, then the crash
    assert checkpoint_follows_changes(files, checkpoint, {"x"}, True, "c") is False
    assert not (tmp_path / "ckpt" / "offsets").exists()


def test_an_unreadable_marker_counts_as_before_every_change(tmp_path):
    files, checkpoint = LocalStorage(), make_checkpoint(tmp_path / "ckpt")
    files.write_text(marker_location(checkpoint), "not json")
    assert read_marker(files, checkpoint) == set()
    assert checkpoint_follows_changes(files, checkpoint, {"x"}, True, "c") is False


def test_the_kinesis_spec_carries_the_shards_reset_to_earliest():
    from floeline.sources.kinesis.spec import Spec

    spec = Spec.parse(json.dumps({"streams": ["ev"], "earliest": ["ev/a"], "committed": {"ev/b": "5"}}))
    assert spec.earliest == frozenset({"ev/a"}) and spec.committed == {"ev/b": "5"}
    assert Spec.parse(json.dumps({"streams": ["ev"]})).earliest == frozenset()
