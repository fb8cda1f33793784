"""Table maintenance statements of `floeline sql`: OPTIMIZE (Delta's compaction) and
VACUUM (deleting files no kept version needs).

A connector flushing every second adds a few small Parquet files per commit; a reader
opens every one of them. OPTIMIZE rewrites them into large files in one commit that
changes no row (Delta's `dataChange=false`): positions stay in the connector's commits,
so a connector resumes exactly as before, and a streaming reader of the table skips
the rewrite. It may run while the connector writes (Delta retries or fails the
compaction, never the append). For maintenance on a schedule, see
floeline.table.auto.compact (warehouse/tables.py).

An Iceberg table (warehouse/iceberg_mirror.py) gets its Iceberg metadata brought in
step after OPTIMIZE and before VACUUM, so Iceberg readers never point at a file Delta
removed and VACUUM deleted."""

from __future__ import annotations

from floeline.errors import SqlError
from floeline.records.content import quote_column
from floeline.sql.results import spark_error
from floeline.warehouse.catalog import TableRef
from floeline.warehouse.iceberg_mirror import mirror_if_iceberg


def optimize(spark, ref: TableRef):
    """Compact the table's small files; one row: the table, files removed and added,
    and the files the table has now."""
    try:
        result = spark.sql(f"OPTIMIZE delta.{quote_column(ref.path)}").first()
    except Exception as exc:  # Spark's own exception types
        raise SqlError(f"OPTIMIZE {ref.full_name} failed: {spark_error(exc)}") from exc
    mirror_if_iceberg(ref.path, ref.full_name)
    metrics = result["metrics"]
    files = spark.sql(f"DESCRIBE DETAIL delta.{quote_column(ref.path)}").first()["numFiles"]
    return spark.createDataFrame(
        [(ref.full_name, int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]), int(files))],
        "table string, files_removed long, files_added long, files_now long")


def vacuum(spark, ref: TableRef, retain_hours: float | None):
    """Delete the table's files that no version within the retention (Delta's default,
    7 days, unless RETAIN n HOURS) needs: replaced files after OPTIMIZE, the Parquet
    files a stopped write left. One row: the table and the files it has now. Delta
    refuses a retention under its safety minimum (168 hours) with its own message."""
    retain = f" RETAIN {retain_hours:g} HOURS" if retain_hours is not None else ""
    mirror_if_iceberg(ref.path, ref.full_name)
    try:
        spark.sql(f"VACUUM delta.{quote_column(ref.path)}{retain}").collect()
    except Exception as exc:  # Spark's own exception types
        raise SqlError(f"VACUUM {ref.full_name} failed: {spark_error(exc)}") from exc
    files = spark.sql(f"DESCRIBE DETAIL delta.{quote_column(ref.path)}").first()["numFiles"]
    return spark.createDataFrame([(ref.full_name, int(files))], "table string, files_now long")
