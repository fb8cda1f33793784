"""Iceberg tables where a Snowflake connector config asks for them
(snowflake.autocreate.table.type=iceberg, snowflake.streaming.iceberg.enabled=true):
the tables stay Delta tables, and after each batch floeline writes their Iceberg
metadata over the same files (iceberg_mirror.py).

Why not Delta UniForm: Delta writes Iceberg metadata only with its converter jar
(io.delta:delta-iceberg), which is built for Spark 4.0 only (delta-io/delta#6056), not
the Spark 4.2 and Delta 4.4 floeline runs on, and no registry here serves one; without
it Delta takes UniForm's table properties and writes no Iceberg metadata, in silence.
The mirror needs pyiceberg (the `iceberg` extra) and a local warehouse (its commits
swap a file by rename); a connector without them stops at start, naming the fix."""

from __future__ import annotations

from floeline.errors import ConfigError

SETTINGS = "snowflake.autocreate.table.type=iceberg / snowflake.streaming.iceberg.enabled=true"


def require_iceberg_mirror(connector: str, warehouse_is_local: bool) -> None:
    """Raise a ConfigError when this process cannot write the tables' Iceberg metadata."""
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        raise ConfigError(f"[{connector}] {SETTINGS}: Iceberg tables need pyiceberg, which is not installed: "
                          "pip install 'floeline[iceberg]' (or remove the setting)") from None
    if not warehouse_is_local:
        raise ConfigError(f"[{connector}] {SETTINGS}: Iceberg tables are written to local warehouses only "
                          "(their metadata commits rename a file, which S3 cannot do atomically); "
                          "use a local floeline.warehouse for this connector, or remove the setting")
