"""Snowpipe Streaming channels' figures (issue 56 item 4), all in one run of one worker
(Herder + channels + REST server on a free port in this process and its Spark session,
what `floeline worker` starts), on bench_ingest.py's ~236-byte records and the same
buffer settings (--flush-time, --count-records) for channels and Kafka connector:

1. kafka_1: --rows records produced to a 1-partition topic, then one Kafka connector
   POSTed; rows/s from the POST until its table holds them all.
2. channel_1: one channel appends --rows rows in batches of --batch rows (NDJSON,
   floeline.streaming's client) as fast as the worker takes them; rows/s from the first
   append until the table holds them all. Ratio channel_1 / kafka_1 (goal >= 0.8).
3. kafka_10 / channel_10: the same with a 10-partition topic and with --channels
   channels on one table (one thread each, --rows in all).
4. latency: one channel at buffer.flush.time=1 appends --latency-batch rows every 0.1 s
   for --latency-seconds; append -> committed (the channel's committed offset token,
   polled every 20 ms) p50 and max.
5. idle: --idle-channels channels opened on one table, nothing appended; the worker
   process tree's RSS (JVM included) before and after they are open.

Last line: kafka_1_rows_per_s=N channel_1_rows_per_s=N ratio_1=R kafka_10_rows_per_s=N
channel_10_rows_per_s=N ratio_10=R latency_p50_s=N latency_max_s=N rss_before_idle_mb=N
rss_idle_channels_mb=N idle_channels=N

    .venv/bin/python bench/bench_channels.py                      # the full run (lead only)
    .venv/bin/python bench/bench_channels.py --rows 4000 --channels 2 --idle-channels 5 \\
        --latency-seconds 3                                       # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_cold import _cpu_and_rss, _tree  # noqa: E402
from bench_ingest import record  # noqa: E402
from bench_scale import produce_spread  # noqa: E402
from bench_worker import rest, table_log, wait_for_rows  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.streaming import StreamingIngestClient  # noqa: E402


def start_worker(spark, work: str, bootstrap: str, flush_time: int, count_records: int):
    """What `floeline worker` starts, with the channels' buffers set like the connectors':
    (REST base URL, closer)."""
    from floeline.warehouse.catalog import Warehouse
    from floeline.worker.channels import ChannelService
    from floeline.worker.herder import Herder
    from floeline.worker.process import rest_server
    from floeline.worker.settings import load_worker_settings
    from floeline.worker.store import ConnectorStore

    props = os.path.join(work, "worker.properties")
    with open(props, "w") as f:
        f.write(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={work}/warehouse\n"
                f"floeline.checkpoint.dir={work}/checkpoints\nbootstrap.servers={bootstrap}\n"
                f"floeline.streaming.buffer.flush.time={flush_time}\n"
                f"floeline.streaming.buffer.count.records={count_records}\n")
    settings = load_worker_settings(props)
    warehouse = Warehouse(settings.warehouse, settings.warehouse_s3)
    herder = Herder(spark, settings, ConnectorStore(warehouse.storage, warehouse.location), out=sys.stderr)
    channels = ChannelService(spark, settings, out=sys.stderr, batch_slots=herder.batch_slots)
    server = rest_server(settings, herder, channels).start()
    herder.start()

    def close() -> None:
        server.close()
        channels.close()
        herder.close()

    return server.url, close


def ndjson(first: int, count: int) -> bytes:
    return "".join(json.dumps(record(i)) + "\n" for i in range(first, first + count)).encode()


def kafka_case(base: str, warehouse: str, bootstrap: str, name: str, partitions: int, rows: int,
               flush_time: int, count_records: int) -> float:
    """rows/s of one Kafka connector on a topic holding `rows` records."""
    topic = f"{name}_{int(time.time())}_{random.randint(0, 999)}"
    devkafka.create_topic(bootstrap, topic, partitions=partitions)
    produce_spread(bootstrap, [topic], rows)
    started = time.time()
    status, body = rest(base, "POST", "/connectors", {"name": topic, "config": {
        "topics": topic, "buffer.flush.time": str(flush_time), "buffer.count.records": str(count_records),
        "snowflake.enable.schematization": "true"}})
    assert status == 201, body
    wait_for_rows([table_log(warehouse, topic)], rows)
    seconds = time.time() - started
    rest(base, "DELETE", f"/connectors/{topic}")
    return rows / seconds


def channel_case(base: str, warehouse: str, table: str, channels: int, rows: int, batch: int) -> float:
    """rows/s of `channels` channels on one table appending `rows` rows in all."""
    bodies = []
    per = rows // channels
    for c in range(channels):
        first = c * per
        bodies.append([(ndjson(first + i, min(batch, per - i)), first + min(per, i + batch) - 1)
                       for i in range(0, per, batch)])
    errors: list[BaseException] = []

    def send(c: int) -> None:
        try:
            client = StreamingIngestClient("bench", "FLOELINE", "PUBLIC", f"{table}-STREAMING", {"url": base})
            channel, _ = client.open_channel(f"c{c:03d}")
            for body, token in bodies[c]:
                channel.append_ndjson(body, token)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    started = time.time()
    threads = [threading.Thread(target=send, args=(c,)) for c in range(channels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    wait_for_rows([table_log(warehouse, table)], per * channels)
    return per * channels / (time.time() - started)


def latency_case(base: str, table: str, seconds: float, batch: int) -> tuple[float, float]:
    """append -> committed p50 and max (s) of one channel appending every 0.1 s."""
    client = StreamingIngestClient("bench", "FLOELINE", "PUBLIC", f"{table}-STREAMING", {"url": base})
    channel, _ = client.open_channel("latency")
    poller = StreamingIngestClient("poll", "FLOELINE", "PUBLIC", f"{table}-STREAMING", {"url": base})
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        last = -1
        while not done.is_set() or last < max(sent, default=-1):
            token = poller.get_latest_committed_offset_tokens(["latency"])["latency"]
            now = time.time()
            if token is not None and int(token) > last:
                for t in sent:
                    if last < t <= int(token):
                        seen[t] = now
                last = int(token)
            time.sleep(0.02)

    watcher = threading.Thread(target=poll)
    watcher.start()
    first, end = 0, time.time() + seconds
    while time.time() < end:
        token = first + batch - 1
        sent[token] = time.time()
        channel.append_ndjson(ndjson(first, batch), token)
        first += batch
        time.sleep(0.1)
    done.set()
    watcher.join(120)
    waits = [seen[t] - sent[t] for t in sent if t in seen]
    return statistics.median(waits), max(waits)


def idle_case(base: str, table: str, count: int) -> tuple[float, float]:
    """The process tree's RSS (MB) before and after `count` channels are opened."""
    def rss_mb() -> float:
        time.sleep(2)
        return _cpu_and_rss(_tree(os.getpid()))[1] / 2 ** 20
    before = rss_mb()
    client = StreamingIngestClient("bench", "FLOELINE", "PUBLIC", f"{table}-STREAMING", {"url": base})
    for c in range(count):
        client.open_channel(f"idle{c:03d}")
    return before, rss_mb()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per append")
    parser.add_argument("--flush-time", type=int, default=1, help="buffer.flush.time of both")
    parser.add_argument("--count-records", type=int, default=100_000, help="buffer.count.records of both")
    parser.add_argument("--latency-seconds", type=float, default=30)
    parser.add_argument("--latency-batch", type=int, default=100)
    parser.add_argument("--idle-channels", type=int, default=100)
    args = parser.parse_args()

    from floeline.spark import get_spark

    bootstrap = devkafka.start()
    spark = get_spark()
    work = tempfile.mkdtemp(prefix="bench_channels_")
    warehouse = f"{work}/warehouse"
    base, close = start_worker(spark, work, bootstrap, args.flush_time, args.count_records)
    stamp = random.randint(0, 99999)
    try:
        # Warm-up: Spark's first jobs and a first table, not measured.
        channel_case(base, warehouse, f"WARM_{stamp}", 1, min(args.rows, 2000), args.batch)
        result = {
            "kafka_1": kafka_case(base, warehouse, bootstrap, "k1", 1, args.rows, args.flush_time, args.count_records),
            "channel_1": channel_case(base, warehouse, f"C1_{stamp}", 1, args.rows, args.batch),
            "kafka_10": kafka_case(base, warehouse, bootstrap, "k10", args.channels, args.rows, args.flush_time,
                                   args.count_records),
            "channel_10": channel_case(base, warehouse, f"C10_{stamp}", args.channels, args.rows, args.batch),
        }
        p50, worst = latency_case(base, f"LAT_{stamp}", args.latency_seconds, args.latency_batch)
        before, idle = idle_case(base, f"IDLE_{stamp}", args.idle_channels)
    finally:
        close()
    print(f"kafka_1_rows_per_s={result['kafka_1']:.0f} channel_1_rows_per_s={result['channel_1']:.0f} "
          f"ratio_1={result['channel_1'] / result['kafka_1']:.2f} "
          f"kafka_10_rows_per_s={result['kafka_10']:.0f} channel_10_rows_per_s={result['channel_10']:.0f} "
          f"ratio_10={result['channel_10'] / result['kafka_10']:.2f} latency_p50_s={p50:.2f} "
          f"latency_max_s={worst:.2f} rss_before_idle_mb={before:.0f} rss_idle_channels_mb={idle:.0f} "
          f"idle_channels={args.idle_channels}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
