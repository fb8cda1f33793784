"""Whether this Spark can write Iceberg tables (snowflake.autocreate.table.type=iceberg).

Delta UniForm writes a table's Iceberg metadata only when Delta's Iceberg converter
(the io.delta:delta-iceberg jar) is on Spark's classpath; without it Delta accepts the
table's UniForm properties and writes no Iceberg metadata, in silence. delta-iceberg is
built for Spark 4.0 only (delta-io/delta#6056), not the Spark 4.2 and Delta 4.4 floeline
runs on, and the registries here serve none; so a connector asked for Iceberg tables
stops at start, naming the setting and the fix, rather than write tables no Iceberg
reader can open."""

from __future__ import annotations

from floeline.errors import ConfigError

# The class Delta loads to convert a commit to Iceberg metadata (delta-iceberg's).
CONVERTER_CLASS = "org.apache.spark.sql.delta.icebergShaded.IcebergConverter"
SETTINGS = "snowflake.autocreate.table.type=iceberg / snowflake.streaming.iceberg.enabled=true"


def has_class(spark, name: str) -> bool:
    """True when Spark's driver can load the JVM class `name` (spark.jars included)."""
    from py4j.protocol import Py4JJavaError

    loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        spark._jvm.java.lang.Class.forName(name, False, loader)
    except Py4JJavaError:
        return False
    return True


def require_iceberg_converter(spark, connector: str) -> None:
    """Raise a ConfigError when Iceberg tables are asked for and Delta cannot write their
    Iceberg metadata."""
    if has_class(spark, CONVERTER_CLASS):
        return
    raise ConfigError(
        f"[{connector}] {SETTINGS}: Iceberg tables need Delta's Iceberg converter "
        f"(the io.delta:delta-iceberg jar, class {CONVERTER_CLASS}), which this Spark does not have: "
        "without it Delta writes no Iceberg metadata and no Iceberg reader can open the tables. "
        "delta-iceberg is built for Spark 4.0 only, not this Spark; remove the setting "
        "(floeline.variant.storage=json gives tables DuckDB, delta-rs and polars read), "
        "or add a delta-iceberg matching Spark's Delta to spark.jars")
