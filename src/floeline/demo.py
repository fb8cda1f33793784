"""`floeline demo` (the README's first command): start the local broker, produce the
spec's ORDERS events, run the connector until caught up, print the table."""

from __future__ import annotations

import time

DEMO_TOPIC = "orders"
CUSTOMERS = ["John", "Maria", "Wei", "Aiko", "Łukasz"]


def demo_events(count: int = 5) -> list[dict]:
    """ORDERS records shaped like the spec's example, keyed by order id."""
    base = int(time.time()) % 100000 * 100
    events = []
    for i in range(count):
        order_id = base + i
        value = {"order_id": order_id, "customer_name": CUSTOMERS[i % len(CUSTOMERS)],
                 "order_total": round(100.00 + i * 12.5, 2), "isPaid": i % 2 == 0}
        events.append({"value": value, "key": str(order_id),
                       "headers": [("source", "floeline-demo")]})
    return events


def run_demo(warehouse: str = "./warehouse") -> int:
    from floeline import devkafka
    from floeline.config import config_from_dict
    from floeline.ingest import Connector
    from floeline.sources.kafka import produce
    from floeline.spark import get_spark
    from floeline.sql.query import format_rows, run_sql
    from floeline.warehouse.catalog import Warehouse

    bootstrap = devkafka.start()
    print(f"kafka broker: bootstrap.servers={bootstrap}")
    devkafka.create_topic(bootstrap, DEMO_TOPIC, partitions=2)
    sent = produce(bootstrap, DEMO_TOPIC, demo_events())
    print(f"produced {sent} ORDERS events to topic '{DEMO_TOPIC}'")
    config = config_from_dict({
        "name": "orders_demo", "topics": DEMO_TOPIC, "bootstrap.servers": bootstrap,
        "floeline.warehouse": warehouse, "buffer.flush.time": "1"})
    spark = get_spark(config.spark_master)
    Connector(config, spark).run(until_caught_up=True)
    wh = Warehouse(warehouse)
    print("\nSELECT * FROM ORDERS:")
    print(format_rows(run_sql(spark, "SELECT order_id, customer_name, order_total, ispaid "
                                     "FROM ORDERS ORDER BY order_id", wh)))
    print("\nSELECT RECORD_METADATA FROM ORDERS (one row):")
    print(format_rows(run_sql(spark, "SELECT RECORD_METADATA FROM ORDERS "
                                     "ORDER BY RECORD_METADATA:offset::bigint DESC LIMIT 1", wh), "json"))
    return 0
