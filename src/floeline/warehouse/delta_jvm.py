"""Small pieces for talking to Delta's Java API through py4j: Scala collections in and
out, and a transaction's operation metrics (what DESCRIBE HISTORY shows for a commit
whose rows another write counted). Used by rewrite_merge.py."""

from __future__ import annotations

from floeline.spark import java_class


def scala_seq(spark, items: list):
    """A Scala immutable Seq of the Java objects `items`."""
    array = java_class(spark, "java.util.ArrayList")()
    for item in items:
        array.add(item)
    return java_class(spark, "scala.jdk.javaapi.CollectionConverters").asScala(array).toList()


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
