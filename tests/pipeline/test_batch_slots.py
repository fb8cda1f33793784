"""A worker's batch slots (floeline.worker.batch.slots) over the memory source: a
connector's micro-batch waits for a free slot before it reads or writes anything."""

from __future__ import annotations

import json
import threading

import pytest

pytestmark = pytest.mark.integration


class WatchedSlots(threading.BoundedSemaphore):
    """The worker's semaphore, telling the test when a batch asks for a slot."""

    def __init__(self, value: int):
        super().__init__(value)
        self.asked = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.asked.set()
        return super().acquire(blocking, timeout)

    __enter__ = acquire


def test_a_batch_waits_for_a_free_slot_and_then_writes_everything(spark, memory_log, make_config, read_table):
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    memory_log.append("orders/0", "orders", [json.dumps({"n": i}).encode() for i in range(5)])
    config = make_config()
    slots = WatchedSlots(1)
    slots.acquire()  # another connector's batch holds the only slot
    slots.asked.clear()
    connector = Connector(config, spark, source=MemorySource(config, memory_log), batch_slots=slots)
    runner = threading.Thread(target=connector.run, kwargs={"until_caught_up": True}, daemon=True)
    runner.start()

    assert slots.asked.wait(120), "the connector's batch never asked for a slot"
    runner.join(2)
    assert runner.is_alive() and not connector.reports  # waiting: nothing written
    slots.release()
    runner.join(120)
    assert not runner.is_alive()
    assert sorted(r["n"] for r in read_table("ORDERS").select("n").collect()) == [0, 1, 2, 3, 4]
    assert slots.acquire(blocking=False)  # its slot given back after the batch
