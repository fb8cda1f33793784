"""A channel batch's rows as Spark splits them from whole append bodies: each row's
position is row_position(its append's token, its index), in the layout ChannelSource
reads, whatever the tokens (0, ordinary, beyond 64 bits) and however many appends."""

from __future__ import annotations

import json

import pytest

from floeline.ingest.channel_batches import Append, ndjson_batch, rows_of_appends
from floeline.sources.channels import SCHEMA, row_position


def _append(token: int, values: list[dict], received: float = 1_765_000_000.25) -> Append:
    raw = "\n\n".join(json.dumps(v) for v in values).encode() + b"\r\n"
    body, rows = ndjson_batch(raw)
    return Append(token, body, rows, len(raw), received)


def test_rows_of_appends_split_bodies_into_rows_at_their_positions(spark):
    big = 10 ** 40 + 7
    appends = [
        ("a", _append(0, [{"n": i} for i in range(3)])),
        ("a", _append(5, [{"n": "x\u00e9\\n"}, {"n": [1, {"m": None}]}])),
        ("b", _append(big, [{"n": i} for i in range(12)])),
        ("b", _append(big + 1, [{"n": -1}])),
    ]
    df = rows_of_appends(spark, "T1", appends)
    assert [f.name for f in df.schema.fields] == [c.split()[0] for c in SCHEMA.split(", ")]
    got = [(r["channel"], r["position"], r["route"], r["key"], json.loads(bytes(r["value"])))
           for r in df.collect()]
    want = [(name, row_position(append.token, i), "T1", None, json.loads(line))
            for name, append in appends for i, line in enumerate(append.body.split(b"\n"))]
    assert sorted(got, key=str) == sorted(want, key=str)
    assert len(got) == 18
    stamps = {r["timestamp"].timestamp() for r in df.select("timestamp").collect()}
    assert stamps == {1_765_000_000.25}


def test_a_batch_of_many_appends_is_read_in_the_read_tasks_limit(spark):
    from floeline.ingest.read_tasks import read_task_limit

    appends = [(f"c{i % 3}", _append(i, [{"i": i, "k": k} for k in range(50)])) for i in range(40)]
    df = rows_of_appends(spark, "T1", appends)
    assert 1 < df.rdd.getNumPartitions() <= read_task_limit(spark)
    assert df.count() == 2000


def _table_channels(make_config, spark, tmp_path, **kwargs):
    from floeline.ingest.channel_batches import TableChannels

    config = make_config(**{"snowflake.enable.schematization": "true", "errors.tolerance": "all",
                            "snowflake.ingestion.method": "SNOWPIPE_STREAMING", "buffer.flush.time": "600",
                            "floeline.checkpoint.dir": str(tmp_path / "checkpoints")})
    return TableChannels(config, spark, "CHANNEL_ROWS", **kwargs)


def test_the_buffer_holds_buffer_size_bytes_for_each_open_channel(make_config, spark, tmp_path):
    from floeline.ingest.channel_batches import BufferFull

    table = _table_channels(make_config, spark, tmp_path)
    try:
        size = table.config.size_bytes
        assert table.buffer_limit() == max(4 * size, 64 * 1024 * 1024)
        for c in range(6):
            table.open(f"c{c}")
        assert table.buffer_limit() == max(6 * size, 64 * 1024 * 1024)
    finally:
        table.close(flush=False)
    small = _table_channels(make_config, spark, tmp_path, max_buffer_bytes=1000)
    try:
        state = small.open("c")
        small.append("c", state.continuation, 1, *ndjson_batch(b'{"a": "' + b"x" * 600 + b'"}'), 610)
        with pytest.raises(BufferFull, match="try again"):
            small.append("c", state.continuation, 2, *ndjson_batch(b'{"a": "' + b"y" * 600 + b'"}'), 610)
        assert small.state("c").last_token == 1  # the refused append left nothing behind
    finally:
        small.close(flush=False)


def test_a_large_buffer_is_cut_into_slices_of_at_most_max_slice_bytes():
    from floeline.ingest.channel_batches import MAX_SLICE_BYTES, appends_in_slices

    appends = [(f"c{i % 3}", Append(i, b"{}", 1, 16 * 1024 * 1024, 0.0)) for i in range(200)]  # 3.2 GB
    slices = appends_in_slices(appends, min(3.2e9 / 4, MAX_SLICE_BYTES))
    assert [a for part in slices for a in part] == appends  # every append once, in order
    assert max(sum(a.size for _, a in part) for part in slices) <= MAX_SLICE_BYTES + 16 * 1024 * 1024 < 2 ** 31
    assert len(slices) == 7
