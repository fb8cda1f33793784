"""Building floeline's JVM code from resources/java/ with the machine's real javac: what
a machine without a JDK is told, and that a JDK which cannot build it is an error (no
Spark session)."""

import logging
import zipfile
from importlib import resources

import pytest

from floeline import jvm, spark
from floeline.errors import SetupError

BROKEN = {"Broken.java": b"package floeline; class Broken { int x = ; }"}


@pytest.fixture
def no_jdk(tmp_path, monkeypatch):
    """An empty cache and a PATH without javac (nothing built, nothing to build with)."""
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))


def test_missing_javac_names_the_jdk(no_jdk):
    with pytest.raises(jvm.NoJdk, match="not compiled: no JDK, `javac` is not on PATH"):
        jvm.jar_path()


def test_without_a_jdk_spark_runs_without_the_jars_and_says_what_is_slower(no_jdk, caplog):
    caplog.set_level(logging.WARNING, "floeline")
    assert spark._floeline_jar() == []
    assert spark._kafka_reader_jar(["/jars/org.apache.kafka_kafka-clients-4.1.0.jar"]) == []
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    for warning, without in zip(warnings, ("every micro-batch takes the general path",
                                           "connectors read Kafka with Spark's own source")):
        assert "no JDK, `javac` is not on PATH" in warning
        assert f"Running without it: {without}" in warning
        assert "install a JDK 17 or newer (apt-get install openjdk-17-jdk-headless)" in warning
        assert "floeline setup" in warning


def test_a_jdk_that_cannot_compile_is_an_error_naming_it(tmp_path):
    """Not a warning and a slower path: the error names javac's path and version."""
    jar = tmp_path / "broken.jar"
    with pytest.raises(SetupError) as raised:
        jvm.optional_jar(lambda: jvm._compile(BROKEN, jar, []), "slower")
    assert not isinstance(raised.value, jvm.NoJdk)
    message = str(raised.value)
    javac = jvm.shutil.which("javac")
    assert f"the JDK at {javac} ({jvm._javac_version(javac)}) could not compile floeline's Java (Broken.java)" in message
    assert "check the JDK (a JDK 17 or newer" in message
    assert "Broken.java:1: error" in message  # javac's own words follow
    assert not jar.exists()


@pytest.mark.parametrize("version", ["javac 11.0.22", "javac 1.8.0_292", "Picked up JAVA_TOOL_OPTIONS"])
def test_a_jdk_older_than_17_is_an_error_naming_its_version(version):
    with pytest.raises(SetupError, match=f"the JDK at /opt/jdk/bin/javac is '{version}'; .* Java 17"):
        jvm._check_release("/opt/jdk/bin/javac", version)


@pytest.mark.parametrize("version", ["javac 17.0.15", "javac 21", "javac 25-ea"])
def test_a_jdk_17_or_newer_is_accepted(version):
    jvm._check_release("/opt/jdk/bin/javac", version)


def test_every_java_source_is_in_resources_java_and_compiled(tmp_path, monkeypatch):
    """resources/java/ holds every Java source (none beside the poms) and each is in one
    of the jars; the functions' jar builds from there with this machine's JDK."""
    package = resources.files("floeline.resources")
    in_folder = {p.name for p in package.joinpath("java").iterdir() if p.name.endswith(".java")}
    assert not [p.name for p in package.iterdir() if p.name.endswith(".java")]
    compiled = [*jvm._SOURCES, *jvm.KAFKA_READER_SOURCES, *jvm.TABLE_COMMITS_SOURCES]
    assert sorted(compiled) == sorted(in_folder)
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    with zipfile.ZipFile(jvm.jar_path()) as jar:
        classes = {name for name in jar.namelist() if "$" not in name}
    assert classes == {f"floeline/{name.removesuffix('.java')}.class" for name in jvm._SOURCES}


class _Session:
    """Stands in for a Java SparkSession: an identity hash that two sessions may share,
    equal only to itself."""

    def __init__(self, hash_code: int):
        self._hash = hash_code

    def hashCode(self):  # noqa: N802 - the Java method's name
        return self._hash

    def equals(self, other):
        return self is other


def test_functions_registered_are_known_per_session_even_when_two_share_a_hash(monkeypatch):
    """_ensure asks the catalog once per session and function (functionExists took 5-20 ms
    a call, twice a batch); a session with another session's hash starts with nothing."""
    monkeypatch.setattr(jvm, "_REGISTERED", {})
    first, same_hash = _Session(7), _Session(7)
    jvm._registered_in(first).add("f")
    assert "f" in jvm._registered_in(first)
    assert "f" not in jvm._registered_in(same_hash)


def test_only_the_newest_sessions_are_held(monkeypatch):
    monkeypatch.setattr(jvm, "_REGISTERED", {})
    sessions = [_Session(i) for i in range(jvm._SESSIONS_KEPT + 5)]
    for session in sessions:
        jvm._registered_in(session).add("f")
    assert len(jvm._REGISTERED) == jvm._SESSIONS_KEPT
    assert "f" in jvm._registered_in(sessions[-1])
    assert "f" not in jvm._registered_in(sessions[0])  # let go: asked again


@pytest.fixture
def resolved_packages(monkeypatch):
    """Spark's packages as set-up finds them once resolved (the paths only: nothing is
    compiled against them in these tests)."""
    monkeypatch.setattr(spark, "kafka_clients_jar", lambda: "/jars/org.apache.kafka_kafka-clients-4.1.0.jar")
    monkeypatch.setattr(spark, "resolved_package_jars", lambda: [
        "/jars/io.delta_delta-spark_2.13-4.4.0.jar", "/jars/io.delta_delta-storage-4.4.0.jar"])


def test_setup_without_a_jdk_says_what_is_not_built_and_how_to_build_it(no_jdk, resolved_packages, capsys):
    from floeline.cli import _build_optional_jars

    _build_optional_jars()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("floeline's Kafka reader: not built (")
    assert lines[1].startswith("floeline's table commits: not built (")
    assert all("`javac` is not on PATH" in line and jvm.JDK_FIX in line for line in lines)


def test_setup_with_a_jdk_that_cannot_compile_stops_naming_it(tmp_path, monkeypatch, resolved_packages):
    """`floeline setup` used to print "not built" for any error and go on: a broken JDK
    then left every connector on the slower paths."""
    from floeline.cli import _build_optional_jars

    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    monkeypatch.setattr(jvm, "_sources", lambda names: BROKEN)
    with pytest.raises(SetupError, match="could not compile floeline's Java \\(Broken.java\\)"):
        _build_optional_jars()
