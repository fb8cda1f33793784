"""A producer at a steady rate in a process of its own, for the benchmarks that measure
lag or latency while a connector runs (bench_steady.py, bench_ingest.py's latency runs).

Why a process: a producer thread beside the connector's driver shares its Python
interpreter lock, and while a batch ran on the driver it sent a fraction of its rate,
then caught up in a burst (records late to the broker, a lag that was the benchmark's).
Why one client for the whole run: a new client per tick connects and fetches metadata
before its first send, time the records' CreateTime counts but no real producer pays."""

from __future__ import annotations

import json
import multiprocessing
import time


class SteadyProducer:
    """`rate` records/s over `topics`, round-robin, in ticks of 0.1 s, until stopped.
    `make_record(n)` gives the n-th record's value (a dict, sent as JSON); `linger_ms`:
    the client's linger.ms."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int, make_record, linger_ms: int = 20):
        context = multiprocessing.get_context("spawn")
        self._sent = context.Value("q", 0)
        self.stopping = context.Event()
        self.process = context.Process(
            target=produce_steadily,
            args=(bootstrap, topics, rate, make_record, linger_ms, self._sent, self.stopping), daemon=True)

    @property
    def sent(self) -> int:
        """Records the broker acknowledged (set when the process ends)."""
        return self._sent.value

    def start(self) -> None:
        self.process.start()

    def stop(self, timeout: float = 60) -> None:
        """Stop producing, wait until every record is delivered (or `timeout`)."""
        self.stopping.set()
        self.process.join(timeout)


def produce_steadily(bootstrap: str, topics: list[str], rate: int, make_record, linger_ms: int,
                     sent, stopping) -> None:
    """The producer process's loop: its count in `sent` once the broker has each record."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
    tick, per_tick, n = time.time(), max(1, rate // 10), 0
    started, window = tick, {"end": tick + 10, "max": 0.0, "acked": 0}

    def delivered(sent_at: float):
        """The delivery time (send to the broker's ack) of a record, the worst per 10 s
        printed: records late to the broker are the machine's lag, not the connector's."""
        def report(err, _msg) -> None:
            if err is None:
                window["max"] = max(window["max"], time.time() - sent_at)
                window["acked"] += 1
        return report

    while not stopping.is_set():
        for _ in range(per_tick):
            while True:
                try:
                    producer.produce(topics[n % len(topics)], json.dumps(make_record(n)).encode(),
                                     on_delivery=delivered(time.time()))
                    break
                except BufferError:  # the client's queue is full (the broker is behind): wait
                    producer.poll(0.1)
            n += 1
        producer.poll(0)
        if time.time() >= window["end"]:
            print(f"producer t={time.time() - started:6.1f}s: {window['acked']} acked in 10 s, "
                  f"slowest delivery {window['max']:.1f}s", flush=True)
            window.update(end=window["end"] + 10, max=0.0, acked=0)
        tick += 0.1
        time.sleep(max(0.0, tick - time.time()))
    if producer.flush(30):
        raise SystemExit("the steady producer could not deliver every record in 30 s")
    sent.value = n
