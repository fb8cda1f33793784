"""The one-pass record checks compiled for the JVM (jvm.py, resources/): KnownKeys, TRUE
only for valid UTF-8 JSON objects whose top-level keys are all known; ExactFields, TRUE
only when a member of such an object (or the value itself) holds exactly the given
fields."""

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
    # after more than eight ASCII bytes (the check skips ASCII a word at a time)
    (b'{"a": "abcdefghijklmnop\xff"}', False),
    (b'{"a": "abcdefghijklmno\xe2\x82"}', False),  # a character cut short
    (b'{"a": "abcdefghijklmnop\xc0\xaf"}', False),  # an overlong encoding
    (b'{"a": "abcdefghijklmnop\xed\xa0\x80"}', False),  # a surrogate
    ('{"a": "abcdefghijklmnop€ŁAAAAAAAAAA😀"}'.encode(), True),
    ('{"Łułósżź": "abcdefgh", "b": "€"}'.encode(), True),
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


def test_utf8_check_agrees_with_strict_decoding_at_every_alignment(spark, check):
    """Random string contents, mostly ASCII with a few high bytes at varying places (the
    check skips ASCII eight bytes at a time): TRUE exactly when Python's strict UTF-8
    decoder accepts the value."""
    import random

    rng = random.Random(26)
    pieces = [b"a", b"bc", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff", b"\xc3",
              b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80"]
    values = []
    for _ in range(400):
        body = b"x" * rng.randrange(0, 20) + b"".join(
            rng.choice(pieces[:2] * 8 + pieces[2:]) for _ in range(rng.randrange(0, 12)))
        values.append(b'{"a": "' + body + b'"}')
    expected = []
    for value in values:
        try:
            value.decode("utf-8")
            expected.append(True)
        except UnicodeDecodeError:
            expected.append(False)
    assert 50 < sum(expected) < 350  # both answers are tried
    rows = spark.createDataFrame([(i, bytearray(v)) for i, v in enumerate(values)], "i int, value binary") \
        .selectExpr("i", f"{check}(value) AS ok").collect()
    assert [r["ok"] for r in sorted(rows, key=lambda r: r["i"])] == expected


def test_null_value_is_not_plain(spark, check):
    assert spark.sql(f"SELECT {check}(CAST(NULL AS BINARY)) AS ok").first()["ok"] is False


def test_jar_is_built_once_per_source(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    jar = jvm.jar_path()
    assert jar.parent == tmp_path / "spark-jars" and "floeline/KnownKeys.class" in zipfile.ZipFile(jar).namelist()
    built = jar.stat().st_mtime_ns
    assert jvm.jar_path() == jar and jar.stat().st_mtime_ns == built  # cached, not rebuilt


FIELDS = frozenset({"id", "name", "Łułósżź"})

EXACT_AFTER = [
    ('{"op": "u", "after": {"id": 1, "name": "x", "Łułósżź": null}}', True),
    ('{"after":{"name":"}","Łułósżź":[1,{"zzz":2}],"id":{"a":1}},"before":null}', True),
    ('{"before": {"id": 1, "zzz": 2}, "after": {"id": 1, "name": "x", '
     '"\\u0141u\\u0142\\u00f3s\\u017c\\u017a": 2}}', True),  # json.dumps' "Łułósżź"
    ('{"\\u0061fter": {"id": 1, "name": "x", "Łułósżź": 2}}', True),  # "after", escaped
    ('{"after": {"id": 1, "name": "x"}}', False),  # a field missing
    ('{"after": {"id": 1, "name": "x", "Łułósżź": 2, "email": 3}}', False),  # one more
    ('{"after": {"id": 1, "id": 1, "name": "x"}}', False),  # a field twice, one missing
    ('{"after": {"id": 1, "name": "x", "Łułósżź": 2, "id": 3}}', False),  # a field twice
    ('{"after": null, "op": "d"}', False),
    ('{"op": "c"}', False),  # no after image
    ('{"after": {"id": 1, "name": "x", "Łułósżź": 2}, "after": {"id": 1}}', False),  # two
    (b'{"after": {"id": 1, "name": "x", "\xc5\x81u\xc5\x82\xc3\xb3s\xc5\xbc\xc5\xba": "\xff"}}', False),  # invalid UTF-8
    ('{"after": {"ID": 1, "name": "x", "Łułósżź": 2}}', False),  # exact names
    ('{"after": {"id": 1, "name": "x", "Łułósżź": 2}', False),  # unterminated
]


@pytest.mark.parametrize("value,expected", EXACT_AFTER, ids=[repr(v)[:50] for v, _ in EXACT_AFTER])
def test_exact_fields_of_a_member(spark, value, expected):
    name = jvm.ensure_exact_fields(spark, "after", FIELDS)
    assert jvm.ensure_exact_fields(spark, "after", FIELDS) == name  # registered once per session
    value = value.encode() if isinstance(value, str) else value
    row = spark.createDataFrame([(bytearray(value),)], "value binary").selectExpr(f"{name}(value) AS ok").first()
    assert row["ok"] is expected


@pytest.mark.parametrize("value,expected", [
    (b'{"id": 7}', True), (b' {"id" : "x"} ', True), (b'{}', False), (b'{"id": 7, "v": 1}', False),
    (b'7', False), (b'null', False), (b'', False)])
def test_exact_fields_of_the_value_itself(spark, value, expected):
    name = jvm.ensure_exact_fields(spark, None, frozenset({"id"}))
    assert name != jvm.exact_fields_function("id", frozenset({"id"}))
    row = spark.createDataFrame([(bytearray(value),)], "value binary").selectExpr(f"{name}(value) AS ok").first()
    assert row["ok"] is expected
    assert spark.sql(f"SELECT {name}(CAST(NULL AS BINARY)) AS ok").first()["ok"] is False
