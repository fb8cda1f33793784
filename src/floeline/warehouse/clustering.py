"""Clustering keys (CLUSTER BY): a table's rows written in key order.

`floeline sql "CREATE TABLE T (...) CLUSTER BY (K)"` makes a Delta liquid-clustered
table (Delta's OPTIMIZE then clusters its files by K) and keeps K in a table property
of floeline's (tables.CLUSTER_BY_PROPERTY). Delta's own writer does not cluster an
append, so each commit of a connector does it, as Snowflake's connector pre-clusters
a batch for a table with clustering keys: the batch's rows are range-partitioned by
the keys over as many files as the write would make anyway (one per read task: a
Kafka topic's partitions) and sorted within each file. Every file of a batch then
holds its own range of keys, and a query filtering one key value reads, of each
commit's files, only the one whose key range holds it (Delta's data skipping on the
files' min/max statistics). A batch read in one task is sorted only: it is one file,
or several ranges where spark.sql.files.maxRecordsPerFile splits it. The cost is a
pass that holds the commit's rows in Spark's cache (so the source is read once), a
sampling pass and a shuffle (bench/bench_clustering.py measures both sides).

Left out of the order: a write that numbers an identity column (AUTOINCREMENT keeps
offset order, ingest/identity_order.py), and clustering columns the write does not
hold (a batch without that key); rows of a commit keep no offset order within the
commit of a clustered table, their positions are unchanged."""

from __future__ import annotations

import json
from contextlib import contextmanager

from floeline.errors import SqlError
from floeline.records.content import quote_column, sql_string
from floeline.warehouse import tables
from floeline.warehouse.catalog import TableRef

# Types whose values Delta keeps min/max statistics of (data skipping), which is what
# clustering by them serves: not VARIANT, BINARY, BOOLEAN or nested types.
_CLUSTERABLE = ("decimal", "double", "float", "bigint", "int", "smallint", "tinyint", "string",
                "date", "timestamp", "timestamp_ntz")


def check_columns(wanted: list[str], columns) -> tuple[str, ...]:
    """The table's clustering columns for CLUSTER BY's names `wanted` (each matching
    one of `columns`, records.columns.Column, as an unquoted name matches: already
    normalized by the caller), or a SqlError naming the one Delta cannot cluster by."""
    by_name = {c.name: c for c in columns}
    out = []
    for name in wanted:
        column = by_name.get(name)
        if column is None:
            raise SqlError(f"CLUSTER BY {name}: no such column (columns: "
                           f"{', '.join(c.name for c in columns)})")
        if not column.type.lower().startswith(_CLUSTERABLE) or column.declared.upper() in (
                "VARIANT", "OBJECT", "ARRAY"):
            raise SqlError(f"CLUSTER BY {name}: a column of type {column.declared or column.type} "
                           f"cannot be a clustering key (Delta clusters by numbers, strings, dates "
                           f"and timestamps); cluster by another column, or by a typed column "
                           f"holding the value (NUMBER, VARCHAR, DATE, TIMESTAMP)")
        if name in out:
            raise SqlError(f"CLUSTER BY {name}: the column is named twice")
        out.append(name)
    if len(out) > 4:
        raise SqlError(f"CLUSTER BY ({', '.join(out)}): Delta clusters by at most 4 columns")
    return tuple(out)


def read_cluster_by(spark, ref: TableRef) -> tuple[str, ...]:
    """The table's clustering columns (CLUSTER BY); empty for a table without them."""
    return tuple(json.loads(tables.table_configuration(spark, ref).get(tables.CLUSTER_BY_PROPERTY) or "[]"))


def set_cluster_by(spark, ref: TableRef, columns: tuple[str, ...]) -> None:
    """ALTER TABLE ... CLUSTER BY (columns), or with none DROP CLUSTERING KEY: Delta's
    clustering columns and floeline's property change together (rows already written
    keep their files until OPTIMIZE clusters them)."""
    path = f"delta.{quote_column(ref.path)}"
    if columns:
        statements = [f"ALTER TABLE {path} CLUSTER BY ({', '.join(quote_column(c) for c in columns)})",
                      f"ALTER TABLE {path} SET TBLPROPERTIES ('{tables.CLUSTER_BY_PROPERTY}'="
                      f"{sql_string(json.dumps(list(columns)))})"]
    else:
        statements = [f"ALTER TABLE {path} CLUSTER BY NONE",
                      f"ALTER TABLE {path} UNSET TBLPROPERTIES IF EXISTS ('{tables.CLUSTER_BY_PROPERTY}')"]
    for statement in statements:
        try:
            spark.sql(statement)
        except Exception as exc:  # Spark's own exception types: name the table
            raise SqlError(f"table {ref.full_name}: {statement.split(' (')[0].replace(path, '')} "
                           f"failed: {exc}") from exc


def keys_of_write(cluster_by: str | None, schema_json: str, frame_columns: list[str]) -> list[str]:
    """The clustering columns a write of `frame_columns` is ordered by, for a table
    whose CLUSTER_BY_PROPERTY is `cluster_by` (None: no CLUSTER BY) and whose Delta
    schema is `schema_json`: none when the write numbers an identity column it leaves
    out (identity values follow the rows' order: offset order wins)."""
    wanted = json.loads(cluster_by or "[]")
    if not wanted:
        return []
    written = {c.lower() for c in frame_columns}
    fields = json.loads(schema_json).get("fields", [])
    if any("delta.identity.start" in (f.get("metadata") or {}) and f["name"].lower() not in written
           for f in fields):
        return []
    return [c for c in wanted if c.lower() in written]


@contextmanager
def in_transaction_order(frame, txn):
    """`frame` in the key order of the table the Delta transaction `txn` writes (as it
    is for a table without CLUSTER BY), for a write inside the `with` block. The frame
    is held (persisted) until the block ends, filled by a count of its own first:
    range partitioning samples its rows in a job of its own, which would otherwise
    compute them twice (reading the source again, counting an observed frame's rows
    twice), and an Observation reports its metrics from that count (it reports none
    from Delta's write over the cache)."""
    metadata = txn.metadata()
    held = metadata.configuration().get(tables.CLUSTER_BY_PROPERTY)
    keys = keys_of_write(held.get(), metadata.schemaString(), frame.columns) if held.isDefined() else []
    if not keys:
        yield frame
        return
    kept = frame.persist()
    try:
        kept.count()
        yield in_key_order(kept, keys)
    finally:
        kept.unpersist()


def in_key_order(frame, keys: list[str]):
    """`frame`'s rows range-partitioned by `keys` over as many partitions as it has
    (the files the write makes) and sorted within each: each file one range of keys.
    One partition is only sorted (no shuffle); its files, when
    spark.sql.files.maxRecordsPerFile splits them, still hold a range each."""
    from pyspark.sql import functions as F

    columns = [F.col(quote_column(k)) for k in keys]
    partitions = max(1, int(frame._jdf.rdd().getNumPartitions()))
    if partitions > 1:
        frame = frame.repartitionByRange(partitions, *columns)
    return frame.sortWithinPartitions(*columns)


def files_scanned(df) -> int:
    """The data files a query read, running it: its scans' numFiles metrics, after
    Delta's data skipping (what clustering saves; tests and bench/bench_clustering.py)."""
    df.collect()
    total, stack = 0, [df._jdf.queryExecution().executedPlan()]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            node = node.executedPlan()
        metric = node.metrics().get("numFiles")
        if metric.isDefined():
            total += int(metric.get().value())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return total
