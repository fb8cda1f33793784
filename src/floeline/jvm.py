"""floeline's own JVM code, small Spark functions for the one-pass micro-batches,
compiled once against the installed PySpark's jars (by `floeline setup`, or the first
get_spark) and added to the sessions get_spark builds:
- the record check (`resources/java/KnownKeys.java`): it runs on every record, and the
  Spark SQL version of it (a second JSON parse for the keys) cost a fifth of the batch;
  the JVM function scans the bytes once (measured: 1.99 s -> 1.53 s for a 340k-record
  batch);
- the one-pass MERGE's field check (`resources/java/ExactFields.java`): a change's after
  image and its key hold exactly the table's fields, for the same reason;
- the watch that ends the JVM when its Python is gone (`resources/java/ParentWatch.java`);
- RECORD_METADATA of a Kafka record without headers (`resources/java/KafkaMetadata.java`):
  casting a struct to a VARIANT cost 5-6 % of a one-pass batch's task time;
- the batch's push time (`resources/java/PushTime.java`): as a literal it changed the
  generated code every batch (measured: +0.15 s per batch to compile and warm it up);
- Hadoop's local file system without a `chmod` or `readlink` process per call
  (`resources/java/LocalFiles.java`, see spark.local_files_conf);
- in a jar of its own, floeline's Kafka reader (`resources/java/GroupedKafka.java`,
  `floeline.kafka.reader=grouped` in sources/kafka.py): a consumer per task instead of
  one per topic partition;
- in a jar of its own, the commits of a batch's tables written together
  (`resources/java/TableCommits.java`, warehouse/commits.FilesCommits): one py4j call per
  table's commit instead of about 40.
The Java sources are in `resources/java/`. Compiling needs a JDK 17+ `javac`, which
the Makefile asks for. Without one (NoJdk) Spark still starts without the jars, with a
warning saying what runs slower and how to fix it (`optional_jar`); a JDK that is too
old or cannot compile the sources is an error naming the JDK, never a silent slow path."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from floeline.cache import cache_dir
from floeline.errors import SetupError, SetupMissing

log = logging.getLogger("floeline")

_SOURCES = ("JsonScan.java", "KnownKeys.java", "ExactFields.java", "PushTime.java", "ParentWatch.java",
            "LocalFiles.java", "KafkaMetadata.java")
PUSH_TIME_FUNCTION = "floeline_push_time_ms"
# floeline's Kafka reader: a jar of its own, compiled against Spark's Kafka client jar.
KAFKA_READER_SOURCES = ("GroupedKafka.java",)
KAFKA_READER_CLASS = "floeline.kafka.GroupedKafka"
# The commits of tables written together: a jar of its own, compiled against Delta's jars.
TABLE_COMMITS_SOURCES = ("TableCommits.java",)
TABLE_COMMITS_CLASS = "floeline.delta.TableCommits"
JAVA_RELEASE = 17  # javac --release: the Java Spark 4 runs on
JDK_FIX = "install a JDK 17 or newer (apt-get install openjdk-17-jdk-headless) and run `floeline setup`"


class NoJdk(SetupError):
    """No `javac` on PATH: floeline runs without its compiled JVM code (optional_jar
    says so); a JDK that is there but fails is a SetupError."""


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _sources(names=_SOURCES) -> dict[str, bytes]:
    folder = resources.files("floeline.resources").joinpath("java")
    return {name: folder.joinpath(name).read_bytes() for name in names}


def _jar_file(sources: dict[str, bytes], stem: str = "floeline-jvm", also: bytes = b"") -> Path:
    import pyspark

    digest = hashlib.sha256(b"".join(sources.values()) + pyspark.__version__.encode() + also).hexdigest()[:12]
    return cache_dir() / "spark-jars" / f"{stem}-{digest}.jar"


def expected_jar() -> Path:
    """Where jar_path() keeps the jar (built or not)."""
    return _jar_file(_sources())


def jar_path(build: bool = True) -> Path:
    """The compiled jar in floeline's cache, built on first use (a few seconds) unless
    `build` is false (then a missing jar is a SetupMissing error: `floeline submit`
    never runs javac). Its name holds a digest of the source and the PySpark version,
    so a change rebuilds it."""
    sources = _sources()
    jar = _jar_file(sources)
    if not jar.exists():
        if not build:
            raise SetupMissing(f"floeline's JVM functions are not compiled ({jar} is missing)")
        _compile(sources, jar, [str(_pyspark_jars() / "*")])
    return jar


def kafka_reader_jar(kafka_clients: str | None, build: bool = True) -> Path:
    """floeline's Kafka reader (`resources/java/GroupedKafka.java`, sources/kafka.py), compiled
    against `kafka_clients`, the Kafka client jar of Spark's Kafka package, which it runs
    beside: like it, the jar goes in spark.jars only (a class on the JVM's own classpath,
    where floeline-jvm's LocalFiles must be, cannot see spark.jars). Built by set-up once
    Spark's packages are resolved (None: not yet, a SetupMissing error), or on first use;
    `build` false: a missing jar is a SetupMissing error."""
    if kafka_clients is None:
        raise SetupMissing("floeline's Kafka reader is compiled once Spark's packages are resolved")
    jar = expected_kafka_reader_jar(kafka_clients)
    if not jar.exists():
        if not build:
            raise SetupMissing(f"floeline's Kafka reader is not compiled ({jar} is missing)")
        _compile(_sources(KAFKA_READER_SOURCES), jar, [str(_pyspark_jars() / "*"), kafka_clients])
    return jar


def expected_kafka_reader_jar(kafka_clients: str) -> Path:
    """Where kafka_reader_jar() keeps the reader built against `kafka_clients` (built or not)."""
    return _jar_file(_sources(KAFKA_READER_SOURCES), "floeline-kafka-reader", Path(kafka_clients).name.encode())


def table_commits_jar(resolved: list[str] | None, build: bool = True) -> Path:
    """floeline's commits of tables written together (`resources/java/TableCommits.java`),
    compiled against Delta's jars among `resolved` (Spark's packages, which it runs
    beside in spark.jars, as the Kafka reader does). Built by set-up once the packages
    are resolved (None: not yet, a SetupMissing error), or on first use; `build` false:
    a missing jar is a SetupMissing error."""
    delta = sorted(j for j in resolved or [] if Path(j).name.startswith(("io.delta_delta-spark", "io.delta_delta-storage")))
    if len(delta) < 2:
        raise SetupMissing("floeline's table commits are compiled once Spark's packages are resolved")
    sources = _sources(TABLE_COMMITS_SOURCES)
    jar = _jar_file(sources, "floeline-table-commits", "".join(Path(j).name for j in delta).encode())
    if not jar.exists():
        if not build:
            raise SetupMissing(f"floeline's table commits are not compiled ({jar} is missing)")
        _compile(sources, jar, [str(_pyspark_jars() / "*"), *delta])
    return jar


def optional_jar(build: Callable[[], Path], without: str) -> list[str]:
    """[the jar `build` returns], or [] with a warning naming what runs `without` it and
    the fix when there is no JDK to compile it. Any other set-up error is raised: a JDK
    that cannot compile floeline's Java must not leave it on slower paths unsaid."""
    try:
        return [str(build())]
    except NoJdk as exc:
        log.warning("%s\nRunning without it: %s. To build it: %s.", exc, without, JDK_FIX)
        return []


def _compile(sources: dict[str, bytes], jar: Path, classpath: list[str]) -> None:
    """javac `sources` against `classpath` into `jar` (replaced atomically)."""
    javac = shutil.which("javac")
    if javac is None:
        raise NoJdk(f"floeline's Java ({', '.join(sources)}) is not compiled: no JDK, `javac` is not on PATH")
    version = _javac_version(javac)
    _check_release(javac, version)
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="floeline-jvm-") as work:
        paths = []
        for name, text in sources.items():
            paths.append(Path(work) / name)
            paths[-1].write_bytes(text)
        classes = Path(work) / "classes"
        done = subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(classes),
                               "-cp", os.pathsep.join(classpath), *map(str, paths)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise SetupError(f"the JDK at {javac} ({version}) could not compile floeline's Java "
                             f"({', '.join(sources)}) against {os.pathsep.join(classpath)}; check the JDK "
                             f"(a JDK 17 or newer: apt-get install openjdk-17-jdk-headless) and any jar "
                             f"javac names, then run `floeline setup`. javac said:\n{done.stderr[-2000:]}")
        partial = jar.with_suffix(f".{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(partial, "w") as out:
                for path in sorted(classes.rglob("*.class")):
                    out.write(path, path.relative_to(classes).as_posix())
            os.replace(partial, jar)  # atomic: a concurrent set-up never sees half a jar
        finally:
            partial.unlink(missing_ok=True)


@lru_cache(maxsize=None)
def _javac_version(javac: str) -> str:
    """`javac -version`'s answer ("javac 17.0.15"; JDK 8 prints it on stderr)."""
    try:
        done = subprocess.run([javac, "-version"], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"the JDK's javac at {javac} does not run ({exc}); {JDK_FIX}") from None
    return (done.stdout + done.stderr).strip() or f"exit status {done.returncode}"


def _check_release(javac: str, version: str) -> None:
    """A javac older than JAVA_RELEASE (or not answering as javac) cannot compile for
    Spark's Java: an error naming the one found."""
    found = re.search(r"javac (\d+)(?:\.(\d+))?", version)
    major = 0
    if found:  # JDK 8 and older say "javac 1.8.0_292"
        major = int(found[2]) if found[1] == "1" and found[2] else int(found[1])
    if major < JAVA_RELEASE:
        raise SetupError(f"the JDK at {javac} is {version!r}; floeline compiles its Java for Java "
                         f"{JAVA_RELEASE}: {JDK_FIX}")


def known_keys_function(known_keys: frozenset[str]) -> str:
    """The SQL name of the check for this key set (one per key set, see ensure_known_keys)."""
    return f"floeline_known_keys_{_digest(sorted(known_keys))}"


def exact_fields_function(member: str | None, fields: frozenset[str]) -> str:
    """The SQL name of the check that `member` of a value (None: the value itself) is an
    object of exactly `fields` (see ensure_exact_fields)."""
    return f"floeline_exact_fields_{_digest([member, sorted(fields)])}"


def _digest(value) -> str:
    # JSON of the sorted keys: one text per key set, whatever characters the keys hold.
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def ensure_known_keys(spark, known_keys: frozenset[str]) -> str:
    """Register `known_keys_function(known_keys)(value BINARY) -> BOOLEAN` in this session
    unless it is there (the key set is fixed when the function is made, not passed per
    record). Returns the function's name."""
    return _ensure(spark, known_keys_function(known_keys),
                   lambda java: java.floeline.KnownKeys(_strings(spark, sorted(known_keys))))


def ensure_exact_fields(spark, member: str | None, fields: frozenset[str]) -> str:
    """Register `exact_fields_function(member, fields)(value BINARY) -> BOOLEAN` in this
    session unless it is there. Returns the function's name."""
    return _ensure(spark, exact_fields_function(member, fields),
                   lambda java: java.floeline.ExactFields(member, _strings(spark, sorted(fields))))


def _strings(spark, values: list[str]):
    array = spark.sparkContext._gateway.new_array(spark._jvm.java.lang.String, len(values))
    for i, value in enumerate(values):
        array[i] = value
    return array


def _ensure(spark, name: str, make, result_type: str = "BooleanType") -> str:
    """Register `make(spark._jvm)` as the function `name` (returning DataTypes.`result_type`)
    in this session unless this process registered it there before."""
    names = _registered_in(spark._jsparkSession)
    if name not in names:
        java = spark._jvm
        if not spark.catalog.functionExists(name):
            spark._jsparkSession.udf().register(
                name, make(java), getattr(java.org.apache.spark.sql.types.DataTypes, result_type))
        names.add(name)
    return name


# The functions _ensure registered per Java SparkSession: identity hash -> (the session,
# the names), the most recent _SESSIONS_KEPT sessions. Every micro-batch hands Python a
# new wrapper of its stream's one session, and the catalog's functionExists took 5-20 ms
# a call, twice a batch; holding the session keeps its identity from being reused.
_REGISTERED: dict[int, tuple[object, set[str]]] = {}
_SESSIONS_KEPT = 64
_REGISTERED_LOCK = threading.Lock()  # (a worker's connectors run their batches in threads)


def _registered_in(session) -> set[str]:
    """The names _ensure registered in the Java `session` (a set to add to)."""
    key = session.hashCode()
    with _REGISTERED_LOCK:
        entry = _REGISTERED.pop(key, None)
        if entry is None or not entry[0].equals(session):  # (two sessions may share a hash)
            entry = (session, set())
        _REGISTERED[key] = entry  # the newest last
        while len(_REGISTERED) > _SESSIONS_KEPT:
            del _REGISTERED[next(iter(_REGISTERED))]
        return entry[1]


def _metadata_parts(flags) -> tuple[bool, ...]:
    return flags.topic, flags.offset_and_partition, flags.createtime, flags.connector_push_time


def kafka_metadata_function(flags) -> str:
    """The SQL name of RECORD_METADATA's builder for these snowflake.metadata.* `flags`
    (records/metadata.py's kafka_metadata_sql says how it is called)."""
    return "floeline_kafka_metadata_" + "".join("1" if p else "0" for p in _metadata_parts(flags))


def ensure_kafka_metadata(spark, flags) -> str:
    """Register `kafka_metadata_function(flags)` in this session unless it is there.
    Returns the function's name."""
    return _ensure(spark, kafka_metadata_function(flags),
                   lambda java: java.floeline.KafkaMetadata(*_metadata_parts(flags)), "VariantType")


def register_push_time(spark, epoch_millis: int) -> str:
    """Register `floeline_push_time_ms()` returning this batch's push time (see
    resources/java/PushTime.java for why it is not a literal). Returns the function's name."""
    java = spark._jvm
    # A Spark UDF is never folded into a literal (ScalaUDF is not foldable).
    spark._jsparkSession.udf().register(PUSH_TIME_FUNCTION, java.floeline.PushTime(epoch_millis),
                                        java.org.apache.spark.sql.types.DataTypes.LongType)
    return PUSH_TIME_FUNCTION
