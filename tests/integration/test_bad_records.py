"""Bad input, as a user meets it: each kind of broken or odd record is produced to the
real broker and its outcome asserted (lands, DLQ with Kafka Connect's error headers,
error table, skipped by an explicit rule, or fails loud). Every run also checks the
accounting: records produced == rows landed + DLQ records + error-table rows +
records skipped by a rule. Nothing may disappear."""

from __future__ import annotations

import json
import time

import pytest

from floeline.dev import kafka as devkafka
from floeline.errors import RecordError
from floeline.sources.kafka import produce
from bad_input import Accounting
from records_io import consume_to_end, headers_of

pytestmark = pytest.mark.integration

TEN_MB = 10 * 1024 * 1024

# (name, value bytes or None, expected outcome, check on the landed row or DLQ error)
JSON_CORPUS = [
    ("malformed JSON", b'{"id": 1, "name": ', "dlq", "not valid JSON"),
    ("JSON scalar at top level", b"42", "dlq", "HoistField"),
    ("JSON array at top level", b"[1, 2, 3]", "dlq", "HoistField"),
    ("JSON string at top level", b'"hello"', "dlq", "HoistField"),
    ("JSON null literal", b"null", "dlq", "HoistField"),
    # JsonConverter reads empty bytes as null: a tombstone (a metadata-only row by DEFAULT)
    ("empty value", b"", "lands", lambda r: r["ID"] is None),
    ("whitespace value", b"   \n", "lands", lambda r: r["ID"] is None),
    ("invalid UTF-8", b'{"id": 8, "name": "\xff\xfe"}', "dlq", "UTF-8"),
    ("1,000-level nesting", b'{"id": 9, "deep": ' + b"[" * 1000 + b"]" * 1000 + b"}", "dlq",
     "not valid JSON"),
    ("NaN", b'{"id": 10, "n": NaN}', "dlq", "not valid JSON"),
    ("Infinity", b'{"id": 11, "n": Infinity}', "dlq", "not valid JSON"),
    ("type conflicts with an existing column", b'{"id": 12, "n": "abc"}', "dlq",
     "does not fit column N"),
    ("empty key", b'{"id": 13, "": "empty"}', "dlq", "empty key"),
    ("duplicate keys: the last wins, as Kafka Connect's JsonConverter", b'{"id": 14, "name": "a", "name": "b"}',
     "lands", lambda r: r["NAME"] == "b"),
    ("decimal beyond 38 digits: a DOUBLE, as Snowflake's PARSE_JSON",
     b'{"id": 15, "big": 123456789012345678901234567890123456789012.5}', "lands",
     lambda r: abs(r["BIG"] - 1.2345678901234568e41) < 1e27),
    ("2^70 integer", b'{"id": 16, "n": 1180591620717411303424}', "lands",
     lambda r: int(r["N"]) == 2 ** 70),
    ("non-ASCII keys", '{"id": 17, "Łódź": "x", "名前": "y"}'.encode(), "lands",
     lambda r: (r["Łódź"], r["名前"]) == ("x", "y")),
    ("key with both quote characters", b'{"id": 18, "it\'s \\"q\\"": 1}', "lands",
     lambda r: int(r["it's \"q\""]) == 1),
    ("dotted key", b'{"id": 19, "a.b": 2}', "lands", lambda r: int(r["a.b"]) == 2),
    ("a 10 MB record", json.dumps({"id": 20, "blob": "x" * TEN_MB}).encode(), "lands",
     lambda r: len(r["BLOB"]) == TEN_MB),
    ("300-level nesting in a VARIANT column", b'{"id": 21, "tree": ' + b"[" * 300 + b"]" * 300 + b"}",
     "lands", lambda r: r["TREE"] is not None),
    ("null Kafka key", b'{"id": 22}', "lands",
     lambda r: "key" not in json.loads(r["RECORD_METADATA"].toJson())),
    ("tombstone with behavior.on.null.values=DEFAULT", None, "lands",
     lambda r: r["ID"] is None),
]


def produce_seed_and_corpus(kafka, topic):
    """A good record first (so the table exists with ID, NAME, N), then the corpus."""
    produce(kafka, topic, [{"value": {"id": 0, "name": "seed", "n": 1}, "key": "seed"}])
    return [{"value": value, "key": None if name == "null Kafka key" else f"k{i}",
             "headers": [("case", name.encode())]}
            for i, (name, value, _outcome, _check) in enumerate(JSON_CORPUS)]


def test_json_corpus_with_dlq(kafka, topic_name, make_config, run_connector, read_table):
    topic, dlq = topic_name("corpus"), topic_name("dlq")
    devkafka.create_topic(kafka, topic)
    devkafka.create_topic(kafka, dlq)
    config = make_config(topics=topic, errors__tolerance="all",
                         errors__deadletterqueue__topic__name=dlq)
    corpus = produce_seed_and_corpus(kafka, topic)
    run_connector(config)  # the seed batch creates the table
    produce(kafka, topic, corpus)
    connector = run_connector(config)

    table = read_table(topic.upper())
    rows = table.collect()
    to_dlq = [c for c in JSON_CORPUS if c[2] == "dlq"]
    dlq_records = consume_to_end(kafka, dlq, len(to_dlq))
    produced = 1 + len(corpus)
    # Nothing skipped by a rule here.
    Accounting("kafka (JSON, DLQ)", len(JSON_CORPUS), produced, len(rows), dlq=len(dlq_records)).check()
    assert len(dlq_records) == len(to_dlq)
    assert connector.reports[-1].errors == len(to_dlq)
    assert connector.reports[-1].errors_by_table == {topic.upper(): len(to_dlq)}
    assert f"errors={len(to_dlq)}[{topic.upper()}={len(to_dlq)}]" in connector.reports[-1].line()

    by_case = {headers_of(m)["case"]: m for m in dlq_records}
    first_offset = 1  # the seed is offset 0
    for i, (name, value, outcome, check) in enumerate(JSON_CORPUS):
        offset = first_offset + i
        landed = [r for r in rows if json.loads(r["RECORD_METADATA"].toJson())["offset"] == offset]
        if outcome == "lands":
            assert len(landed) == 1 and name not in by_case, name
            assert check(landed[0]), name
            continue
        assert not landed and name in by_case, name
        msg = by_case[name]
        h = headers_of(msg)
        # The original record, unchanged, plus Kafka Connect's error context headers.
        assert msg.value() == value and msg.key() == f"k{i}".encode(), name
        assert (h["__connect.errors.topic"], h["__connect.errors.partition"],
                h["__connect.errors.offset"]) == (topic, "0", str(offset)), name
        assert h["__connect.errors.connector.name"] == config.name
        assert h["__connect.errors.stage"] in ("VALUE_CONVERTER", "TASK_PUT")
        assert check in h["__connect.errors.exception.message"], (name, h["__connect.errors.exception.message"])
        for suffix in ("class.name", "exception.class.name", "exception.stacktrace"):
            assert h["__connect.errors." + suffix], suffix


def test_json_corpus_without_dlq_goes_to_the_error_table(kafka, topic_name, make_config,
                                                          run_connector, read_table):
    topic = topic_name("corpus_et")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic, errors__tolerance="all", behavior__on__null__values="IGNORE")
    corpus = produce_seed_and_corpus(kafka, topic)
    run_connector(config)
    produce(kafka, topic, corpus)
    run_connector(config)
    run_connector(config)  # a second run over the same topics adds nothing anywhere

    rows = read_table(topic.upper()).count()
    errors = read_table(topic.upper() + "_ERRORS")
    error_rows = errors.collect()
    skipped = 3  # the tombstones (null, empty, blank), by behavior.on.null.values=IGNORE
    Accounting("kafka (JSON, error table)", len(JSON_CORPUS), 1 + len(corpus), rows,
               error_table=len(error_rows), skipped=skipped).check()
    assert len(error_rows) == len([c for c in JSON_CORPUS if c[2] == "dlq"])
    bad = {int(r["RECORD_POSITION"]): r for r in error_rows}
    malformed = bad[1]
    assert malformed["RECORD_VALUE"] == JSON_CORPUS[0][1] and malformed["RECORD_KEY"] == b"k0"
    assert malformed["RECORD_CHANNEL"] == f"{topic}/0" and malformed["STAGE"] == "value converter"
    assert "not valid JSON" in malformed["ERROR"] and malformed["CONNECTOR"] == config.name
    assert [(h["key"], h["value"]) for h in malformed["RECORD_HEADERS"]] == [("case", b"malformed JSON")]
    assert bad[12]["STAGE"] == "table write"


def test_first_bad_record_stops_the_connector_and_loses_nothing(kafka, topic_name, make_config,
                                                                 run_connector, read_table):
    topic, dlq = topic_name("failloud"), topic_name("dlq_none")
    devkafka.create_topic(kafka, topic)
    devkafka.create_topic(kafka, dlq)
    produce(kafka, topic, [{"id": 1}, {"id": 2}, b'{"id": 3,', {"id": 4}])
    strict = make_config(topics=topic, errors__deadletterqueue__topic__name=dlq)
    with pytest.raises(RecordError) as failure:
        run_connector(strict)
    message = str(failure.value)
    assert f"topic={topic}" in message and "offset=2" in message
    assert "value converter" in message and "not valid JSON" in message
    # With tolerance none and a DLQ, the record also went to the DLQ before the stop.
    assert len(consume_to_end(kafka, dlq, 1)) == 1
    # Nothing of the failed batch was committed, and its new table was not left half made
    # (its first commit creates it: a failed write removes the folder it made).
    import os
    assert not os.path.exists(os.path.join(strict.warehouse, "FLOELINE", "PUBLIC", topic.upper()))
    # After the fix (here: tolerate and route bad records), a restart loses nothing.
    tolerant = make_config(name=strict.name, topics=topic, errors__tolerance="all")
    run_connector(tolerant)
    assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == [1, 2, 4]
    assert read_table(topic.upper() + "_ERRORS").count() == 1


def test_not_null_column_with_evolution_off_rejects_null(kafka, topic_name, make_config,
                                                         run_connector, read_table, spark,
                                                         warehouse):
    import os

    topic = topic_name("notnull")
    devkafka.create_topic(kafka, topic)
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper())
    spark.sql(f"CREATE TABLE delta.`{path}` (RECORD_METADATA VARIANT, ID DECIMAL(38,0) NOT NULL, "
              f"NAME STRING) USING delta TBLPROPERTIES ('delta.columnMapping.mode'='name', "
              f"'floeline.enableSchemaEvolution'='false')")
    produce(kafka, topic, [{"id": 1, "name": "a"}, {"name": "no id"}, {"id": None}, {"id": 4}])
    run_connector(make_config(topics=topic, errors__tolerance="all"))
    assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == [1, 4]
    errors = read_table(topic.upper() + "_ERRORS").collect()
    assert sorted(int(r["RECORD_POSITION"]) for r in errors) == [1, 2]
    assert all("NOT NULL column ID receives null" in r["ERROR"] for r in errors)


def test_one_pass_batches_fall_back_for_new_keys_and_bad_records(kafka, topic_name, make_config,
                                                                 read_table, spark):
    """Steady-state batches take one pass; a batch with a new key, a bad record or a
    tombstone is redone on the general path with the same result."""
    from floeline.ingest import Connector

    topic = topic_name("onepass")
    devkafka.create_topic(kafka, topic)
    config = make_config(topics=topic, errors__tolerance="all", buffer__count__records="50")
    plain = [{"id": i, "name": f"n{i}", "score": i / 2, "ok": True} for i in range(150)]
    produce(kafka, topic, plain)
    first = Connector(config, spark)
    before_ms = int(time.time() * 1000)
    first.run(until_caught_up=True)
    after_ms = int(time.time() * 1000)
    assert any("one pass" in r.phases for r in first.reports), [r.phases for r in first.reports]
    # One push time per micro-batch, taken while the connector ran (jvm.py's function).
    pushes = {json.loads(r["RECORD_METADATA"].toJson())["SnowflakeConnectorPushTime"]
              for r in read_table(topic.upper()).collect()}
    assert all(before_ms <= p <= after_ms for p in pushes)
    assert len(pushes) == len([r for r in first.reports if r.records_read])
    # Explicit JSON nulls for known keys still take one pass (the key check reads keys only).
    produce(kafka, topic, [{"id": 500 + i, "name": None, "score": 1.5, "ok": None} for i in range(60)])
    nulls = Connector(config, spark)
    nulls.run(until_caught_up=True)
    assert all("one pass" in r.phases for r in nulls.reports if r.records_read), \
        [r.phases for r in nulls.reports]
    produce(kafka, topic, [{"id": 1000, "name": "new key", "extra": [1]}, {"id": 1001, "score": "bad"},
                           None, {"id": 1003, "name": "x"}])
    produce(kafka, topic, [{"id": 2000 + i, "name": "after"} for i in range(60)])
    second = Connector(config, spark)
    second.run(until_caught_up=True)
    df = read_table(topic.upper())
    assert df.count() == 150 + 60 + 3 + 60  # the bad record went to the error table
    assert df.where("ID = 1000").first()["EXTRA"] is not None
    assert df.where("ID = 1001").count() == 0
    assert read_table(topic.upper() + "_ERRORS").first()["RECORD_POSITION"] == "211"
    assert df.where("ID = 530").first()["NAME"] is None
    offsets = [json.loads(r["RECORD_METADATA"].toJson())["offset"] for r in df.collect()]
    assert len(offsets) == len(set(offsets))


def test_without_the_jvm_check_every_batch_takes_the_general_path(kafka, topic_name, make_config,
                                                                   read_table, spark, monkeypatch):
    """A session without floeline's jar (no javac at set-up) still ingests everything."""
    from floeline import jvm
    from floeline.ingest import Connector

    def no_jar(_spark, _keys):
        raise TypeError("'JavaPackage' object is not callable")

    monkeypatch.setattr(jvm, "ensure_known_keys", no_jar)
    topic = topic_name("nojar")
    devkafka.create_topic(kafka, topic)
    produce(kafka, topic, [{"id": i, "name": f"n{i}"} for i in range(120)])
    connector = Connector(make_config(topics=topic, buffer__count__records="40"), spark)
    connector.run(until_caught_up=True)
    assert sorted(int(r["ID"]) for r in read_table(topic.upper()).collect()) == list(range(120))
    assert not any("one pass" in r.phases for r in connector.reports)
