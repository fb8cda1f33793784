"""Two connectors with different configs (sources, converters, tables, settings) in one
Spark session at the same time (two threads, two streaming queries): the batch core
keeps no per-process state, so each table gets exactly its own connector's rows."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytestmark = pytest.mark.integration


def test_two_connectors_side_by_side_in_one_spark(spark, tmp_path, make_config, read_table):
    from floeline.ingest import Connector
    from floeline.sources.memory import MemoryLog, MemorySource

    orders_log, events_log = MemoryLog(tmp_path / "orders-log"), MemoryLog(tmp_path / "events-log")
    for partition in range(2):
        orders_log.append(f"orders/{partition}", "orders",
                          [json.dumps({"id": partition * 100 + i, "amount": i}).encode() for i in range(12)])
    # The second connector's values come in Kafka Connect's schema/payload envelope
    # (JsonConverter with schemas.enable=true: decoded in Python workers), the first's
    # as plain JSON (read by SQL and, once its keys are known, in one pass).
    schema = {"type": "struct", "fields": [{"field": "event", "type": "string"},
                                            {"field": "n", "type": "int32"}]}
    events_log.append("events/0", "events", [
        json.dumps({"schema": schema, "payload": {"event": f"e{i}", "n": i}}).encode()
        for i in range(15)], first_position=10 ** 20)
    orders = make_config(topics="orders", buffer__count__records=4)
    events = make_config(topics="events", buffer__count__records=5,
                         snowflake__enable__schematization="false",
                         snowflake__topic2table__map="events:AUDIT", errors__tolerance="all",
                         value__converter="org.apache.kafka.connect.json.JsonConverter",
                         value__converter__schemas__enable="true")
    connectors = [Connector(orders, spark, source=MemorySource(orders, orders_log)),
                  Connector(events, spark, source=MemorySource(events, events_log))]
    spans: dict[int, tuple[float, float]] = {}
    failures: list[BaseException] = []

    def run(index: int) -> None:
        started = time.time()
        try:
            connectors[index].run(until_caught_up=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        spans[index] = (started, time.time())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not failures, failures
    (a_start, a_end), (b_start, b_end) = spans[0], spans[1]
    assert a_start < b_end and b_start < a_end, "the two connectors did not run at the same time"
    assert all(len(c.reports) >= 2 for c in connectors)  # several batches each

    assert sorted((r["ID"], r["AMOUNT"]) for r in read_table("ORDERS").collect()) == sorted(
        (p * 100 + i, i) for p in range(2) for i in range(12))
    audit = read_table("AUDIT")
    assert audit.columns == ["RECORD_METADATA", "RECORD_CONTENT"]
    assert sorted(json.loads(r["c"])["event"] for r in audit.selectExpr("to_json(RECORD_CONTENT) AS c").collect()) \
        == sorted(f"e{i}" for i in range(15))
    assert {r["t"] for r in audit.selectExpr("RECORD_METADATA:channel::string AS t").collect()} == {"events/0"}
    for other in ("EVENTS", "ORDERS_ERRORS", "AUDIT_ERRORS"):
        with pytest.raises(Exception):
            read_table(other).count()
