"""How many Spark tasks read a micro-batch. Spark's Kafka source makes one task per
topic partition with new records, and Kinesis one per shard: a 64-partition topic read
64 tasks on two cores, each with its scheduling, its consumer and its own Parquet file
in the commit. At most twice Spark's default parallelism keeps every core busy with one
task waiting; the tasks beyond that are coalesced (no shuffle: a task reads several
partitions one after another). floeline's Kafka reader plans at most that many tasks
itself (the source says so: `bounded_read_tasks`), so its batches are not asked."""

from __future__ import annotations


def read_task_limit(spark) -> int:
    """The most tasks a micro-batch is read in: twice Spark's default parallelism."""
    return 2 * max(1, spark.sparkContext.defaultParallelism)


def at_most_read_tasks(df):
    """`df` (a micro-batch) read in at most `read_task_limit` tasks."""
    limit = read_task_limit(df.sparkSession)
    if df.rdd.getNumPartitions() > limit:
        return df.coalesce(limit)
    return df
