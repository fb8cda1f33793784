"""The Kinesis reader's pure logic: offsets, where shards start, which shards may be
read, batch limits (no service; the reading rules run against kinesis-local in
tests/integration/test_kinesis_reader.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError
from floeline.sources.kinesis.batches import ARROW_SCHEMA, SCHEMA, Budget, KRecord, arrow_batch
from floeline.sources.kinesis.kpl import UserRecord
from floeline.sources.kinesis.offsets import (
    Shard, ShardState, decode_offset, encode_offset, merge_listing, readable, replay_ranges,
    resume_point, start_states)
from floeline.sources.kinesis.spec import TRIM_HORIZON, Spec
from pyspark.sql.pandas.types import to_arrow_schema

SEQ = "49590338271490256608559692538361571095921575989136588898"


def spec(**kw) -> Spec:
    base = dict(streams=("s",), aws=AwsSettings(region="us-east-1"))
    base.update(kw)
    return Spec(**base)


# --- offsets ------------------------------------------------------------------------------

def test_offset_round_trip_and_layout():
    states = {"s/shardId-000000000001": ShardState(None, "AT_TIMESTAMP:1763800000000", False),
              "s/shardId-000000000000": ShardState(SEQ, None, False),
              "s/shardId-000000000002": ShardState(None, TRIM_HORIZON, True)}
    offset = encode_offset(states)
    assert json.dumps(offset) == (
        '{"shards": {"s/shardId-000000000000": {"done": false, "p": "' + SEQ + '"}, '
        '"s/shardId-000000000001": {"done": false, "from": "AT_TIMESTAMP:1763800000000", "p": null}, '
        '"s/shardId-000000000002": {"done": true, "from": "TRIM_HORIZON", "p": null}}, "v": 1}')
    assert decode_offset(offset) == states
    assert decode_offset(json.dumps(offset)) == states
    assert json.dumps(encode_offset(decode_offset(json.loads(json.dumps(offset))))) == json.dumps(offset)


def test_offset_of_another_version_is_refused():
    with pytest.raises(FloelineError, match="version 1"):
        decode_offset({"v": 2, "shards": {}})


def test_resume_point():
    assert resume_point(ShardState(SEQ, None)) == ("AFTER_SEQUENCE_NUMBER", SEQ)
    assert resume_point(ShardState(None, TRIM_HORIZON)) == ("TRIM_HORIZON", None)
    assert resume_point(ShardState(None, "AT_TIMESTAMP:17")) == ("AT_TIMESTAMP", "17")


# --- where shards start -------------------------------------------------------------------

def test_start_rule():
    shards = [Shard("s/0"), Shard("s/1"), Shard("s/2"),
              Shard("s/3", ("s/0",)), Shard("s/4", ("s/1", "s/2")), Shard("s/5"),
              Shard("s/6", ("s/gone",)), Shard("s/7", ("s/5",))]
    committed = {"s/0": SEQ, "s/gone": "5"}
    finished = frozenset({"s/2"})
    states = start_states(shards, committed, finished, "AT_TIMESTAMP:1763800000000")
    assert states["s/0"] == ShardState(SEQ, None, False)           # right after its position
    assert states["s/2"] == ShardState(None, TRIM_HORIZON, True)    # finished: never read
    assert states["s/1"] == ShardState(None, "AT_TIMESTAMP:1763800000000", False)
    assert states["s/3"] == ShardState(None, TRIM_HORIZON, False)   # parent committed
    assert states["s/4"] == ShardState(None, TRIM_HORIZON, False)   # adjacent parent finished
    assert states["s/6"] == ShardState(None, TRIM_HORIZON, False)   # unlisted parent committed
    assert states["s/5"].start == states["s/7"].start == "AT_TIMESTAMP:1763800000000"


def test_start_rule_descendants_and_ancestors_of_committed_shards():
    shards = [Shard("s/0"), Shard("s/1", ("s/0",)), Shard("s/2", ("s/1",)), Shard("s/3", ("s/2",))]
    states = start_states(shards, {"s/1": SEQ}, frozenset(), "AT_TIMESTAMP:1")
    assert states["s/0"] == ShardState(None, TRIM_HORIZON, True)   # read before s/1: done
    assert states["s/2"] == ShardState(None, TRIM_HORIZON, False)
    assert states["s/3"] == ShardState(None, TRIM_HORIZON, False)  # grandchild: all new to us
    finished = start_states(shards, {"s/1": SEQ}, frozenset({"s/1"}), "TRIM_HORIZON")
    assert finished["s/1"] == ShardState(SEQ, None, True)


# --- which shards may be read ---------------------------------------------------------------

def test_child_waits_for_listed_parents():
    shards = [Shard("s/0"), Shard("s/1"), Shard("s/2", ("s/0", "s/1")), Shard("s/3", ("s/expired",))]
    states = {"s/0": ShardState("1", None, True), "s/1": ShardState("2", None, False),
              "s/2": ShardState(None), "s/3": ShardState(None)}
    assert readable(states, shards) == ["s/1", "s/3"]
    states["s/1"] = ShardState("2", None, True)
    assert readable(states, shards) == ["s/2", "s/3"]


def test_merge_listing_adds_new_shards_at_trim_horizon_and_drops_expired():
    states = {"s/0": ShardState("1", None, True), "s/1": ShardState("2", None, False)}
    shards = [Shard("s/1"), Shard("s/2", ("s/1",)), Shard("t/0")]
    merged = merge_listing(states, shards, spec(streams=("s", "t"), initial="AT_TIMESTAMP:9",
                                                committed={"t/0": "7"}))
    assert merged == {"s/1": ShardState("2", None, False), "s/2": ShardState(None, TRIM_HORIZON, False),
                      "t/0": ShardState("7", None, False)}  # a stream new to the offset: the start rule
    merged = merge_listing(states, shards[:2] + [Shard("t/1")], spec(streams=("s", "t"), initial="AT_TIMESTAMP:9"))
    assert merged["t/1"] == ShardState(None, "AT_TIMESTAMP:9", False)


def test_replay_ranges():
    start = {"s/0": ShardState("10", None), "s/1": ShardState(None, "AT_TIMESTAMP:5"),
             "s/2": ShardState("7", None)}
    end = {"s/0": ShardState("20", None), "s/1": ShardState("9", None),
           "s/2": ShardState("7", None, True), "s/3": ShardState("100", None)}
    assert replay_ranges(start, end) == [("s/0", start["s/0"], "20"), ("s/1", start["s/1"], "9"),
                                         ("s/3", ShardState(None, TRIM_HORIZON, False), "100")]
    with pytest.raises(FloelineError, match="backwards"):
        replay_ranges({"s/0": ShardState("20", None)}, {"s/0": ShardState("9", None)})


# --- limits and rows ----------------------------------------------------------------------

def krec(seq: str, count: int = 1, size: int = 10) -> KRecord:
    return KRecord(seq, 0, "k", b"", None, count, size)


def test_budget():
    budget = Budget(max_records=5, max_bytes=100)
    assert budget.admits(krec("1", count=50, size=1000))  # the first record is always taken
    budget.add(krec("1", count=3, size=10))
    assert budget.admits(krec("2", count=2)) and not budget.admits(krec("2", count=3))
    assert not budget.admits(krec("2", size=91))
    assert budget.fetch_limit() == 2
    budget.add(krec("2", count=2))
    assert budget.full()
    assert Budget(20000, 10).fetch_limit() == 10000
    # KPL aggregates of 200 user records: GetRecords asks for what the batch can take.
    assert Budget(10000, 10 ** 9).fetch_limit(users_per_record=200) == 50
    assert Budget(10000, 10 ** 9).fetch_limit(users_per_record=0.5) == 10000


def test_arrow_batch_rows_and_schema():
    users = [UserRecord("a", None, b"x"), UserRecord("b", "1", b"yz")]
    records = [KRecord("5", 1_700_000_000_123_000, "p", b"plain", None, 1, 5),
               KRecord("6", 1_700_000_000_456_000, "agg", b"...", users, 2, 3)]
    batch = arrow_batch("s/shardId-000000000000", records)
    assert batch.schema.equals(to_arrow_schema(SCHEMA, timezone="UTC")) and batch.schema.equals(ARROW_SCHEMA)
    rows = batch.to_pylist()
    assert [(r["position"], r["sequenceNumber"], r["subSequenceNumber"], r["partitionKey"], r["data"])
            for r in rows] == [("5", "5", None, "p", b"plain"), ("6", "6", 0, "a", b"x"), ("6", "6", 1, "b", b"yz")]
    assert {r["channel"] for r in rows} == {"s/shardId-000000000000"}
    assert {(r["stream"], r["shardId"]) for r in rows} == {("s", "shardId-000000000000")}
    assert rows[0]["approximateArrivalTimestamp"] == datetime(2023, 11, 14, 22, 13, 20, 123000, timezone.utc)


def test_spec_parse():
    parsed = Spec.parse(json.dumps({"streams": ["orders"], "aws": {"region": "us-east-1"},
                                    "committed": {"orders/shardId-000000000000": SEQ},
                                    "finished": ["orders/shardId-000000000002"],
                                    "initial": {"type": "AT_TIMESTAMP", "timestamp_ms": 1763800000000},
                                    "max_records_per_shard": 10, "max_bytes_per_shard": 99}))
    assert parsed.initial == "AT_TIMESTAMP:1763800000000" and parsed.max_records == 10
    assert parsed.finished == {"orders/shardId-000000000002"}
    with pytest.raises(ConfigError, match="LATEST"):
        Spec.parse(json.dumps({"streams": ["o"], "initial": {"type": "LATEST"}}))
    with pytest.raises(ConfigError, match="streams"):
        Spec.parse(json.dumps({"streams": []}))
    with pytest.raises(ConfigError, match="not sequence numbers"):
        Spec.parse(json.dumps({"streams": ["o"], "committed": {"o/x": "12a"}}))
