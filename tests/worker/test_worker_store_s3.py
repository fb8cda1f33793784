"""The worker's store and lease on an S3 warehouse (moto's server), through the same
storage seam tables use: records round-trip, the lease refuses a second worker and
is taken over once stale."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import pytest

from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore, WorkerLease, WorkerRunning
from worker_services import aws  # noqa: F401

pytestmark = pytest.mark.integration


def test_connectors_and_the_lease_on_an_s3_warehouse(aws):
    from floeline.warehouse.catalog import Warehouse

    bucket = f"wh-{uuid.uuid4().hex[:12]}"
    aws.client("s3").create_bucket(Bucket=bucket)
    settings = worker_settings_from_dict({
        "floeline.warehouse": f"s3://{bucket}/wh", "floeline.warehouse.s3.endpoint": aws.moto_endpoint,
        "floeline.warehouse.s3.access.key.id": aws.access_key_id,
        "floeline.warehouse.s3.secret.access.key": aws.secret_access_key})
    assert settings.warehouse == f"s3a://{bucket}/wh"
    # Connectors inherit the S3 keys with the warehouse.
    merged = settings.connector_settings({"name": "c", "topics": "t"})
    assert merged["floeline.warehouse.s3.endpoint"] == aws.moto_endpoint
    warehouse = Warehouse(settings.warehouse, settings.warehouse_s3)

    store = ConnectorStore(warehouse.storage, warehouse.location)
    store.save("orders", {"name": "orders", "topics": "orders"}, "RUNNING")
    store.save("slow/one", {"name": "slow/one", "topics": "slow"}, "STOPPED")
    again = ConnectorStore(warehouse.storage, warehouse.location)
    assert [(s.name, s.target_state) for s in again.load_all()] == [("orders", "RUNNING"), ("slow/one", "STOPPED")]
    again.delete("orders")
    assert [s.name for s in store.load_all()] == ["slow/one"]

    first = WorkerLease(warehouse.storage, warehouse.location, timeout_ms=3000)
    first.acquire()
    with pytest.raises(WorkerRunning, match=f"host {socket.gethostname()}, pid {os.getpid()}"):
        WorkerLease(warehouse.storage, warehouse.location).acquire()
    first._stop.set()  # stalls
    record = json.loads(warehouse.storage.read_text(first.location))
    record["host"] = "elsewhere"
    first.version = warehouse.storage.put_if(first.location, json.dumps(record), first.version)
    time.sleep(3.5)
    second = WorkerLease(warehouse.storage, warehouse.location)
    second.acquire()
    assert first.renew() is False and "taken over" in first.lost
    second.release()
    assert warehouse.storage.read_text(second.location) is None
