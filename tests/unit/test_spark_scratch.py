"""Spark's scratch space and jars for a local session (spark.py): a folder per process,
those of processes that are gone removed at the next start; the jars on the driver's
class path, after Spark's own, instead of spark.jars (which Spark's executor copies
into the scratch space at every start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from floeline import spark


def test_each_process_gets_a_scratch_folder_and_gone_ones_are_removed(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    gone = tmp_path / ended.stdout.strip()
    (gone / "spark-1" / "userFiles-1").mkdir(parents=True)
    (gone / "spark-1" / "userFiles-1" / "left.jar").write_bytes(b"x" * 1000)
    alive = tmp_path / str(os.getppid())  # this test's parent: running
    alive.mkdir()
    other = tmp_path / "not-a-pid"
    other.mkdir()

    conf = spark.local_dir_conf(tmp_path)

    assert conf == {"spark.local.dir": str(tmp_path / str(os.getpid()))}
    assert (tmp_path / str(os.getpid())).is_dir()
    assert not gone.exists(), "a gone process's scratch folder is removed"
    assert alive.is_dir() and other.is_dir(), "a running process's folder and other names stay"


def test_spark_local_dirs_keeps_its_say(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    assert spark.local_dir_conf(tmp_path / "unused") == {}
    assert not (tmp_path / "unused").exists()


def test_local_jars_go_on_the_class_path_after_sparks_own():
    jars = ["/c/floeline-jvm-abc.jar", "/c/com.fasterxml.jackson.core_jackson-databind-2.13.5.jar", "/c/k.jar"]
    conf = spark.local_class_path(jars)
    path = conf["spark.driver.extraClassPath"].split(os.pathsep)
    assert conf["spark.jars"] == ""
    assert path[0] == jars[0]
    assert Path(path[1]).parent.name == "jars" and path[1].endswith("*")  # Spark's jars, then the rest
    assert path[2:] == jars[1:]
