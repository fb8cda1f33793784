"""Building floeline's JVM function: what a machine without a JDK is told (no Spark)."""

import pytest

from floeline import jvm
from floeline.errors import SetupError


def test_missing_javac_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    monkeypatch.setattr(jvm.shutil, "which", lambda _name: None)
    with pytest.raises(SetupError, match="javac.*apt-get install openjdk-17-jdk-headless"):
        jvm.jar_path()


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
