"""The one-pass record check compiled for the JVM (jvm.py, resources/KnownKeys.java):
TRUE only for valid UTF-8 JSON objects whose top-level keys are all known."""

import pytest

from floeline import jvm

KNOWN = frozenset({"a", "b", "Łułósżź", "has cat"})

CASES = [
    (b'{"a": 1}', True),
    (b'{"a":1,"b":"x"}', True),
    (b'{}', True),
    (b'  {"a" :1}  ', True),  # whitespace around keys and colons
    (b'{\n\t"a"\r\n:\t1\n}', True),
    ('{"Łułósżź": 1, "has cat": true}'.encode(), True),
    (b'{"a": {"x": "}", "zzz": [1]}, "b": "q\\"uote, \\"zzz\\": 1"}', True),  # nested, strings
    (b'{"a": [1, {"zzz": 2}, "]"], "b": null}', True),
    (b'{"a": 1, "a": 2}', True),  # duplicate known key: from_json keeps the last
    (b'{"a": 1}{"zzz": 2}', True),  # after the object: ignored, as from_json does
    (b'{"a": 1, "x": 2}', False),  # an unknown key
    (b'{"a" : 1, "zzz" : 2}', False),
    (b'{"A": 1}', False),  # keys are exact; case-folding is the general path's job
    (b'{"\\u0061": 1}', True),  # an escaped key is decoded: "a"
    (b'{"\\u0141u\\u0142\\u00f3s\\u017c\\u017a": 1}', True),  # json.dumps' "Łułósżź"
    (b'{"has\\u0020cat": 1, "\\"a": 2}', False),  # "has cat" is known, '"a' is not
    (b'{"a\\u0062": 1}', False),  # "ab"
    (b'{"a\\u00": 1}', False),  # a malformed escape
    (b'{"\\u+061": 1}', False),
    (b"{'a': 1}", False),
    (b'{"a": "\xff"}', False),  # invalid UTF-8
    (b'[{"a": 1}]', False),
    (b'"a"', False),
    (b'null', False),
    (b'', False),
    (b'{"a": ', False),
    (b'{"a": "open', False),
    (b'{"a": [1, 2}', False),
]


@pytest.fixture(scope="module")
def check(spark):
    name = jvm.ensure_known_keys(spark, KNOWN)
    assert jvm.ensure_known_keys(spark, KNOWN) == name  # registered once per session
    return name


@pytest.mark.parametrize("value,expected", CASES, ids=[repr(v)[:40] for v, _ in CASES])
def test_known_keys_check(spark, check, value, expected):
    row = spark.createDataFrame([(bytearray(value),)], "value binary").selectExpr(
        f"{check}(value) AS ok").first()
    assert row["ok"] is expected


def test_python_json_dumps_escapes_are_read_as_keys(spark, check):
    import json

    value = json.dumps({"Łułósżź": 1, "has cat": True, "a": "ß"}).encode()  # ensure_ascii
    assert b"\\u0141" in value
    row = spark.createDataFrame([(bytearray(value),)], "value binary").selectExpr(
        f"{check}(value) AS ok").first()
    assert row["ok"] is True


def test_null_value_is_not_plain(spark, check):
    assert spark.sql(f"SELECT {check}(CAST(NULL AS BINARY)) AS ok").first()["ok"] is False


def test_jar_is_built_once_per_source(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    jar = jvm.jar_path()
    assert jar.parent == tmp_path / "spark-jars" and "floeline/KnownKeys.class" in zipfile.ZipFile(jar).namelist()
    built = jar.stat().st_mtime_ns
    assert jvm.jar_path() == jar and jar.stat().st_mtime_ns == built  # cached, not rebuilt
