"""Spark's JVM starts from set-up's class archive (class_archive.py): a session
floeline launches loads Spark's classes from the archive (the JVM's own class-load log
says "shared objects file (top)", the dynamic archive), and an archive that does not
match the class path costs nothing but the speed: not a word on the JVM's output."""

from __future__ import annotations

import subprocess
import sys

from floeline import class_archive
from floeline.spark import record_class_archive

_SESSION = """
import floeline.spark as fs
conf = fs.spark_conf
fs.spark_conf = lambda *a, **k: {**conf(*a, **k), "spark.driver.extraJavaOptions": "-Xlog:class+load=info:file=%s"}
spark = fs.get_spark()
spark.range(3).count()
print("ARGS", list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
"""


def test_a_session_loads_sparks_classes_from_the_archive(tmp_path):
    archive = record_class_archive()  # made by set-up (and `make test`) already
    assert archive is not None and archive.exists()
    loads = tmp_path / "class-load.log"
    done = subprocess.run([sys.executable, "-c", _SESSION % loads], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"-XX:SharedArchiveFile={archive}" in done.stdout
    spark_classes = [line for line in loads.read_text().splitlines() if " org.apache.spark.SparkContext " in line]
    assert spark_classes and "shared objects file (top)" in spark_classes[0], spark_classes


def test_an_archive_that_does_not_match_is_silent(tmp_path):
    archive = record_class_archive()
    java = class_archive._java()
    done = subprocess.run([str(java), f"-XX:SharedArchiveFile={archive}", *class_archive._QUIET.split(),
                           "-cp", str(tmp_path), "-version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "archive" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    loud = subprocess.run([str(java), f"-XX:SharedArchiveFile={archive}", "-cp", str(tmp_path), "-version"],
                          capture_output=True, text=True, timeout=60)
    assert "archive" in (loud.stdout + loud.stderr).lower()  # what _QUIET keeps off the output
