"""The Kinesis reader's pure logic: offsets, where shards start, which shards may be
read, batch limits, and the reading rules over a fake Kinesis (no service)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import botocore.exceptions
import pytest

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError
from floeline.sources.kinesis_reader import (
    ARROW_SCHEMA, TRIM_HORIZON, Budget, KinesisStreamReader, KRecord, Shard, ShardState, Spec,
    _Runtime, arrow_batch, decode_offset, encode_offset, merge_listing, readable, replay_ranges,
    resume_point, start_states)
from floeline.sources.kpl import UserRecord, aggregate
from pyspark.sql.pandas.types import to_arrow_schema
from floeline.sources.kinesis_reader import SCHEMA

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


# --- the reading rules over a fake Kinesis --------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FakeKinesis:
    """Shards as lists of records; iterators name a shard and an index. Counts what is
    fetched so tests can check nothing is read twice."""

    def __init__(self):
        self.shards: dict[str, dict] = {}
        self.fetched = 0
        self.iterator_calls = 0
        self.expire_next = False

    def add_shard(self, channel, parents=(), closed=False):
        self.shards[channel] = {"records": [], "parents": tuple(parents), "closed": closed}

    def put(self, channel, key, data, arrival_s=0):
        records = self.shards[channel]["records"]
        number = 49590338271490256608559692538361571095921575989136588898 + 10**30 * len(self.shards) \
            + 1000 * (len(records) + 1) + list(self.shards).index(channel)
        records.append({"SequenceNumber": str(number), "PartitionKey": key, "Data": data,
                        "ApproximateArrivalTimestamp": T0 + timedelta(seconds=arrival_s)})

    def list_shards(self, stream):
        return [Shard(ch, s["parents"]) for ch, s in self.shards.items() if ch.startswith(stream + "/")]

    def shard_iterator(self, channel, kind, value):
        self.iterator_calls += 1
        records = self.shards[channel]["records"]
        seqs = [int(r["SequenceNumber"]) for r in records]
        if kind == "TRIM_HORIZON":
            index = 0
        elif kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):  # trimmed: the oldest left
            after = kind == "AFTER_SEQUENCE_NUMBER"
            index = next((i for i, n in enumerate(seqs) if n > int(value) or (n == int(value) and not after)),
                         len(seqs))
        else:
            stamp = datetime.fromtimestamp(int(value) / 1000, timezone.utc)
            index = next((i for i, r in enumerate(records) if r["ApproximateArrivalTimestamp"] >= stamp),
                         len(records))
        return f"{channel}|{index}"

    def get_records(self, channel, iterator, limit):
        if self.expire_next:
            self.expire_next = False
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}, "GetRecords")
        name, index = iterator.split("|")
        shard = self.shards[name]
        index = int(index)
        out = shard["records"][index:index + limit]
        self.fetched += len(out)
        after = index + len(out)
        response = {"Records": out, "MillisBehindLatest": 0 if after == len(shard["records"]) else 1000}
        if not (shard["closed"] and after == len(shard["records"])):
            response["NextShardIterator"] = f"{name}|{after}"
        return response


def reader_on(fake: FakeKinesis, **kw) -> KinesisStreamReader:
    reader = KinesisStreamReader(spec(**kw))
    reader._runtime = _Runtime(reader.spec, fake)
    return reader


def run(reader: KinesisStreamReader, offset: dict, max_batches: int = 100) -> list[tuple[dict, dict, list[dict]]]:
    """(start, end, rows) of each batch until read() returns its start."""
    batches = []
    for _ in range(max_batches):
        it, end = reader.read(offset)
        rows = [row for batch in it for row in batch.to_pylist()]
        if end == offset:
            assert rows == [] and end is offset
            return batches
        batches.append((offset, end, rows))
        offset = end
    raise AssertionError("read() never caught up")


def test_every_record_once_within_limits_and_no_record_fetched_twice():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    fake.add_shard("s/1")
    for i in range(23):
        fake.put("s/0", f"k{i % 3}", b"a%d" % i)
    for i in range(5):
        fake.put("s/1", "k", b"b%d" % i)
    fake.put("s/1", "agg", aggregate([("u1", b"u" * 40), ("u2", b"v")]))
    reader = reader_on(fake, max_records=4, max_bytes=30)
    batches = run(reader, reader.initialOffset())
    rows = [r for _, _, b in batches for r in b]
    assert sorted(r["data"] for r in rows) == sorted([b"a%d" % i for i in range(23)]
                                                     + [b"b%d" % i for i in range(5)] + [b"u" * 40, b"v"])
    for _, _, batch in batches:
        for ch in ("s/0", "s/1"):
            part = [r for r in batch if r["channel"] == ch]
            assert len(part) <= 4 and (sum(len(r["data"]) for r in part) <= 30 or len({r["position"] for r in part}) == 1)
            assert [int(r["position"]) for r in part] == sorted(int(r["position"]) for r in part)
    agg = [r for r in rows if r["partitionKey"] in ("u1", "u2")]
    assert [r["subSequenceNumber"] for r in agg] == [0, 1] and len({r["position"] for r in agg}) == 1
    assert fake.fetched == 29 and fake.iterator_calls == 2  # fetched once; iterators reused


def test_replay_gives_the_rows_read_gave():
    fake = FakeKinesis()
    fake.add_shard("s/0", closed=True)
    fake.add_shard("s/1", parents=("s/0",))
    for i in range(7):
        fake.put("s/0", "k", b"p%d" % i)
        fake.put("s/1", "k", b"c%d" % i)
    fake.put("s/1", "agg", aggregate([("x", b"1"), ("y", b"2"), ("z", b"3")]))
    reader = reader_on(fake, max_records=3)
    batches = run(reader, reader.initialOffset())
    assert len(batches) >= 6
    for start, end, rows in batches:
        replayer = reader_on(fake, max_records=3)
        replayed = [r for b in replayer.readBetweenOffsets(start, end) for r in b.to_pylist()]
        assert replayed == rows


def test_children_after_their_parents_and_done_reported():
    fake = FakeKinesis()
    fake.add_shard("s/0", closed=True)
    fake.add_shard("s/1", parents=("s/0",), closed=True)
    fake.add_shard("s/2", parents=("s/0",), closed=True)
    fake.add_shard("s/3", parents=("s/1", "s/2"))
    for ch in fake.shards:
        for i in range(3):
            fake.put(ch, "k", f"{ch}-{i}".encode())
    reader = reader_on(fake, max_records=2)
    batches = run(reader, reader.initialOffset())
    batch_of = {}
    for n, (_, end, rows) in enumerate(batches):
        for r in rows:
            batch_of.setdefault(r["channel"], []).append(n)
    for child, parents in (("s/1", ["s/0"]), ("s/2", ["s/0"]), ("s/3", ["s/1", "s/2"])):
        assert min(batch_of[child]) > max(max(batch_of[p]) for p in parents)
    final = decode_offset(batches[-1][1])
    assert [final[c].done for c in ("s/0", "s/1", "s/2", "s/3")] == [True, True, True, False]


def test_shard_closing_after_its_last_record_gives_an_empty_batch_that_finishes_it():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    fake.put("s/0", "k", b"1")
    reader = reader_on(fake)
    (start, end, rows), = run(reader, reader.initialOffset())
    fake.shards["s/0"]["closed"] = True
    (_, end2, rows2), = run(reader, end)
    assert rows2 == [] and decode_offset(end2)["s/0"] == ShardState(decode_offset(end)["s/0"].p, None, True)


def test_expired_iterator_resumes_after_the_last_record_fetched():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    for i in range(6):
        fake.put("s/0", "k", b"%d" % i)
    reader = reader_on(fake, max_records=2)
    offset = reader.initialOffset()
    it, offset = reader.read(offset)
    fake.put("s/0", "k", b"6")
    fake.expire_next = True
    rows = [r["data"] for _, _, b in run(reader, offset) for r in b]
    assert [r["data"] for b in it for r in b.to_pylist()] + rows == [b"%d" % i for i in range(7)]


def test_available_now_stops_at_records_that_arrived_later():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    for i in range(5):
        fake.put("s/0", "k", b"%d" % i, arrival_s=i)
    reader = reader_on(fake, max_records=2)
    reader.cutoff_us = int((T0 + timedelta(seconds=2.5)).timestamp() * 1e6)
    rows = [r["data"] for _, _, b in run(reader, reader.initialOffset()) for r in b]
    assert rows == [b"0", b"1", b"2"]


def test_at_timestamp_start():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    for i in range(5):
        fake.put("s/0", "k", b"%d" % i, arrival_s=i)
    at_ms = int((T0 + timedelta(seconds=3)).timestamp() * 1000)
    reader = reader_on(fake, initial=f"AT_TIMESTAMP:{at_ms}")
    rows = [r["data"] for _, _, b in run(reader, reader.initialOffset()) for r in b]
    assert rows == [b"3", b"4"]


def test_replay_refuses_records_that_are_gone():
    fake = FakeKinesis()
    fake.add_shard("s/0")
    for i in range(4):
        fake.put("s/0", "k", b"%d" % i)
    reader = reader_on(fake, max_records=2)
    (s1, e1, _), (s2, e2, _) = run(reader, reader.initialOffset())
    del fake.shards["s/0"]["records"][:2]  # trimmed: the first batch's end is gone
    with pytest.raises(FloelineError, match="no longer in the stream"):
        list(reader_on(fake).readBetweenOffsets(s2, e2))


def test_prefetch_reads_the_next_batch_ahead_and_changes_no_row():
    import time

    def make():
        fake = FakeKinesis()
        fake.add_shard("s/0")
        for i in range(10):
            fake.put("s/0", "k", b"%d" % i)
        return fake

    fake = make()
    reader = reader_on(fake, max_records=3)
    offset = reader.initialOffset()
    it, end = reader.read(offset)
    deadline = time.monotonic() + 5
    while fake.fetched < 6:  # the next batch's 3 records, fetched in the background
        assert time.monotonic() < deadline, fake.fetched
        time.sleep(0.01)
    rows = [r["data"] for b in it for r in b.to_pylist()]
    rows += [r["data"] for _, _, b in run(reader, end) for r in b]
    plain = reader_on(make(), max_records=3, prefetch=False)
    assert rows == [r["data"] for _, _, b in run(plain, plain.initialOffset()) for r in b] == \
        [b"%d" % i for i in range(10)]
    assert fake.fetched == 10
