"""Small pieces for talking to Delta's Java API through py4j: Scala collections in and
out, and a transaction's operation metrics (what DESCRIBE HISTORY shows for a commit
whose rows another write counted). Used by rewrite_merge.py and commits.py."""

from __future__ import annotations

import json
import time

from py4j.protocol import Py4JError

from floeline.jvm import TABLE_COMMITS_CLASS
from floeline.spark import java_class


def scala_seq(spark, items: list):
    """A Scala immutable Seq of the Java objects `items`."""
    array = java_class(spark, "java.util.ArrayList")()
    for item in items:
        array.add(item)
    return java_class(spark, "scala.jdk.javaapi.CollectionConverters").asScala(array).toList()


def scala_map(spark, items: dict[str, str]):
    """A Scala immutable Map of strings."""
    result = getattr(java_class(spark, "scala.collection.immutable.Map$"), "MODULE$").empty()
    for key, value in items.items():
        result = result.updated(key, value)
    return result


def python_list(collection) -> list:
    """The elements of a Scala (or Java) collection."""
    items, iterator = [], collection.iterator()
    while iterator.hasNext():
        items.append(iterator.next())
    return items


def register_metrics(spark, txn, values: dict[str, int]) -> None:
    """Register `values` (metric name -> count) as the transaction's SQL metrics, which
    Delta turns into the commit's operationMetrics."""
    context = spark._jsparkSession.sparkContext()
    metrics = getattr(java_class(spark, "scala.collection.immutable.Map$"), "MODULE$").empty()
    sql_metrics = java_class(spark, "org.apache.spark.sql.execution.metric.SQLMetrics")
    for name, value in values.items():
        metric = sql_metrics.createMetric(context, name)
        metric.set(int(value))
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)


def txn_actions(spark, entries: dict[str, int]):
    """Delta txn (SetTransaction) actions of `entries` (appId -> version), set now, as
    a Scala Seq: one call to floeline's table commits jar, else one call per action."""
    try:
        return java_class(spark, TABLE_COMMITS_CLASS).txnActions(json.dumps(entries))
    except Py4JError:  # no floeline table commits jar in the session
        now = int(time.time() * 1000)
        from_json = spark._jvm.org.apache.spark.sql.delta.actions.Action.fromJson
        return scala_seq(spark, [from_json(json.dumps({"txn": {"appId": app_id, "version": version,
                                                               "lastUpdated": now}}))
                                 for app_id, version in entries.items()])
