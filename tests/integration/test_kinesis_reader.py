"""The Kinesis data source against a local Kinesis (kinesis-local) and Spark: what each
micro-batch holds, replays of logged batches, resharding, KPL aggregates, errors.

Streams stay small: kinesis-local's PutRecords slows down quadratically with a shard's
size."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from floeline.errors import FloelineError, RetriesExhausted
from floeline.sources.kinesis import client as kinesis_client
from floeline.sources.kinesis.batches import SCHEMA
from floeline.sources.kinesis.kpl import aggregate
from floeline.sources.kinesis.offsets import decode_offset
from floeline.sources.kinesis.reader import KinesisDataSource, KinesisStreamReader
from floeline.sources.kinesis.spec import FORMAT, Spec

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kinesis(aws):
    import boto3

    return boto3.client("kinesis", endpoint_url=aws.kinesis_endpoint, region_name=aws.region,
                        aws_access_key_id=aws.access_key_id,
                        aws_secret_access_key=aws.secret_access_key)


@pytest.fixture(scope="module")
def spark_kinesis(spark):
    spark.dataSource.register(KinesisDataSource)
    return spark


def wait_active(kinesis, stream: str) -> None:
    deadline = time.monotonic() + 30
    while kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
        assert time.monotonic() < deadline, f"stream {stream} not ACTIVE"
        time.sleep(0.1)


@pytest.fixture
def make_stream(kinesis):
    def make(shards: int = 1) -> str:
        name = f"kr_{uuid.uuid4().hex[:10]}"
        kinesis.create_stream(StreamName=name, ShardCount=shards)
        wait_active(kinesis, name)
        return name
    return make


def put_all(kinesis, stream: str, records: list[tuple[str, bytes]]) -> list[dict]:
    """PutRecords in chunks; the (ShardId, SequenceNumber) of each record."""
    out = []
    for i in range(0, len(records), 100):
        chunk = [{"PartitionKey": k, "Data": d} for k, d in records[i:i + 100]]
        result = kinesis.put_records(StreamName=stream, Records=chunk)
        assert result.get("FailedRecordCount", 0) == 0
        out += result["Records"]
    return out


def make_spec(aws, streams, **extra) -> dict:
    spec = {"streams": list(streams) if not isinstance(streams, str) else [streams],
            "aws": {"region": aws.region, "access_key_id": aws.access_key_id,
                    "secret_access_key": aws.secret_access_key, "kinesis_endpoint": aws.kinesis_endpoint},
            "initial": {"type": "TRIM_HORIZON"}}
    spec.update(extra)
    return spec


def run_available_now(spark, spec: dict, checkpoint: Path, fail_batch: int | None = None):
    """Run a Trigger.AvailableNow query; [(batch id, rows as dicts in order)]. With
    `fail_batch`, foreachBatch raises on that batch (after recording its rows)."""
    batches = []

    def collect(df, batch_id):
        batches.append((batch_id, [r.asDict() for r in df.collect()]))
        if batch_id == fail_batch:
            raise RuntimeError("injected failure")

    query = (spark.readStream.format(FORMAT).option("spec", json.dumps(spec)).load()
             .writeStream.foreachBatch(collect).trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        if fail_batch is None:
            query.awaitTermination(120)
        else:
            with pytest.raises(Exception, match="injected failure"):
                query.awaitTermination(120)
    finally:
        query.stop()
    return batches


def logged_offsets(checkpoint: Path) -> dict[int, dict]:
    """The source's end offset of each batch in Spark's offset log."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            out[int(path.name)] = json.loads(path.read_text().splitlines()[2])
    return out


def rows_of(batches) -> list[dict]:
    return [r for _, rows in batches for r in rows]


def by_channel(rows: list[dict]) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for r in rows:
        out[r["channel"]].append(r)
    return out


def test_every_record_once_across_batches_within_limits(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(2)
    sent = [(f"key{i % 7}", b"r%03d" % i) for i in range(60)] + [("big", b"x" * 500)]
    put_all(kinesis, stream, sent)
    spec = make_spec(aws, stream, max_records_per_shard=7, max_bytes_per_shard=200)
    started = time.monotonic()
    batches = run_available_now(spark_kinesis, spec, tmp_path / "cp")
    elapsed = time.monotonic() - started
    rows = rows_of(batches)
    assert sorted(r["data"] for r in rows) == sorted(d for _, d in sent)  # every record, once
    assert len(batches) >= 5, elapsed
    for _, batch in batches:
        for channel, part in by_channel(batch).items():
            assert len(part) <= 7
            assert sum(len(r["data"]) for r in part) <= 200 or len(part) == 1  # the first always goes
    for channel, part in by_channel(rows).items():  # sequence order across batches
        assert [int(r["position"]) for r in part] == sorted(int(r["position"]) for r in part)
        assert all(r["position"] == r["sequenceNumber"] and r["subSequenceNumber"] is None for r in part)
        assert all(r["channel"] == f"{r['stream']}/{r['shardId']}" for r in part)
    last = logged_offsets(tmp_path / "cp")
    final = decode_offset(last[max(last)])
    assert {c: s.p for c, s in final.items()} == {c: part[-1]["position"] for c, part in by_channel(rows).items()}


def test_restart_from_committed_resumes_right_after(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(2)
    put = put_all(kinesis, stream, [(f"k{i}", b"%d" % i) for i in range(30)])
    shard_of = {f"{stream}/{r['ShardId']}" for r in put}
    assert len(shard_of) == 2
    # commit the 4th record of one shard; the other shard is finished
    first, second = sorted(shard_of)
    in_first = [(r["SequenceNumber"], i) for i, r in enumerate(put) if f"{stream}/{r['ShardId']}" == first]
    spec = make_spec(aws, stream, committed={first: in_first[3][0]}, finished=[second])
    rows = rows_of(run_available_now(spark_kinesis, spec, tmp_path / "cp"))
    assert [r["data"] for r in rows] == [b"%d" % i for _, i in in_first[4:]]


def test_replayed_batch_has_the_rows_read_gave(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(2)
    records = [(f"k{i % 5}", b"%d" % i) for i in range(25)]
    records += [(f"agg{j}", aggregate([(f"a{j}-{n}", b"%d-%d" % (j, n)) for n in range(4)])) for j in range(3)]
    put_all(kinesis, stream, records)
    spec = make_spec(aws, stream, max_records_per_shard=5)
    checkpoint = tmp_path / "cp"
    failed = run_available_now(spark_kinesis, spec, checkpoint, fail_batch=1)
    assert [b for b, _ in failed] == [0, 1]
    # Spark re-runs the logged batch 1 in a new runner: readBetweenOffsets in a worker
    rerun = run_available_now(spark_kinesis, spec, checkpoint)
    assert rerun[0][0] == 1 and rerun[0][1] == failed[1][1]
    batches = dict(failed[:1] + rerun)
    assert sorted(r["data"] for r in rows_of(sorted(batches.items()))) == sorted(
        [d for k, d in records if not k.startswith("agg")] + [b"%d-%d" % (j, n) for j in range(3) for n in range(4)])
    # ... and readBetweenOffsets of every logged batch, here, gives that batch's rows
    offsets = logged_offsets(checkpoint)
    offsets[-1] = KinesisStreamReader(Spec.parse(json.dumps(spec))).initialOffset()
    for batch_id, rows in batches.items():
        reader = KinesisStreamReader(Spec.parse(json.dumps(spec)))
        replayed = [r for b in reader.readBetweenOffsets(offsets[batch_id - 1], offsets[batch_id])
                    for r in b.to_pylist()]
        assert [(r["channel"], r["position"], r["subSequenceNumber"], r["data"]) for r in replayed] == \
            [(r["channel"], r["position"], r["subSequenceNumber"], r["data"]) for r in rows], batch_id


def check_reshard_order(batches, parents: dict[str, tuple[str, ...]]) -> None:
    """Per partition key the records come in the order they were written, and no
    child shard's row comes in a batch before its parents' last rows."""
    seen = defaultdict(list)
    batch_of = defaultdict(list)
    for n, (_, rows) in enumerate(batches):
        for r in rows:
            key, counter = r["data"].decode().split(":")
            seen[key].append(int(counter))
            batch_of[r["channel"]].append(n)
    for key, counters in seen.items():
        assert counters == sorted(counters), key
    for child, its_parents in parents.items():
        for parent in its_parents:
            if batch_of[child] and batch_of[parent]:
                assert min(batch_of[child]) > max(batch_of[parent]), (child, parent)


def test_split_and_merge_while_running_keep_order(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(1)
    counters = defaultdict(int)

    def write(n):
        for i in range(n):
            key = f"pk{i % 6}"
            counters[key] += 1
            kinesis.put_record(StreamName=stream, PartitionKey=key, Data=f"{key}:{counters[key]}".encode())

    batches, lock = [], threading.Lock()

    def collect(df, batch_id):
        rows = [r.asDict() for r in df.collect()]
        with lock:
            batches.append((batch_id, rows))

    def wait_rows(n):
        deadline = time.monotonic() + 90
        while sum(len(r) for _, r in list(batches)) < n:
            assert time.monotonic() < deadline, f"only {sum(len(r) for _, r in batches)} of {n} rows"
            time.sleep(0.2)

    write(20)
    spec = make_spec(aws, stream, max_records_per_shard=6)
    query = (spark_kinesis.readStream.format(FORMAT).option("spec", json.dumps(spec)).load()
             .writeStream.foreachBatch(collect).trigger(processingTime="500 milliseconds")
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        wait_rows(10)  # mid-stream: the split comes while the parent is being read
        kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                            NewStartingHashKey=str(2 ** 127))
        wait_active(kinesis, stream)
        write(20)
        wait_rows(25)
        kinesis.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000001",
                             AdjacentShardToMerge="shardId-000000000002")
        wait_active(kinesis, stream)
        write(20)
        wait_rows(60)
        time.sleep(1.5)  # nothing more may come
    finally:
        query.stop()
    assert sum(len(r) for _, r in batches) == 60
    ch = lambda n: f"{stream}/shardId-00000000000{n}"  # noqa: E731
    parents = {ch(1): (ch(0),), ch(2): (ch(0),), ch(3): (ch(1), ch(2))}
    check_reshard_order(batches, parents)
    assert {r["channel"] for _, rows in batches for r in rows} == {ch(n) for n in range(4)}
    offsets = logged_offsets(tmp_path / "cp")
    final = decode_offset(offsets[max(offsets)])
    assert [final[ch(n)].done for n in range(4)] == [True, True, True, False]

    # the same history read from scratch afterwards: closed shards first, then children
    again = run_available_now(spark_kinesis, make_spec(aws, stream, max_records_per_shard=4), tmp_path / "cp2")
    check_reshard_order(again, parents)
    assert sorted(r["data"] for r in rows_of(again)) == sorted(r["data"] for r in rows_of(batches))


def test_aggregated_records_one_row_per_user_record_never_split(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(1)
    sent = []
    for j in range(6):
        users = [(f"user{j}-{n}", b"%d.%d" % (j, n)) for n in range(10)]
        kinesis.put_record(StreamName=stream, PartitionKey=users[0][0], Data=aggregate(users))
        kinesis.put_record(StreamName=stream, PartitionKey=f"plain{j}", Data=b"plain%d" % j)
        sent.append(users)
    batches = run_available_now(spark_kinesis, make_spec(aws, stream, max_records_per_shard=15), tmp_path / "cp")
    rows = rows_of(batches)
    assert len(rows) == 66
    batch_of_position = defaultdict(set)
    for n, (_, batch) in enumerate(batches):
        assert len(batch) <= 15
        for r in batch:
            batch_of_position[r["position"]].add(n)
    assert all(len(b) == 1 for b in batch_of_position.values())  # never split across batches
    aggregated = [r for r in rows if r["subSequenceNumber"] is not None]
    for j, users in enumerate(sent):
        mine = [r for r in aggregated if r["partitionKey"].startswith(f"user{j}-")]
        assert [(r["partitionKey"], r["data"], r["subSequenceNumber"]) for r in mine] == \
            [(k, d, n) for n, (k, d) in enumerate(users)]
        assert len({r["sequenceNumber"] for r in mine}) == 1
    assert sorted(r["data"] for r in rows if r["subSequenceNumber"] is None) == [b"plain%d" % j for j in range(6)]


def test_at_timestamp_start(spark_kinesis, aws, kinesis, make_stream, tmp_path):
    stream = make_stream(2)
    put_all(kinesis, stream, [(f"k{i}", b"old%d" % i) for i in range(10)])
    time.sleep(0.3)
    at_ms = int(time.time() * 1000)
    time.sleep(0.3)
    put_all(kinesis, stream, [(f"k{i}", b"new%d" % i) for i in range(10)])
    spec = make_spec(aws, stream, initial={"type": "AT_TIMESTAMP", "timestamp_ms": at_ms})
    rows = rows_of(run_available_now(spark_kinesis, spec, tmp_path / "cp"))
    assert sorted(r["data"] for r in rows) == sorted(b"new%d" % i for i in range(10))


def test_available_now_takes_only_what_arrived_before_it_started(aws, kinesis, make_stream):
    stream = make_stream(1)
    put_all(kinesis, stream, [("k", b"%d" % i) for i in range(10)])
    reader = KinesisStreamReader(Spec.parse(json.dumps(make_spec(aws, stream, max_records_per_shard=4))))
    offset = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    time.sleep(0.05)
    put_all(kinesis, stream, [("k", b"late%d" % i) for i in range(3)])
    rows = []
    for _ in range(10):
        it, end = reader.read(offset)
        if end == offset:
            break
        rows += [r["data"] for b in it for r in b.to_pylist()]
        offset = end
    assert rows == [b"%d" % i for i in range(10)]
    # without AvailableNow: nothing new -> (empty, start) itself
    plain = KinesisStreamReader(Spec.parse(json.dumps(make_spec(aws, stream))))
    it, end = plain.read(offset)
    assert [r["data"] for b in it for r in b.to_pylist()] == [b"late%d" % i for i in range(3)]
    it, again = plain.read(end)
    assert again is end and list(it) == []


def test_missing_stream_is_a_clear_error(spark_kinesis, aws, tmp_path):
    spec = make_spec(aws, "no_such_stream_kr")
    with pytest.raises(FloelineError) as caught:
        KinesisStreamReader(Spec.parse(json.dumps(spec))).initialOffset()
    message = str(caught.value)
    for part in ("'no_such_stream_kr'", aws.region, aws.kinesis_endpoint, "kinesis.stream.name"):
        assert part in message
    with pytest.raises(Exception) as in_spark:  # the query fails with the same message
        run_available_now(spark_kinesis, spec, tmp_path / "cp")
    assert "does not exist" in str(in_spark.value) and "kinesis.stream.name" in str(in_spark.value)


def test_unreachable_endpoint_names_the_setting(aws, monkeypatch):
    monkeypatch.setattr(kinesis_client, "RETRY_BOUND_S", 1.0)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens
    spec = make_spec(aws, "orders")
    spec["aws"]["kinesis_endpoint"] = f"http://127.0.0.1:{port}"
    with pytest.raises(RetriesExhausted, match=f"kinesis.endpoint=http://127.0.0.1:{port}"):
        KinesisStreamReader(Spec.parse(json.dumps(spec))).initialOffset()


def test_schema_is_the_documented_one():
    assert SCHEMA.simpleString() == (
        "struct<channel:string,position:string,stream:string,shardId:string,sequenceNumber:string,"
        "subSequenceNumber:bigint,partitionKey:string,data:binary,approximateArrivalTimestamp:timestamp>")


# --- the reader driven directly (no Spark), against kinesis-local --------------------------

class CountingKinesis(kinesis_client.Kinesis):
    """The reader's real Kinesis calls, counted: what is fetched and how often an
    iterator is asked for."""

    def __init__(self, settings):
        super().__init__(settings)
        self.fetched, self.iterator_calls = 0, 0
        self.limits: list[int] = []  # each GetRecords' Limit

    def shard_iterator(self, channel, kind, value):
        self.iterator_calls += 1
        return super().shard_iterator(channel, kind, value)

    def get_records(self, channel, iterator, limit):
        self.limits.append(limit)
        response = super().get_records(channel, iterator, limit)
        self.fetched += len(response["Records"])
        return response


def direct_reader(aws, stream: str, **extra):
    """A reader over `stream` whose calls are counted (reader, counter)."""
    from floeline.sources.kinesis.reader import _Runtime

    reader = KinesisStreamReader(Spec.parse(json.dumps(make_spec(aws, stream, **extra))))
    counting = CountingKinesis(reader.spec.aws)
    reader._runtime = _Runtime(reader.spec, counting)
    return reader, counting


def read_until_caught_up(reader, offset: dict, max_batches: int = 50):
    """(start, end, rows) of each read() until it returns its start."""
    batches = []
    for _ in range(max_batches):
        it, end = reader.read(offset)
        rows = [row for batch in it for row in batch.to_pylist()]
        if end == offset:
            assert rows == []
            return batches
        batches.append((offset, end, rows))
        offset = end
    raise AssertionError("read() never caught up")


def test_each_record_is_fetched_once_and_iterators_are_reused(aws, kinesis, make_stream):
    stream = make_stream(2)
    put_all(kinesis, stream, [(f"k{i % 5}", b"r%03d" % i) for i in range(40)])
    reader, counting = direct_reader(aws, stream, max_records_per_shard=4, prefetch=False)
    batches = read_until_caught_up(reader, reader.initialOffset())
    rows = [r for _, _, b in batches for r in b]
    assert sorted(r["data"] for r in rows) == [b"r%03d" % i for i in range(40)]
    for _, _, batch in batches:
        for part in by_channel(batch).values():
            assert len(part) <= 4
            assert [int(r["position"]) for r in part] == sorted(int(r["position"]) for r in part)
    assert counting.fetched == 40  # every record fetched once
    assert counting.iterator_calls == 2  # one iterator per shard, then NextShardIterator
    # Each logged batch read again gives the same rows.
    for start, end, batch in batches:
        again, _ = direct_reader(aws, stream)
        assert [r for b in again.readBetweenOffsets(start, end) for r in b.to_pylist()] == batch


def test_a_replayed_batch_of_kpl_aggregates_fetches_about_one_batch(aws, kinesis, make_stream):
    # Found by bench/chaos_kinesis.py: a batch replayed after a SIGKILL asked for 10,000
    # Kinesis records per GetRecords, the whole backlog of 500-record aggregates, and
    # kinesis-local (which has no 10 MB cap) timed out until the connector stopped.
    stream = make_stream(1)
    put_all(kinesis, stream, [(f"a{n}", aggregate([(f"k{n}-{i}", b'{"i": %d}' % i) for i in range(50)]))
                              for n in range(40)])
    reader, _ = direct_reader(aws, stream, max_records_per_shard=100, prefetch=False)
    batches = read_until_caught_up(reader, reader.initialOffset())
    start, end, batch = batches[1]
    assert len(batch) == 100
    again, counting = direct_reader(aws, stream, max_records_per_shard=100)
    assert [r for b in again.readBetweenOffsets(start, end) for r in b.to_pylist()] == batch
    # The batch is 2 aggregates after the committed one: not the 37 left in the shard.
    assert counting.fetched <= 4 and max(counting.limits) <= 2, (counting.fetched, counting.limits)


def test_prefetch_reads_the_next_batch_ahead_and_changes_no_row(aws, kinesis, make_stream):
    stream = make_stream(1)
    put_all(kinesis, stream, [("k", b"%02d" % i) for i in range(12)])
    reader, counting = direct_reader(aws, stream, max_records_per_shard=3)
    offset = reader.initialOffset()
    first, end = reader.read(offset)
    deadline = time.monotonic() + 10
    while counting.fetched < 6:  # the next batch's records, fetched in the background
        assert time.monotonic() < deadline, counting.fetched
        time.sleep(0.02)
    rows = [r["data"] for b in first for r in b.to_pylist()]
    rows += [r["data"] for _, _, b in read_until_caught_up(reader, end) for r in b]
    assert rows == [b"%02d" % i for i in range(12)] and counting.fetched == 12


def test_a_shard_closed_after_its_last_record_is_finished_by_an_empty_batch(aws, kinesis, make_stream):
    stream = make_stream(1)
    put_all(kinesis, stream, [("k", b"1")])
    reader, _ = direct_reader(aws, stream)
    (_, end, rows), = read_until_caught_up(reader, reader.initialOffset())
    parent = kinesis.list_shards(StreamName=stream)["Shards"][0]
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"],
                        NewStartingHashKey=str(int(parent["HashKeyRange"]["EndingHashKey"]) // 2))
    wait_active(kinesis, stream)
    reader._runtime.refresh_listing = True
    batches = read_until_caught_up(reader, end)
    assert [r for _, _, b in batches for r in b] == []
    channel = f"{stream}/{parent['ShardId']}"
    final = decode_offset(batches[-1][1])
    assert final[channel].done and final[channel].p == decode_offset(end)[channel].p
