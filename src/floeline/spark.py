"""The one place a SparkSession is built, so every command (run, sql, demo, tests,
bench) gets the same jars and settings.

Jars come through `spark.jars.packages` (resolved by Spark's Ivy into its cache on
first use; `floeline setup` pre-fetches them). Two wrinkles, both measured here:
- spark-token-provider-kafka-0-10 is published only as 4.0.0 on the Maven Central
  copy this project can reach, so the 4.2.0 one the Kafka source depends on is
  excluded (Ivy's exclude drops every version, so 4.0.0 cannot ride along in
  spark.jars.packages) and the 4.0.0 jar (Kafka auth-config helpers, API-stable since
  3.x) is fetched once with Maven and added through spark.jars.
- Delta's log4j dependencies are excluded: PySpark ships its own log4j.
spark.jars also carries floeline's own compiled Spark functions (jvm.py) and the s3a
jars (hadoop-aws and its AWS SDK modules, fetched with Maven at set-up: `s3a_jars`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import shutil
import subprocess
from pathlib import Path

from floeline import jvm
from floeline.errors import SetupError

log = logging.getLogger("floeline")

SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
PACKAGES = (
    f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
)
TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0"
EXCLUDES = (
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
)


def token_provider_jar() -> Path:
    """The spark-token-provider-kafka jar, fetched with Maven into floeline's cache."""
    from floeline.devkafka import cache_dir

    group, artifact, version = TOKEN_PROVIDER.split(":")
    jar = cache_dir() / "spark-jars" / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        raise SetupError("`mvn` is not on PATH; floeline's set-up fetches a Spark jar "
                         "with it: apt-get install maven")
    jar.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={TOKEN_PROVIDER}",
                           f"-DoutputDirectory={jar.parent}"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not jar.exists():
        raise SetupError(f"Maven could not fetch {TOKEN_PROVIDER}:\n{done.stdout[-2000:]}")
    return jar


S3A_VERSION = "hadoop-aws-3.5.0+awssdk-2.35.4"  # resources/s3a-pom.xml; a change re-fetches


def s3a_jars() -> list[Path]:
    """The jars of Hadoop's s3a file system (hadoop-aws and the few AWS SDK modules it
    uses, not the SDK's 686 MB bundle: see resources/s3a-pom.xml), fetched once with
    Maven into floeline's cache at set-up and passed to Spark with spark.jars: S3
    stages (and tables on S3) are read through s3a://."""
    from importlib import resources

    from floeline.devkafka import cache_dir
    from floeline.devprocess import install_once

    home = cache_dir() / "spark-jars" / "s3a"

    def fetch(tmp: Path) -> Path:
        if shutil.which("mvn") is None:
            raise SetupError("`mvn` is not on PATH; floeline's set-up fetches the s3a jars "
                             "with it: apt-get install maven")
        pom = tmp / "s3a-pom.xml"
        pom.write_text(resources.files("floeline.resources").joinpath("s3a-pom.xml").read_text())
        jars = tmp / "jars"
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                               "-DincludeScope=runtime", f"-DoutputDirectory={jars}"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not list(jars.glob("hadoop-aws-*.jar")):
            raise SetupError(f"Maven could not fetch the s3a jars (resources/s3a-pom.xml):\n"
                             f"{done.stdout[-2000:]}{done.stderr[-1000:]}")
        return jars

    return sorted(install_once(home, S3A_VERSION, fetch).glob("*.jar"))


def _floeline_jar() -> list[str]:
    """The jar of floeline's JVM functions (jvm.py), or nothing when it cannot be built:
    Spark then runs every micro-batch on the general path."""
    try:
        return [str(jvm.jar_path())]
    except SetupError as exc:
        log.warning("%s\nWithout it every micro-batch takes the general path (slower).", exc)
        return []


def spark_conf(master: str = "local[2]") -> dict[str, str]:
    """Settings for a small local machine: 2 shuffle partitions, no UI, no Hive
    metastore (the in-memory catalog lets a second process read the warehouse while
    a connector writes to it)."""
    return {
        "spark.master": master,
        "spark.app.name": "floeline",
        "spark.jars.packages": ",".join(PACKAGES),
        "spark.jars.excludes": ",".join(EXCLUDES),
        "spark.jars": ",".join([str(token_provider_jar())] + [str(j) for j in s3a_jars()]
                               + _floeline_jar()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        # A JSON object with a key twice keeps the last value, as Kafka Connect's
        # JsonConverter (Jackson) does, and as from_json does on the one-pass path.
        "spark.sql.variant.allowDuplicateKeys": "true",
        # An append whose rows were all filtered (tombstones ignored, bad records, replays)
        # must still commit: it carries the channels' new offsets.
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        "spark.driver.memory": os.environ.get("FLOELINE_DRIVER_MEMORY", "2g"),
        "spark.sql.streaming.stopTimeout": "60s",
        # Spark's "hostname resolves to loopback" warning is noise for local runs.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


_session = None


@contextlib.contextmanager
def _jvm_stderr_to_log():
    """Start the JVM with its stderr (Ivy's resolution report, Spark's log4j output)
    going to a log file, so floeline's own output stays readable. Set
    FLOELINE_SPARK_STDERR=1 to keep it on the terminal."""
    if os.environ.get("FLOELINE_SPARK_STDERR") == "1":
        yield
        return
    from floeline.devkafka import cache_dir

    log_path = cache_dir() / "spark-driver.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _launch_jvm_in_own_session(settings: dict[str, str]) -> None:
    """Start Spark's JVM (the Py4J gateway) in a session of its own. A Ctrl-C or a
    SIGTERM sent to floeline's process group then reaches Python alone, which stops the
    streaming query cleanly; were it to reach the JVM too, its shutdown hook would stop
    Spark under the running query. The JVM still ends with Python: it exits when its
    stdin (a pipe from Python) closes. Under spark-submit the JVM exists already."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    SparkContext._ensure_initialized(gateway=launch_gateway(conf, {"start_new_session": True}))


def get_spark(master: str = "local[2]"):
    """The process-wide SparkSession (created on first call)."""
    global _session
    if _session is None:
        from pyspark.sql import SparkSession

        if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
            # Local Python workers (decode stage, the Kinesis data source) run this
            # interpreter, which has floeline; `python3` from PATH may not.
            os.environ["PYSPARK_PYTHON"] = sys.executable

        settings = spark_conf(master)
        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        with _jvm_stderr_to_log():
            _launch_jvm_in_own_session(settings)
            _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel(os.environ.get("FLOELINE_SPARK_LOG_LEVEL", "ERROR"))
    return _session
