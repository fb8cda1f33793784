"""Building floeline's JVM function: what a machine without a JDK is told (no Spark)."""

import pytest

from floeline import jvm
from floeline.errors import SetupError


def test_missing_javac_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    monkeypatch.setattr(jvm.shutil, "which", lambda _name: None)
    with pytest.raises(SetupError, match="javac.*apt-get install openjdk-17-jdk-headless"):
        jvm.jar_path()
