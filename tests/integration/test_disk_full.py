"""The warehouse's disk fills up mid-stream (issue 11, item 3): the connector stops
with a clear error, nothing is half-committed, and once space is freed a restart
completes exactly once. The warehouse is a size-limited tmpfs mount, which needs root
(CI and the dev machine run as root)."""

from __future__ import annotations

import base64
import os
import subprocess

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import StorageFull
from floeline.sources.kafka import produce
from floeline.warehouse.tables import read_declared

from test_exactly_once import assert_exactly_once, coordinates

pytestmark = pytest.mark.integration

RECORDS, PARTITIONS = 4000, 2


def _mount_tmpfs(path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"needs root to mount a small tmpfs: {done.stderr.strip()}")


def _resize(path, size_mb: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_mb}m", str(path)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    _mount_tmpfs(mount, 8)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_stops_cleanly_and_a_restart_completes_exactly(kafka, topic_name, small_disk, make_config,
                                                                 run_connector, spark):
    topic = topic_name("diskfull")
    devkafka.create_topic(kafka, topic, partitions=PARTITIONS)
    # ~4 KB of incompressible text per record: ~16 MB of Parquet, twice the disk
    produce(kafka, topic, [{"value": {"n": i, "blob": base64.b64encode(os.urandom(3000)).decode()},
                            "partition": i % PARTITIONS} for i in range(RECORDS)])
    warehouse = str(small_disk / "wh")
    config = make_config(topics=topic, floeline__warehouse=warehouse, buffer__count__records=250)
    with pytest.raises(StorageFull) as raised:
        run_connector(config)
    message = str(raised.value)
    assert "No space left on device" in message and "Free space there" in message, message
    assert "JVM stacktrace" not in message, message  # (the table's write, or its checkpoint's)

    # Nothing half-committed: the table reads, and what it holds is a clean prefix of
    # each partition (whole batches), never a row twice.
    table = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    held = coordinates(read_declared(spark, table))
    assert 0 < len(held) < RECORDS and len(held) == len(set(held))
    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in held if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} has a gap"

    _resize(small_disk, 256)  # space freed: the same connector completes, exactly once
    run_connector(config)
    assert_exactly_once(read_declared(spark, table),
                        {p: RECORDS // PARTITIONS for p in range(PARTITIONS)})
