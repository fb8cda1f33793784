"""Spark's class archive (class_archive.py): named by the JDK and the driver's class
path, used only when it is there, recorded only when set-up asks, and never in the
way of a user's own driver options."""

from __future__ import annotations

import os

import pytest

from floeline import class_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FLOELINE_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv(class_archive._RECORD_ENV, raising=False)
    return tmp_path


def test_the_archive_is_named_by_the_class_path(cache):
    jar = cache / "floeline-jvm.jar"
    jar.write_bytes(b"one")
    settings = {"spark.driver.extraClassPath": str(jar)}
    first = class_archive.archive_path(settings)
    assert first is not None and first.parent == cache / "cache" / "jvm-class-archive"
    assert class_archive.archive_path(settings) == first
    jar.write_bytes(b"a rebuilt jar")
    os.utime(jar, ns=(1, 1))
    assert class_archive.archive_path(settings) != first
    assert class_archive.archive_path({}) not in (first, class_archive.archive_path(settings))


def test_options_only_when_the_archive_is_there_and_a_users_options_are_kept(cache, monkeypatch):
    settings = {"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-Dmine=1"}
    assert class_archive.with_archive(settings) == settings
    path = class_archive.archive_path(settings)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = class_archive.with_archive(settings)["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dmine=1 ") and f"-XX:SharedArchiveFile={path}" in options
    assert "-Xlog:cds=off" in options
    monkeypatch.setenv("FLOELINE_CLASS_ARCHIVE", "off")
    assert class_archive.with_archive(settings) == settings


def test_a_recording_run_writes_where_set_up_says(cache, monkeypatch):
    monkeypatch.setenv(class_archive._RECORD_ENV, "/tmp/x/spark.jsa")
    options = class_archive.with_archive({})["spark.driver.extraJavaOptions"]
    assert options.startswith("-XX:ArchiveClassesAtExit=/tmp/x/spark.jsa")
