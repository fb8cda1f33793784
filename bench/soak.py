"""Memory soak (issue 11, item 4): a connector process fed a steady rate for a long time,
its memory sampled from /proc every minute; after warm-up the RSS must be flat.

1. Starts (or reuses) the local broker, makes a 4-partition topic, starts
   `floeline run CONFIG` as its own process (buffer.flush.time=5).
2. Produces --rate records/s (the same ~236-byte records as bench_ingest.py) for
   --minutes, and every --sample-s samples the RSS of the connector's process tree,
   split into the Python driver, the JVM and Spark's Python workers, with the rows
   committed so far (from the Delta log, no Spark).
3. Stops producing, waits until every record is in the table, stops the connector with
   SIGTERM (a clean stop) and fits a line through the samples after warm-up (the first
   --warmup-minutes, default a fifth of the run).

Last line: `minutes=N rate=R produced=N landed=N rss_first_mb=N rss_last_mb=N
slope_mb_per_h=S driver_slope_mb_per_h=S jvm_slope_mb_per_h=S workers_slope_mb_per_h=S`.
Run: `python bench/soak.py` (an hour); `--minutes 10` for a short look.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from bench_cold import _tree  # noqa: E402
from bench_ingest import record  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.warehouse import delta_log  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")
PARTITIONS = 4


def rss_by_kind(root: int) -> dict[str, float]:
    """MB of resident memory of `root`'s tree: the driver (root), the JVM, Python workers."""
    out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * _PAGE / 2**20
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        kind = "driver" if pid == root else "jvm" if command.endswith("java") else "workers"
        out[kind] += rss
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per hour."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var * 3600 if var else float("nan")


def producer(bootstrap: str, topic: str, rate: int, stop: threading.Event, counter: list[int]) -> None:
    """`rate` records a second, in ten slices a second, until `stop` (one producer:
    the soak measures the connector, not a client made ten times a second)."""
    from confluent_kafka import Producer

    client = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 2})
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        for i in range(sent, due):
            client.produce(topic, json.dumps(record(i)).encode(), partition=i % PARTITIONS)
            if i % 1000 == 0:
                client.poll(0)
        sent = max(sent, due)
        client.flush(10)
        counter[0] = sent
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--sample-s", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=None)
    args = parser.parse_args()
    warmup_s = 60 * (args.warmup_minutes if args.warmup_minutes is not None else args.minutes / 5)

    bootstrap = devkafka.start()
    topic = f"soak_{uuid.uuid4().hex[:8]}"
    devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
    work = tempfile.mkdtemp(prefix="floeline-soak-")
    warehouse = os.path.join(work, "warehouse")
    config = os.path.join(work, "soak.properties")
    with open(config, "w") as f:
        f.write("\n".join(["name=soak", f"topics={topic}", f"bootstrap.servers={bootstrap}",
                           f"floeline.warehouse={warehouse}", "buffer.flush.time=5",
                           "buffer.count.records=50000", f"snowflake.topic2table.map={topic}:SOAK"]) + "\n")
    table = os.path.join(warehouse, "FLOELINE", "PUBLIC", "SOAK")
    log = open(os.path.join(work, "connector.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", config], stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    stop, counter = threading.Event(), [0]
    thread = threading.Thread(target=producer, args=(bootstrap, topic, args.rate, stop, counter), daemon=True)
    started = time.monotonic()
    thread.start()
    samples: list[tuple[float, dict[str, float]]] = []
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.sample_s)
            if proc.poll() is not None:
                raise SystemExit(f"the connector exited ({proc.returncode}); see {log.name}")
            elapsed = time.monotonic() - started
            rss = rss_by_kind(proc.pid)
            samples.append((elapsed, rss))
            landed = delta_log.row_count(table) if delta_log.is_table(table) else 0
            print(f"t={elapsed / 60:5.1f}min produced={counter[0]} landed={landed} "
                  f"driver={rss['driver']:.0f}MB jvm={rss['jvm']:.0f}MB workers={rss['workers']:.0f}MB "
                  f"total={sum(rss.values()):.0f}MB", flush=True)
        stop.set()
        thread.join()
        produced = counter[0]
        deadline = time.monotonic() + 600
        landed = 0
        while time.monotonic() < deadline:
            landed = delta_log.row_count(table) or 0
            if landed >= produced:
                break
            time.sleep(2)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    steady = [(t, rss) for t, rss in samples if t >= warmup_s]
    slopes = {kind: slope_per_hour([(t, rss[kind]) for t, rss in steady]) for kind in ("driver", "jvm", "workers")}
    total = slope_per_hour([(t, sum(rss.values())) for t, rss in steady])
    first = sum(steady[0][1].values()) if steady else float("nan")
    last = sum(steady[-1][1].values()) if steady else float("nan")
    print(f"minutes={args.minutes:g} rate={args.rate} produced={produced} landed={landed} "
          f"rss_first_mb={first:.0f} rss_last_mb={last:.0f} slope_mb_per_h={total:.1f} "
          f"driver_slope_mb_per_h={slopes['driver']:.1f} jvm_slope_mb_per_h={slopes['jvm']:.1f} "
          f"workers_slope_mb_per_h={slopes['workers']:.1f}")
    return 0 if landed == produced else 1


if __name__ == "__main__":
    sys.exit(main())
