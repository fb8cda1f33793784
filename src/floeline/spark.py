"""The one place a SparkSession is built, so every command (run, sql, demo, tests,
bench) gets the same jars and settings.

Jars come through `spark.jars.packages` (resolved by Spark's Ivy into its cache on
first use; `floeline setup` pre-fetches them). The jars a resolution gave are listed in
floeline's cache, and later starts pass them as spark.jars while they are all still in
Ivy's cache, which skips Ivy's resolution (seconds at every start). Two wrinkles, both measured here:
- spark-token-provider-kafka-0-10 (Kafka auth-config helpers) is excluded from Ivy's
  resolution and fetched once with Maven, at Spark's own version, into floeline's
  cache, and added through spark.jars. (When set-up was written only 4.0.0 was served
  here, and Ivy's exclude drops every version; 4.2.0 is served since.)
- Delta's log4j dependencies are excluded: PySpark ships its own log4j.
spark.jars also carries floeline's own compiled Spark functions (jvm.py) and the s3a
jars (hadoop-aws and its AWS SDK modules, fetched with Maven at set-up: `s3a_jars`).
A local master takes the same jars on the driver's class path instead
(`local_class_path`), and each process's scratch folder is its own (`local_dir_conf`).

Two ways a session starts:
- `floeline run` (and sql, demo, tests): this module launches Spark's JVM with
  `spark_conf(master)`: local[2] by default, the driver on 127.0.0.1 for local masters.
- under spark-submit (`floeline submit`, or a hand-written spark-submit line: the JVM
  exists already): the master, the driver's address, the jars and packages are what
  spark-submit was given; floeline only adds its SQL and Delta settings
  (`session_defaults`) where the submitted conf does not set them, and never fetches
  or compiles anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import sys
import shutil
import subprocess
import tempfile
from pathlib import Path

from floeline import class_archive, jvm, startup
from floeline.cache import cache_dir, install_once, installed_stamp
from floeline.errors import SetupError, SetupMissing
from floeline.secrets import SECRET_KEY_REGEX

log = logging.getLogger("floeline")

SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
PACKAGES = (
    f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
)
TOKEN_PROVIDER = f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{SPARK_VERSION}"
EXCLUDES = (
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
)


SETUP_HINT = "run `make setup` (or `floeline setup`) on this machine first"


def token_provider_jar(fetch: bool = True) -> Path:
    """The spark-token-provider-kafka jar, fetched with Maven into floeline's cache
    (unless `fetch` is false: then a missing jar is a SetupMissing error)."""
    group, artifact, version = TOKEN_PROVIDER.split(":")
    jar = cache_dir() / "spark-jars" / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    if not fetch:
        raise SetupMissing(f"{TOKEN_PROVIDER} is not fetched ({jar} is missing)")
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


def s3a_jars(fetch: bool = True) -> list[Path]:
    """The jars of Hadoop's s3a file system (hadoop-aws and the few AWS SDK modules it
    uses, not the SDK's 686 MB bundle: see resources/s3a-pom.xml), fetched once with
    Maven into floeline's cache at set-up and passed to Spark with spark.jars: S3
    stages (and tables on S3) are read through s3a://. With `fetch` false, jars not
    fetched yet are a SetupMissing error."""
    from importlib import resources

    home = cache_dir() / "spark-jars" / "s3a"
    if not fetch:
        if installed_stamp(home) != S3A_VERSION:
            raise SetupMissing(f"the s3a jars ({S3A_VERSION}) are not fetched ({home})")
        return sorted(home.glob("*.jar"))

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


def setup_jars() -> list[Path]:
    """The jars floeline's set-up fetched and built (the Kafka token provider, the s3a
    jars, floeline's JVM functions; its Kafka reader when built), for spark-submit's
    --jars. Never runs mvn or javac: anything missing is one SetupMissing error naming
    all of it and `make setup`."""
    jars: list[Path] = []
    missing = []
    for get in (lambda: [token_provider_jar(fetch=False)], lambda: s3a_jars(fetch=False),
                lambda: [jvm.jar_path(build=False)]):
        try:
            jars += get()
        except SetupMissing as exc:
            missing.append(str(exc))
    if missing:
        raise SetupMissing("; ".join(missing) + f". {SETUP_HINT}: spark-submit gets the jars "
                           "set-up made, and floeline never runs mvn or javac for it")
    try:  # optional: without it a connector with floeline.kafka.reader=grouped says so
        jars.append(jvm.kafka_reader_jar(kafka_clients_jar(), build=False))
    except SetupMissing:
        pass
    try:  # optional: without it a batch's tables are written one by one
        jars.append(jvm.table_commits_jar(resolved_package_jars(), build=False))
    except SetupMissing:
        pass
    return jars


def _floeline_jar() -> list[str]:
    """The jar of floeline's JVM functions (jvm.py), or nothing without a JDK to build it
    (said in a warning): Spark then runs every micro-batch on the general path."""
    return jvm.optional_jar(jvm.jar_path, "every micro-batch takes the general path (slower, same rows)")


def kafka_clients_jar(resolved: list[str] | None = None) -> str | None:
    """The Kafka client jar Spark's Kafka package brought (from `resolved`, else the
    record of an earlier resolution), or None before the first resolution."""
    jars = resolved if resolved is not None else (resolved_package_jars() or [])
    return next((j for j in jars if Path(j).name.startswith("org.apache.kafka_kafka-clients-")), None)


def _kafka_reader_jar(resolved: list[str] | None) -> list[str]:
    """floeline's Kafka reader jar (jvm.kafka_reader_jar), or nothing before Spark's
    packages are resolved or without javac: connectors then read with Spark's source."""
    if not resolved:
        return []
    try:
        return jvm.optional_jar(lambda: jvm.kafka_reader_jar(kafka_clients_jar(resolved)),
                                "connectors read Kafka with Spark's own source")
    except SetupMissing as exc:  # Spark's Kafka package brought no Kafka client jar
        log.warning("%s\nConnectors read Kafka with Spark's own source.", exc)
        return []


def _table_commits_jar(resolved: list[str] | None) -> list[str]:
    """floeline's table commits jar (jvm.table_commits_jar), or nothing before Spark's
    packages are resolved or without javac: a batch's tables are then written one by one."""
    if not resolved:
        return []
    try:
        return jvm.optional_jar(lambda: jvm.table_commits_jar(resolved),
                                "a batch's tables are written one by one (slower)")
    except SetupMissing as exc:  # Delta's jars are not among the resolved packages
        log.warning("%s\nA batch's tables are written one by one (slower).", exc)
        return []


def session_defaults() -> dict[str, str]:
    """floeline's SQL, Delta and small-batch settings, wherever the session runs: Delta's
    extension and catalog, no Hive metastore (the in-memory catalog lets a second process
    read the warehouse while a connector writes to it), 2 shuffle partitions, UTC. Under
    spark-submit each applies only where the submitted conf does not set the key."""
    return {
        "spark.app.name": "floeline",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.catalogImplementation": "in-memory",
        # Spark makes this folder at every start, `spark-warehouse/` in the current
        # directory by default, where a user took it for the tables (which are under
        # floeline.warehouse). floeline keeps no table in Spark's catalog: it stays empty.
        "spark.sql.warehouse.dir": str(cache_dir() / "spark-warehouse"),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        # Delta's VACUUM spreads the table's file listing over this many tasks (a
        # repartition), 10,000 by Spark's default: VACUUM of a 24-row table ran 10,000
        # tasks, 63-92 s here against 4.3-5.5 s with 2 (bench/RESULTS.md). Spark's
        # parallel listing of more than 32 paths uses at most this many tasks too.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        # Timestamps as Parquet's INT64 microseconds rather than Spark's legacy INT96, which
        # Iceberg readers do not take (warehouse/iceberg_mirror.py) and Parquet deprecates;
        # every engine reads both.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        # A JSON object with a key twice keeps the last value, as Kafka Connect's
        # JsonConverter (Jackson) does, and as from_json does on the one-pass path.
        "spark.sql.variant.allowDuplicateKeys": "true",
        # An append whose rows were all filtered (tombstones ignored, bad records, replays)
        # must still commit: it carries the channels' new offsets.
        "spark.databricks.delta.skipRecordingEmptyCommits": "false",
        "spark.sql.streaming.stopTimeout": "60s",
        # floeline's caches (a load's records: ingest/file_load.py; a general-path batch)
        # live for one batch: encoding their columns (dictionary, run-length) cost more
        # than it saved; COPY took 20-30 % less time without it in alternating runs.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.ui.showConsoleProgress": "false",
        # Spark's Kafka source keeps a consumer per (query, topic partition) between
        # micro-batches, 64 by default: a connector reading 100 topics x 4 partitions
        # made about 400 consumers, each a new connection, in every batch (0.1-0.2 s each
        # on two cores). A soft limit; idle consumers still close after 5 minutes.
        "spark.kafka.consumer.cache.capacity": str(KAFKA_CONSUMERS_KEPT),
        # Delta lists a small table's files in each commit's .crc file. For the commit
        # that creates a table it computes the empty list with a Spark job: 0.15 s of a
        # new table's 0.19 s commit (0.04 s without), 100 new tables' first batch 11 s
        # more. floeline never reads the list; commits of existing tables and reads cost
        # the same either way (bench/RESULTS.md, issue 26).
        "spark.databricks.delta.allFilesInCrc.enabled": "false",
        # Spark shows conf values and data source options (Kafka's kafka.sasl.jaas.config,
        # kafka.ssl.truststore.password) redacted where these match (secrets.py).
        "spark.redaction.regex": SECRET_KEY_REGEX,
        "spark.sql.redaction.options.regex": f"{SECRET_KEY_REGEX}|url",
    }


# Kafka consumers Spark's source keeps between micro-batches (see session_defaults).
KAFKA_CONSUMERS_KEPT = 2048

# The driver JVM's heap (spark.driver.memory) of a connector's own process.
DRIVER_MEMORY = "2g"
# The worker's: G1 grows the heap to whatever it may take while twenty connectors catch
# up at once, and the worker's batch slots bound what its batches hold. bench_worker.py,
# 20 connectors on 4M records: the tree peaked at 2,721 MB with 2g and 1,936 MB with
# 1200m at the same rows/s; 1g peaked at 1,798 MB but spent a quarter more CPU (GC).
WORKER_DRIVER_MEMORY = "1200m"


def driver_memory(default: str = DRIVER_MEMORY) -> str:
    """spark.driver.memory: FLOELINE_DRIVER_MEMORY when set, else `default`."""
    return os.environ.get("FLOELINE_DRIVER_MEMORY", default)


def spark_conf(master: str = "local[2]", heap: str = DRIVER_MEMORY) -> dict[str, str]:
    """The settings of a session this process launches itself (`floeline run`, sql,
    tests): the master, the jars (fetched or built here when set-up has not, see the
    module's doc), no UI, the driver's heap (`heap` unless FLOELINE_DRIVER_MEMORY says
    otherwise), and for a local master the driver on 127.0.0.1."""
    resolved = resolved_package_jars()
    packages = {} if resolved else {"spark.jars.packages": ",".join(PACKAGES),
                                    "spark.jars.excludes": ",".join(EXCLUDES)}
    floeline_jar = _floeline_jar()
    jars = ([str(token_provider_jar())] + [str(j) for j in s3a_jars()] + floeline_jar
            + _kafka_reader_jar(resolved) + _table_commits_jar(resolved) + (resolved or []))
    conf = {
        "spark.master": master,
        **packages,
        "spark.jars": ",".join(jars),
        **session_defaults(),
        "spark.driver.memory": driver_memory(heap),
        "spark.ui.enabled": "false",
    }
    if master.startswith("local"):
        # Spark's "hostname resolves to loopback" warning is noise for local runs; a
        # remote master must be able to reach the driver, so it keeps Spark's default.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if master == "local" or master.startswith("local["):  # one JVM (not local-cluster)
        conf.update(local_files_conf(floeline_jar))
        if resolved:
            conf.update(local_class_path(jars))
    return conf


def local_class_path(jars: list[str]) -> dict[str, str]:
    """The jars on the driver JVM's class path instead of spark.jars, for a local master
    (whose executor is the driver). Spark's executor copies every spark.jars jar into a
    temporary folder at the first task (108 MB here, at every start), which a JVM
    halted when its Python dies (ParentWatch) never deletes: /tmp filled with a copy per
    `floeline run` or `floeline sql`. On the class path they are read in place, and the
    start's class archive (class_archive.py) covers their classes too. Spark's own jars
    come before them, as with spark.jars' class loader (which asks Spark's first): a
    dependency's older copy of a class Spark has (jackson-databind) stays unused."""
    spark_jars = str(Path(importlib.util.find_spec("pyspark").submodule_search_locations[0]) / "jars" / "*")
    ahead = [j for j in jars if Path(j).name.startswith("floeline-jvm-")]
    rest = [j for j in jars if j not in ahead]
    return {"spark.jars": "", "spark.driver.extraClassPath": os.pathsep.join(ahead + [spark_jars] + rest)}


def local_files_conf(floeline_jar: list[str]) -> dict[str, str]:
    """Hadoop's file: file system without a child process per call (resources/java/
    LocalFiles.java: Hadoop runs `chmod` and `readlink` about a dozen times per Delta
    commit without its native library; measured: a 100-row append 0.27 s -> 0.18 s).
    Local masters only: the class must be on the classpath of the JVM that writes the
    files, which for a local master is this driver (spark.jars come too late for the
    file system Spark opens at start)."""
    if not floeline_jar:
        return {}
    return {
        "spark.driver.extraClassPath": floeline_jar[0],
        "spark.hadoop.fs.file.impl": "floeline.LocalFiles$Checksummed",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "floeline.LocalFiles$Context",
    }


def _packages_record() -> Path:
    """Where the jars Ivy resolved for PACKAGES are listed, one path per line (named by
    PACKAGES and EXCLUDES: a version change resolves again)."""
    key = hashlib.sha1(",".join(PACKAGES + EXCLUDES).encode()).hexdigest()[:12]
    return cache_dir() / "spark-jars" / f"packages-{key}.txt"


def resolved_package_jars() -> list[str] | None:
    """The jars an earlier start's Ivy resolution of PACKAGES gave, when every one is
    still in Ivy's cache; None otherwise (Spark resolves PACKAGES then). Passing them as
    spark.jars skips Ivy's resolution at every start: 1-2 s on a quiet machine, up to
    19 s on a loaded one (its reports in spark-driver.log)."""
    record = _packages_record()
    if not record.exists():
        return None
    jars = [line for line in record.read_text().splitlines() if line]
    return jars if jars and all(Path(jar).is_file() for jar in jars) else None


def _record_package_jars(conf) -> None:
    """After a start that resolved PACKAGES, list the jars Ivy gave (spark-submit puts
    them in spark.submit.pyFiles too) for the next start."""
    if not conf.contains("spark.jars.packages"):
        return
    jars = [jar for jar in conf.get("spark.submit.pyFiles", "").split(",") if jar.endswith(".jar")]
    if jars and all(Path(jar).is_file() for jar in jars):
        record = _packages_record()
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(".tmp")
        partial.write_text("\n".join(jars) + "\n")
        partial.replace(record)


_session = None


@contextlib.contextmanager
def _jvm_stderr_to_log():
    """Start the JVM with its stderr (Ivy's resolution report, Spark's log4j output)
    going to a log file, so floeline's own output stays readable. Set
    FLOELINE_SPARK_STDERR=1 to keep it on the terminal."""
    if os.environ.get("FLOELINE_SPARK_STDERR") == "1":
        yield
        return
    log_path = driver_log_path()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _pyspark_error_logs_to(log_path)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def driver_log_path() -> Path:
    """Where Spark's own output goes (FLOELINE_SPARK_STDERR=1: the terminal instead)."""
    return cache_dir() / "spark-driver.log"


# PySpark's loggers that print a failed query's error, with its whole JVM stack trace
# as JSON, on stderr before floeline's own one-line message (pyspark/errors).
PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _pyspark_error_logs_to(log_path: Path) -> None:
    """PySpark's error loggers write to Spark's log file instead of the terminal, so a
    failed statement shows floeline's one line and the trace stays in the log."""
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(logging.FileHandler(log_path, encoding="utf-8", delay=True))
        logger.propagate = False


def _launch_jvm_in_own_session(settings: dict[str, str]) -> None:
    """Start Spark's JVM (the Py4J gateway) in a session of its own. A Ctrl-C or a
    SIGTERM sent to floeline's process group then reaches Python alone, which stops the
    streaming query cleanly; were it to reach the JVM too, its shutdown hook would stop
    Spark under the running query. Under spark-submit the JVM exists already.

    The JVM ends with Python: a clean exit closes its stdin and the JVM exits. Python
    killed outright (SIGKILL) left the JVM running its query for seconds after, which
    let a connector restarted at once on the same checkpoint fail (two writers of
    Spark's offset log) or, when the old JVM finished a Delta commit after the restart
    had read the table's positions, write a batch twice. ParentWatch halts it within
    0.1 s of Python's death."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    logging.getLogger().addFilter(_py4j_lost_connection)
    gateway = launch_gateway(conf, {"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway)
    try:  # the JVM halts as soon as this Python is gone (resources/java/ParentWatch.java)
        gateway.jvm.floeline.ParentWatch.start(os.getpid())
    except Exception as exc:  # no floeline jar: it still exits on its stdin's EOF, slower
        log.warning("Spark's JVM will not halt at once if this process is killed: %s", exc)


def _py4j_lost_connection(record: logging.LogRecord) -> bool:
    """Drop py4j's own report (on the root logger, with a traceback) of a command cut
    off by the JVM's end: floeline says what that means itself (a clean stop when a
    stop signal reached the JVM, else 'Spark's JVM ended under it')."""
    return record.getMessage() != "Exception while sending command."


def under_spark_submit() -> bool:
    """True when spark-submit started this Python: its JVM exists and holds the master,
    the driver's address and the jars it was given."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(master: str = "local[2]", heap: str = DRIVER_MEMORY):
    """The process-wide SparkSession (created on first call). Under spark-submit
    `master` and `heap` are ignored: the session takes what spark-submit was given."""
    global _session
    if _session is None:
        startup.mark("spark start")
        _session = _submitted_session() if under_spark_submit() else _local_session(master, heap)
        startup.mark("spark ready")
        _session.sparkContext.setLogLevel(os.environ.get("FLOELINE_SPARK_LOG_LEVEL", "ERROR"))
    return _session


def _local_session(master: str, heap: str):
    from pyspark.sql import SparkSession

    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        # Local Python workers (decode stage, the Kinesis data source) run this
        # interpreter, which has floeline; `python3` from PATH may not.
        os.environ["PYSPARK_PYTHON"] = sys.executable

    settings = class_archive.with_archive(spark_conf(master, heap))
    if master.startswith("local"):
        settings.update(local_dir_conf())
    startup.note("jars", "resolved by Ivy" if "spark.jars.packages" in settings else "listed, Ivy skipped")
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_stderr_to_log():
        _launch_jvm_in_own_session(settings)
        session = builder.getOrCreate()
    _record_package_jars(session.sparkContext.getConf())
    return session


def local_dir_conf(root: Path | None = None) -> dict[str, str]:
    """Spark's scratch folder (spark.local.dir) for this process alone, under the
    system's temporary folder, with those of processes that are gone removed first: a
    JVM halted when its Python dies (ParentWatch) deletes none of its temporary folders,
    so each killed or ended `floeline` command left a few in /tmp. Nothing when
    SPARK_LOCAL_DIRS says where Spark's scratch space goes."""
    if os.environ.get("SPARK_LOCAL_DIRS"):
        return {}
    root = root or Path(tempfile.gettempdir()) / f"floeline-spark-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    for entry in root.iterdir():
        if entry.name.isdigit() and not _process_alive(int(entry.name)):
            shutil.rmtree(entry, ignore_errors=True)
    mine = root / str(os.getpid())
    mine.mkdir(exist_ok=True)
    return {"spark.local.dir": str(mine)}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _submitted_session():
    """The session under spark-submit: its conf as given (master, driver address, jars,
    Python), floeline's session_defaults where it says nothing."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM
    given = SparkConf()  # spark-submit's settings (the JVM's spark.* system properties)
    builder = SparkSession.builder
    for key, value in session_defaults().items():
        if not given.contains(key):
            builder = builder.config(key, value)
    if not any(Path(jar).name.startswith("floeline-jvm-")
               for jar in given.get("spark.jars", "").split(",")):
        log.warning("spark-submit was not given floeline's JVM jar (floeline submit adds it "
                    "with --jars): every micro-batch takes the general path (slower)")
    return builder.getOrCreate()


def record_class_archive() -> Path | None:
    """Spark's class archive for this machine's local sessions (class_archive.py), made
    if it is not there: by set-up, and by `make test` before the suite."""
    return class_archive.record(spark_conf(), "from floeline.spark import _class_archive_run; _class_archive_run()")


def _class_archive_run() -> None:
    """The archive's recording child: the classes of a session's usual first steps (a
    query, a Delta write and read, VARIANT), then an orderly JVM exit, when the JVM
    writes the archive (a halt, as ParentWatch's when Python dies first, would not)."""
    spark = get_spark()
    table = str(Path(os.environ["FLOELINE_CLASS_ARCHIVE_TMP"]) / "table")
    spark.range(100).selectExpr("id", "CAST(id AS STRING) AS s").write.format("delta").save(table)
    spark.read.format("delta").load(table).where("id > 5").groupBy("s").count().collect()
    spark.sql("SELECT parse_json('{\"a\": 1}'):a::int").collect()
    process = spark.sparkContext._gateway.proc
    try:
        spark.sparkContext._jvm.java.lang.System.exit(0)
    except Exception:  # noqa: BLE001 - the call never answers: the JVM is exiting
        pass
    process.wait(300)


def java_class(spark, name: str):
    """The JVM class `name` (a Scala object's class: `name$`, its instance `.MODULE$`),
    made once per gateway. `spark._jvm.a.b.C` asks the JVM about each dot-separated
    name in turn: a table's commit on the many-table path made about 60 such round
    trips, 4 ms each with the commit threads and the stream sharing two cores. The
    class is found by name in the JVM on each call, as `spark._jvm`'s is."""
    from py4j.java_gateway import JavaClass

    client = spark.sparkContext._gateway._gateway_client
    made = _JAVA_CLASSES.get(name)
    if made is None or made[0] is not client:  # a Spark started again has another gateway
        made = _JAVA_CLASSES[name] = (client, JavaClass(name, client))
    return made[1]


_JAVA_CLASSES: dict[str, tuple[object, object]] = {}


def java_cause_is(exc: BaseException, class_names) -> bool:
    """True when the Java exception behind a PySpark error, or one of its causes, is an
    instance of one of `class_names`: its class or a superclass has that name. Compared
    by name, walking the class chain in the JVM, so no class is loaded: loading one by
    name depends on the calling thread's class loader, and the one of a py4j thread may
    not see the jars of spark.jars.packages (Delta's, Kafka's)."""
    return _java_cause(exc, class_names) is not None


def java_cause_message(exc: BaseException, class_names) -> str | None:
    """The message of the first Java exception behind `exc` (itself or a cause) that is
    an instance of one of `class_names` (see java_cause_is), or None."""
    throwable = _java_cause(exc, class_names)
    try:
        return None if throwable is None else str(throwable.getMessage())
    except Exception:  # noqa: BLE001 - the JVM is gone
        return None


def _java_cause(exc: BaseException, class_names):
    wanted = set(class_names)

    def class_chain(throwable):
        cls = throwable.getClass()
        for _depth in range(32):
            if cls is None:
                return
            yield cls.getName()
            cls = cls.getSuperclass()

    throwable = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    for _depth in range(16):
        if throwable is None:
            return None
        try:
            if wanted.intersection(class_chain(throwable)):
                return throwable
            throwable = throwable.getCause()
        except Exception:  # noqa: BLE001 - the JVM is gone
            return None
    return None
