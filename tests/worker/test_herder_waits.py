"""A worker's connector that waits for its broker says so at once (issue 58): its
status carries a trace naming what it waits for and the fix while it is UNASSIGNED, and
its log lines carry its name, long before the retries give up and it is FAILED."""

from __future__ import annotations

import io
import logging

import pytest

from floeline import waits
from floeline.dev.services import free_port
from floeline.warehouse.storage import LocalStorage
from floeline.worker.herder import Herder
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore
from worker_services import spark, wait_for  # noqa: F401

pytestmark = pytest.mark.integration

# The retries' bound: the test waits it out to see the connector FAILED. It must leave
# the first try's failure (after the client's 5 s login check, kafka.py LOGIN_CHECK_S)
# well inside the bound, so the trace is seen while the connector still waits.
RETRY_TIMEOUT_MS = "10000"


def test_a_connector_waiting_for_its_broker_says_what_and_the_fix_from_the_first_try(
        spark, tmp_path, caplog):
    warehouse = str(tmp_path / "warehouse")
    absent = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = worker_settings_from_dict({"floeline.warehouse": warehouse,
                                          "listeners": "http://127.0.0.1:0"})
    herder = Herder(spark, settings, ConnectorStore(LocalStorage(), warehouse), out=io.StringIO())
    waits.prefix_connector_logs()
    try:
        with caplog.at_level(logging.WARNING, logger="floeline"):
            herder.create("orders", {"topics": "orders", "bootstrap.servers": absent,
                                     "errors.retry.timeout": RETRY_TIMEOUT_MS})
            status = wait_for("a trace while it waits", lambda: (
                lambda s: s if "trace" in s["connector"] else None)(herder.status("orders")), 60)
            assert status["connector"]["state"] == "UNASSIGNED"
            trace = status["connector"]["trace"]
            assert trace.startswith(f"waiting for Kafka Metadata at bootstrap.servers={absent}: ")
            assert "Check that the broker is running and reachable" in trace
            assert f"errors.retry.timeout={RETRY_TIMEOUT_MS}" in trace
            assert status["tasks"][0]["trace"] == trace
            # Its retries spent, it is FAILED with the error, and waits for nothing.
            wait_for("FAILED", lambda: herder.status("orders")["connector"]["state"] == "FAILED", 120)
            assert "still failing after" in herder.status("orders")["connector"]["trace"]
            assert waits.waiting_for("orders") is None
        lines = [r.getMessage() for r in caplog.records]
        assert any(line.startswith("[orders] waiting for Kafka Metadata at") for line in lines), lines
        assert any(line.startswith("[orders] connector orders failed: ") for line in lines), lines
    finally:
        herder.close()
