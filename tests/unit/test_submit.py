"""`floeline submit`: the spark-submit line it builds, what it says when set-up has not
run, and the settings a session takes locally and on a cluster (no Spark started)."""

from __future__ import annotations

import os
import zipfile

import pytest

from floeline import cli, jvm, spark, submit
from floeline.errors import SetupMissing


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def set_up(cache):
    """The jars `make setup` leaves in the cache (empty files will do here)."""
    jars = cache / "spark-jars"
    (jars / "s3a").mkdir(parents=True)
    (jars / f"spark-token-provider-kafka-0-10_2.13-{spark.SPARK_VERSION}.jar").touch()
    (jars / "s3a" / "hadoop-aws-3.5.0.jar").touch()
    (jars / "s3a" / ".floeline-complete").write_text(spark.S3A_VERSION)
    jvm.expected_jar().touch()
    return jars


def _config(tmp_path, **extra):
    path = tmp_path / "c.properties"
    path.write_text("name=orders_connector\ntopics=orders\nbootstrap.servers=127.0.0.1:9\n"
                    + "".join(f"{k}={v}\n" for k, v in extra.items()))
    return path


def test_missing_jars_name_make_setup_and_nothing_is_built(cache, monkeypatch):
    monkeypatch.setenv("PATH", "")  # were mvn or javac run, they would not be found
    with pytest.raises(SetupMissing) as caught:
        submit.submit_command("c.properties", "spark://h:7077", name="c")
    message = str(caught.value)
    assert "make setup" in message and "floeline setup" in message
    for what in ("spark-token-provider-kafka", "s3a jars", "JVM functions"):
        assert what in message
    assert not (cache / "spark-jars").exists()


def test_the_command_carries_jars_packages_python_and_the_given_master(set_up, tmp_path):
    config = _config(tmp_path)
    cmd = submit.submit_command(str(config), "spark://10.0.0.5:7077", name="orders_connector",
                                until_caught_up=True, python="/opt/venv/bin/python",
                                spark_args=["--conf", "spark.driver.host=10.0.0.9"])
    assert cmd[0] == str(submit.spark_submit_path()) and submit.spark_submit_path().exists()
    opts = dict(zip(cmd[1:], cmd[2:]))
    assert opts["--master"] == "spark://10.0.0.5:7077"
    assert opts["--deploy-mode"] == "client"
    assert opts["--packages"] == ",".join(spark.PACKAGES)
    assert opts["--exclude-packages"] == ",".join(spark.EXCLUDES)
    assert opts["--jars"].split(",") == [str(j) for j in spark.setup_jars()]
    assert str(jvm.expected_jar()) in opts["--jars"].split(",")
    assert "spark.pyspark.python=/opt/venv/bin/python" in cmd
    # the user's spark-submit options come after floeline's (the last one wins)
    assert cmd.index("spark.driver.host=10.0.0.9") > cmd.index("spark.pyspark.python=/opt/venv/bin/python")
    assert "spark.master" not in " ".join(cmd) and "127.0.0.1" not in " ".join(cmd)
    driver = cmd.index(next(part for part in cmd if part.endswith("driver.py")))
    assert cmd[driver + 1:] == ["run", str(config), "--until-caught-up"]
    with zipfile.ZipFile(opts["--py-files"]) as zf:
        names = set(zf.namelist())
    assert {"floeline/cli.py", "floeline/spark.py", "floeline/resources/java/KnownKeys.java"} <= names
    assert not any("__pycache__" in n for n in names)
    # made once per version of the code
    assert submit.python_bundle() == submit.python_bundle()


def test_cli_print_defaults_the_master_to_the_config_and_passes_args_after_dashes(
        set_up, tmp_path, capsys):
    config = _config(tmp_path, **{"floeline.spark.master": "spark://m:7077"})
    assert cli.main(["submit", str(config), "--print", "--", "--executor-memory", "512m"]) == 0
    line = capsys.readouterr().out
    assert "--master spark://m:7077" in line
    assert line.rstrip().endswith(f"--executor-memory 512m {submit.python_bundle()}/driver.py "
                                  f"run {config}")


def test_cli_submit_worker_runs_floeline_worker_as_the_driver_with_the_worker_master(
        set_up, tmp_path, capsys):
    worker = tmp_path / "worker.properties"
    worker.write_text("floeline.spark.master=spark://w:7077\nlisteners=http://127.0.0.1:8083\n")
    assert cli.main(["submit", "--worker", str(worker), "--print", "--", "--executor-memory", "1g"]) == 0
    line = capsys.readouterr().out
    assert "--master spark://w:7077" in line and "--name floeline-worker" in line
    assert line.rstrip().endswith(f"--executor-memory 1g {submit.python_bundle()}/driver.py "
                                  f"worker {worker}")
    # One of a connector config and --worker; a bad worker key stops it before Spark.
    assert cli.main(["submit", "--worker", str(worker), str(worker), "--print"]) == 1
    assert "one of the two" in capsys.readouterr().err
    worker.write_text("listner=http://127.0.0.1:1\n")
    assert cli.main(["submit", "--worker", str(worker), "--print"]) == 1
    assert "did you mean 'listeners'" in capsys.readouterr().err


def test_cli_submit_without_set_up_is_one_clear_error(cache, tmp_path, capsys):
    assert cli.main(["submit", str(_config(tmp_path)), "--master", "spark://m:7077", "--print"]) == 1
    assert "make setup" in capsys.readouterr().err


def test_local_runs_bind_the_driver_to_loopback_and_a_cluster_master_does_not(set_up):
    local = spark.spark_conf()
    assert local["spark.master"] == "local[2]" and local["spark.driver.host"] == "127.0.0.1"
    remote = spark.spark_conf("spark://10.0.0.5:7077")
    assert remote["spark.master"] == "spark://10.0.0.5:7077"
    assert "spark.driver.host" not in remote and "spark.driver.bindAddress" not in remote
    # what a spark-submitted session adds where its conf is silent: no master, address, jars
    for key in ("spark.master", "spark.driver.host", "spark.driver.bindAddress", "spark.jars",
                "spark.jars.packages", "spark.driver.memory"):
        assert key not in spark.session_defaults()
    assert spark.session_defaults()["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


class _Conf(dict):
    """SparkConf's contains/get over a dict (what a started session's conf answers)."""

    def contains(self, key):
        return key in self


def test_a_start_that_resolved_packages_lets_the_next_skip_ivy(set_up, tmp_path):
    ivy = [tmp_path / "ivy" / "io.delta_delta-spark_4.2_2.13-4.4.0.jar",
           tmp_path / "ivy" / "org.apache.kafka_kafka-clients-3.9.2.jar"]
    ivy[0].parent.mkdir()
    for jar in ivy:
        jar.touch()
    jvm.expected_kafka_reader_jar(str(ivy[1])).touch()  # set-up built the reader against it
    first = spark.spark_conf()
    assert first["spark.jars.packages"] == ",".join(spark.PACKAGES)
    # what spark-submit reports after resolving (the package jars, in spark.submit.pyFiles)
    spark._record_package_jars(_Conf({"spark.jars.packages": first["spark.jars.packages"],
                                      "spark.submit.pyFiles": ",".join(map(str, ivy))}))
    second = spark.spark_conf()
    assert "spark.jars.packages" not in second and "spark.jars.excludes" not in second
    # a local master reads them from the driver's class path (spark.local_class_path), a
    # cluster's executors through spark.jars
    assert second["spark.jars"] == ""
    assert second["spark.driver.extraClassPath"].split(os.pathsep)[-2:] == [str(j) for j in ivy]
    assert spark.spark_conf("spark://h:7077")["spark.jars"].split(",")[-2:] == [str(j) for j in ivy]
    # a start given the listed jars records nothing new; a jar gone from Ivy's cache
    # (cleaned, or another version) makes the next start resolve again
    spark._record_package_jars(_Conf({"spark.jars": second["spark.jars"]}))
    ivy[1].unlink()
    assert spark.spark_conf()["spark.jars.packages"] == ",".join(spark.PACKAGES)


def test_the_worker_starts_with_a_smaller_heap_and_the_environment_overrides_both(
        set_up, tmp_path, monkeypatch):
    monkeypatch.delenv("FLOELINE_DRIVER_MEMORY", raising=False)
    assert spark.spark_conf()["spark.driver.memory"] == spark.DRIVER_MEMORY == "2g"
    assert spark.spark_conf(heap=spark.WORKER_DRIVER_MEMORY)["spark.driver.memory"] == "1200m"
    worker = tmp_path / "worker.properties"
    worker.write_text("listeners=http://127.0.0.1:8083\n")

    def heap(cmd):
        return dict(zip(cmd[1:], cmd[2:]))["--driver-memory"]

    assert heap(submit.submit_command(str(worker), "spark://w:7077", name="worker", command="worker")) == "1200m"
    assert heap(submit.submit_command(str(_config(tmp_path)), "spark://w:7077", name="c")) == "2g"
    monkeypatch.setenv("FLOELINE_DRIVER_MEMORY", "3g")
    assert spark.spark_conf(heap=spark.WORKER_DRIVER_MEMORY)["spark.driver.memory"] == "3g"
    assert heap(submit.submit_command(str(worker), "spark://w:7077", name="worker", command="worker")) == "3g"
