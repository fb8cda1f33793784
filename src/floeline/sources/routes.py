"""The route -> table rule, in one place: records of a route (a Kafka topic, a Kinesis
stream) go to the table their source names after the connector's transforms renamed
the route (RegexRouter and the like). Used by the pipeline, `floeline status` and
`floeline validate`; needs no Spark."""

from __future__ import annotations

from collections.abc import Callable

from floeline.records.transforms.chain import routed_topic


def table_for_route(route: str, transforms, table_name: Callable[[str], str]) -> str:
    """The table name records of `route` go to. `transforms`: the connector's transform
    chain (or None); `table_name`: the source's rule for a routed route (Kafka:
    snowflake.topic2table.map, else the sanitized topic; Kinesis: the stream in
    uppercase)."""
    return table_name(routed_topic(transforms, route))
