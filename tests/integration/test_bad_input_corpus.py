"""Bad input figures: a table-driven corpus of broken or odd input per source, each
kind's outcome asserted, and for each corpus the accounting (bad_input.Accounting):
produced == landed + DLQ + error table + skipped by a rule, lost = 0. One connector run
(or one COPY per ON_ERROR mode) per corpus keeps it quick. The Kafka JSON corpus of
test_bad_records.py (23 kinds) completes it; bench/RESULTS.md's "Bad input corpora" table is made of
the figure lines these tests print (`pytest -s`)."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest

from bad_input import Accounting, assert_each_kind_where_expected

pytestmark = pytest.mark.integration


# ---- files: stages, COPY INTO and pipes ---------------------------------------------

def _parquet(columns: dict) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


_GOOD_PARQUET = _parquet({"n": [300, 301], "s": ["a", "b"]})
_MIDDLE = len(_GOOD_PARQUET) // 2

# (kind, stage, file, bytes, records written, rows that load, row errors, the file fails
#  whole, a piece of the first error). Stages: sj JSON, sn JSON with COMPRESSION=NONE,
# sc CSV (FIELD_OPTIONALLY_ENCLOSED_BY='"'), sp PARQUET. Each file's `n` values are its
# own, so the table shows where each record went.
FILE_CORPUS = [
    ("UTF-8 BOM at the start of an NDJSON file", "sj", "bom.json",
     b'\xef\xbb\xbf{"n":1,"s":"a"}\n{"n":2,"s":"b"}\n', 2, 2, 0, False, None),
    ("CRLF line endings", "sj", "crlf.json", b'{"n":3,"s":"a"}\r\n{"n":4,"s":"b"}\r\n', 2, 2, 0, False, None),
    ("trailing partial line (a file cut mid-write)", "sj", "partial.json",
     b'{"n":5,"s":"a"}\n{"n":6,"s":"b"}\n{"n":7,"s":', 3, 2, 1, False, "invalid JSON at line 3"),
    ("garbage between concatenated objects", "sj", "garbage.json",
     b'{"n":8}xx{"n":9}\n{"n":10}\n', 3, 2, 1, False, "invalid JSON at line 1, column 8"),
    ("a line that is not JSON between records", "sj", "comment.json",
     b'{"n":11}\n# exported 2024-01-01\n{"n":12}\n', 3, 2, 1, False, "invalid JSON at line 2"),
    ("a BOM in the middle (two files concatenated)", "sj", "bom_mid.json",
     b'{"n":13}\n\xef\xbb\xbf{"n":14}\n', 2, 1, 1, False, "invalid JSON at line 2"),
    ("NUL padding after a crashed writer", "sj", "nul.json", b'{"n":15}\n\x00\x00\x00\n', 2, 1, 1, False,
     "invalid JSON at line 2"),
    ("a string into a NUMBER column", "sj", "type.json", b'{"n":"abc"}\n{"n":16}\n', 2, 1, 1, False,
     'cannot convert "abc" to NUMBER(38,0)'),
    ("a number beyond NUMBER(38,0)", "sj", "toobig.json", b'{"n":1e50}\n{"n":17}\n', 2, 1, 1, False,
     "cannot convert 1.0E50 to NUMBER(38,0)"),
    ("Latin-1 text in a UTF-8 file", "sj", "latin.json", b'{"n":18,"s":"caf\xe9"}\n{"n":19}\n', 2, 1, 1,
     False, "invalid UTF-8: byte 0xE9"),
    ("pretty-printed multi-line objects", "sj", "pretty.json",
     b'{\n  "n": 20,\n  "s": "multi"\n}\n{\n  "n": 21\n}\n', 2, 2, 0, False, None),
    ("top-level scalars (no keys: NULL columns)", "sj", "scalar.json", b'42\n"str"\n', 2, 2, 0, False, None),
    ("a top-level array without STRIP_OUTER_ARRAY (one record)", "sj", "array.json",
     b'[{"n":22},{"n":23}]\n', 1, 1, 0, False, None),
    ("an empty file", "sj", "empty.json", b"", 0, 0, 0, False, None),
    ("a truncated gzip file", "sj", "cut.json.gz", gzip.compress(b'{"n":24}\n' * 3)[:-12], 3, 0, 0, True,
     "not a complete gzip file"),
    ("a gzip file declared COMPRESSION=NONE", "sn", "gz_as_none.json.gz",
     gzip.compress(b'{"n":30}\n{"n":31}\n'), 2, 0, 0, True, "is not UTF-8 text"),
    ("CSV: a row with an extra field", "sc", "wide.csv", b'40,a\n41,b,extra\n42,c\n', 3, 2, 1, False,
     "the record has 3 fields but the table has 2 columns"),
    ("CSV: a row with a missing field", "sc", "narrow.csv", b'43,a\n44\n', 2, 1, 1, False,
     "the record has 1 fields but the table has 2 columns"),
    ("CSV: an unterminated quote at the end (a file cut mid-field)", "sc", "cut_quote.csv",
     b'45,a\n46,"open', 2, 1, 1, False, "invalid CSV at line 2"),
    # A quoted field may span lines: an open quote takes the rest of the file as one record.
    ("CSV: an unterminated quote mid-file", "sc", "open_quote.csv", b'47,"open\n48,b\n', 1, 0, 1, False,
     "invalid CSV at line 2: unexpected end of data"),
    ("CSV: CRLF line endings", "sc", "crlf.csv", b'49,a\r\n50,b\r\n', 2, 2, 0, False, None),
    ("CSV: a UTF-8 BOM", "sc", "bom.csv", b'\xef\xbb\xbf51,a\n', 1, 1, 0, False, None),
    ("CSV: a text field into a NUMBER column", "sc", "type.csv", b'x,a\n52,b\n', 2, 1, 1, False,
     "does not fit column N"),
    ("Parquet: corrupt bytes in the middle", "sp", "corrupt.parquet",
     _GOOD_PARQUET[:_MIDDLE] + b"\0" * 16 + _GOOD_PARQUET[_MIDDLE + 16:], 2, 0, 0, True,
     "is not a readable Parquet file"),
    ("Parquet: truncated (footer cut)", "sp", "truncated.parquet", _GOOD_PARQUET[:-20], 2, 0, 0, True,
     "is not a readable Parquet file"),
    ("Parquet: JSON bytes named .parquet", "sp", "not.parquet", b'{"n":302}\n', 1, 0, 0, True,
     "is not a readable Parquet file"),
    ("Parquet: a string column into NUMBER", "sp", "types.parquet", _parquet({"n": ["303", "abc"]}), 2, 1, 1,
     False, 'cannot convert "abc" to NUMBER'),
]


def _expected_status(loaded: int, row_errors: int, whole: bool) -> str:
    if whole or (row_errors and not loaded):
        return "LOAD_FAILED"
    return "PARTIALLY_LOADED" if row_errors else "LOADED"


def _file_destination(row_errors: int, whole: bool) -> str:
    """Where a file kind's bad records go (its good ones land)."""
    return "skipped" if whole else "row errors" if row_errors else "landed"


def _write_file_corpus(tmp_path) -> dict[str, str]:
    stages = {}
    for stage in ("sj", "sn", "sc", "sp"):
        stages[stage] = str(tmp_path / stage)
        os.makedirs(stages[stage])
    for _kind, stage, name, data, *_ in FILE_CORPUS:
        with open(os.path.join(stages[stage], name), "wb") as f:
            f.write(data)
    return stages


def test_file_corpus_copy_on_error_modes_and_a_pipe(spark, sql, wh, tmp_path):
    from floeline.errors import SqlError
    from floeline.ingest.pipe_service import PipeService

    stages = _write_file_corpus(tmp_path)
    sql(f"""CREATE TABLE t (n NUMBER, s VARCHAR, f VARCHAR);
            CREATE TABLE c (n NUMBER, s VARCHAR);
            CREATE TABLE piped (n NUMBER, s VARCHAR, f VARCHAR);
            CREATE STAGE sj URL='file://{stages["sj"]}/' FILE_FORMAT=(TYPE=JSON);
            CREATE STAGE sn URL='file://{stages["sn"]}/' FILE_FORMAT=(TYPE=JSON COMPRESSION=NONE);
            CREATE STAGE sc URL='file://{stages["sc"]}/' FILE_FORMAT=(TYPE=CSV FIELD_OPTIONALLY_ENCLOSED_BY='"');
            CREATE STAGE sp URL='file://{stages["sp"]}/' FILE_FORMAT=(TYPE=PARQUET)""")
    json_copy = "COPY INTO t FROM (SELECT $1:n::NUMBER, $1:s, METADATA$FILENAME FROM @{})"

    # ABORT_STATEMENT (COPY's default): the first bad record stops the load, nothing loads.
    with pytest.raises(SqlError, match=r"of stage FLOELINE.PUBLIC.SJ, line \d+ \(record \d+\).*"
                                       r"nothing was loaded: ON_ERROR=ABORT_STATEMENT"):
        sql(json_copy.format("sj"))
    assert spark.read.format("delta").load(wh.resolve(["T"]).path).count() == 0

    # SKIP_FILE: a file with any bad record loads nothing; the clean files load whole.
    skip = {r["file"]: r for r in sql(json_copy.format("sj") + " ON_ERROR=SKIP_FILE")}
    json_kinds = [k for k in FILE_CORPUS if k[1] == "sj"]
    for kind, _stage, name, _data, written, loaded, row_errors, whole, _error in json_kinds:
        clean = not row_errors and not whole
        assert (skip[name]["status"], skip[name]["rows_loaded"]) == (
            ("LOADED", written) if clean else ("LOAD_FAILED", 0)), (kind, skip[name])

    # CONTINUE: the failed files are tried again (loaded ones are not) and load their good records.
    results = {r["file"]: r for r in sql(json_copy.format("sj") + " ON_ERROR=CONTINUE")}
    assert set(results) == {n for n, r in skip.items() if r["status"] == "LOAD_FAILED"}
    results.update({n: r for n, r in skip.items() if r["status"] == "LOADED"})
    for statement in (json_copy.format("sn"), "COPY INTO c FROM @sc", json_copy.format("sp")):
        results.update({r["file"]: r for r in sql(statement + " ON_ERROR=CONTINUE")})

    # Each kind: its status, its figures, its first error, and its rows in the table.
    landed_per_file: dict[str, int] = {}
    for r in spark.read.format("delta").load(wh.resolve(["T"]).path).collect():
        landed_per_file[r["F"]] = landed_per_file.get(r["F"], 0) + 1
    csv_ns = [int(r["N"]) for r in spark.read.format("delta").load(wh.resolve(["C"]).path).collect()]
    found = {}
    produced = landed = row_error_total = skipped = 0
    for kind, stage, name, _data, written, loaded, row_errors, whole, error in FILE_CORPUS:
        result = results[name]
        figures = (result["status"], result["rows_loaded"], result["errors_seen"])
        assert figures == (_expected_status(loaded, row_errors, whole), loaded, 1 if whole else row_errors), \
            (kind, result)
        if error is not None:
            assert error in result["first_error"], (kind, result["first_error"])
        in_table = landed_per_file.get(name, 0) if stage != "sc" else None
        assert in_table in (None, loaded), (kind, in_table)
        found[kind] = [_file_destination(row_errors, whole)]
        produced += written
        landed += result["rows_loaded"]
        row_error_total += 0 if whole else result["errors_seen"]
        skipped += written if whole else 0
    assert sorted(csv_ns) == [40, 42, 43, 45, 49, 50, 51, 52]  # the BOM is not glued to 51
    assert_each_kind_where_expected(
        [(k, _file_destination(e, w)) for k, _s, _n, _d, _wr, _lo, e, w, _x in FILE_CORPUS], found)
    Accounting("files (COPY, ON_ERROR=CONTINUE)", len(FILE_CORPUS), produced, landed,
               error_table=row_error_total, skipped=skipped).check()

    # A pipe (ON_ERROR=SKIP_FILE, its default) over the JSON stage: bad files load nothing.
    sql("CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO piped FROM "
        "(SELECT $1:n::NUMBER, $1:s, METADATA$FILENAME FROM @sj)")
    lines: list[str] = []
    service = PipeService(spark, wh, poll_s=0.1, report=lines.append)
    assert service.poll() == len(json_kinds)
    piped_rows = spark.read.format("delta").load(wh.resolve(["PIPED"]).path).count()
    pipe_skipped = 0
    for kind, _stage, name, _data, written, _loaded, row_errors, whole, _error in json_kinds:
        clean = not row_errors and not whole
        line = next(x for x in lines if f": {name} " in x)
        assert (f" {name} LOADED rows={written} " if clean else f" {name} LOAD_FAILED rows=0 ") in line, (kind, line)
        pipe_skipped += 0 if clean else written
    Accounting("files (pipe, ON_ERROR=SKIP_FILE)", len(json_kinds), sum(k[4] for k in json_kinds), piped_rows,
               skipped=pipe_skipped).check()


# ---- Kafka: a hand-made table's types, headers, keys and values (error table) -------

ONE_MB = 1024 * 1024

# (kind, destination, value bytes or None, headers, check on the landed row or a piece
#  of the error). The table: ID NUMBER, SMALL NUMBER(5,0), AT TIMESTAMP_NTZ,
# NAME VARCHAR(10), FLAG BOOLEAN, schema evolution off (made by hand).
KAFKA_TABLE_CORPUS = [
    ("a number too big for NUMBER(5,0)", "error table", b'{"id": 1, "small": 123456}', [],
     "column SMALL"),
    ("a numeric string into NUMBER(5,0)", "landed", b'{"id": 2, "small": "42"}', [],
     lambda r: int(r["SMALL"]) == 42),
    ("an ISO timestamp string into TIMESTAMP_NTZ", "landed", b'{"id": 3, "at": "2024-01-15T10:00:00+02:00"}', [],
     lambda r: str(r["AT"]) == "2024-01-15 10:00:00"),
    ("epoch seconds into TIMESTAMP_NTZ", "landed", b'{"id": 4, "at": 1705312800}', [],
     lambda r: str(r["AT"]) == "2024-01-15 10:00:00"),
    ("a string that is not a timestamp into TIMESTAMP_NTZ", "error table", b'{"id": 5, "at": "yesterday"}', [],
     "column AT"),
    ("text longer than VARCHAR(10)", "error table", b'{"id": 6, "name": "eleven-char"}', [],
     "column NAME"),
    ('"yes" into BOOLEAN', "landed", b'{"id": 7, "flag": "yes"}', [], lambda r: r["FLAG"] is True),
    ("2 into BOOLEAN", "error table", b'{"id": 8, "flag": 2}', [], "column FLAG"),
    ("a boolean into NUMBER", "error table", b'{"id": true}', [], "column ID"),
    # Both keys name column ID: one value is kept, as Snowflake's streaming SDK keeps one.
    ('keys colliding case-insensitively ("id" and "ID")', "landed", b'{"id": 10, "ID": 11}', [],
     lambda r: int(r["ID"]) == 11),
    # Server-side validation (the default) ignores it, as Snowflake's default pipe does;
    # client-side validation rejects the record (test_connector_suite_fidelity.py).
    ("a key with no column (schema evolution off)", "landed", b'{"id": 12, "extra": 1}', [],
     lambda r: int(r["ID"]) == 12 and "EXTRA" not in r.asDict()),
    # Stricter than JsonConverter (Jackson skips a BOM): the record is kept whole, not lost.
    ("a UTF-8 BOM before the JSON", "error table", b'\xef\xbb\xbf{"id": 13}', [], "not valid JSON"),
    # Kafka Connect's JsonConverter (Jackson without FAIL_ON_TRAILING_TOKENS) reads the
    # first value and ignores what follows; so does Spark's parse_json here.
    ("trailing garbage after the object", "landed", b'{"id": 14} xx', [], lambda r: int(r["ID"]) == 14),
    ("two JSON objects in one value (the second is ignored)", "landed", b'{"id": 15}{"id": 16}', [],
     lambda r: int(r["ID"]) == 15),
    ("a 1 MB header", "landed", b'{"id": 17}', [("trace", b"t" * ONE_MB)],
     lambda r: len(json.loads(r["RECORD_METADATA"].toJson())["headers"]["trace"]) == ONE_MB),
    ("a binary (non-UTF-8) header value", "landed", b'{"id": 18}', [("span", b"\xff\x00\xfe")],
     lambda r: "span" in json.loads(r["RECORD_METADATA"].toJson())["headers"]),
    ("a tombstone with behavior.on.null.values=IGNORE", "skipped", None, [], None),
]


def _offset(row) -> int:
    return json.loads(row["RECORD_METADATA"].toJson())["offset"]


def test_kafka_corpus_into_a_hand_made_table(kafka, topic_name, make_config, run_connector, read_table, sql):
    from floeline.dev import kafka as devkafka
    from floeline.sources.kafka import produce

    topic = topic_name("typed")
    devkafka.create_topic(kafka, topic)
    sql(f"CREATE TABLE {topic.upper()} (ID NUMBER, SMALL NUMBER(5,0), AT TIMESTAMP_NTZ, NAME VARCHAR(10), "
        f"FLAG BOOLEAN, RECORD_METADATA VARIANT)")
    produce(kafka, topic, [{"value": value, "key": f"k{i}", "headers": [("case", kind.encode()), *headers]}
                           for i, (kind, _dest, value, headers, _check) in enumerate(KAFKA_TABLE_CORPUS)])
    connector = run_connector(make_config(topics=topic, errors__tolerance="all",
                                          behavior__on__null__values="IGNORE"))

    rows = {_offset(r): r for r in read_table(topic.upper()).collect()}
    errors = {int(r["RECORD_POSITION"]): r for r in read_table(topic.upper() + "_ERRORS").collect()}
    skipped = sum(r.skipped for r in connector.reports)
    found, wrong = {}, []
    for offset, (kind, destination, _value, _headers, check) in enumerate(KAFKA_TABLE_CORPUS):
        found[kind] = [d for d, held in (("landed", rows), ("error table", errors)) if offset in held]
        if destination == "skipped" and not found[kind]:
            found[kind] = ["skipped"]
        if destination == "landed" and offset in rows and not check(rows[offset]):
            wrong.append((kind, rows[offset]))
        if destination == "error table" and offset in errors:
            if check not in errors[offset]["ERROR"]:
                wrong.append((kind, errors[offset]["ERROR"]))
            assert errors[offset]["RECORD_VALUE"] == KAFKA_TABLE_CORPUS[offset][2], kind
    assert_each_kind_where_expected(KAFKA_TABLE_CORPUS, found)
    assert not wrong, wrong
    Accounting("kafka (hand-made table)", len(KAFKA_TABLE_CORPUS), len(KAFKA_TABLE_CORPUS), len(rows),
               error_table=len(errors), skipped=skipped).check()


# ---- Kafka: Avro values and JSON keys with schemas.enable=true (DLQ) ---------------

VALUE_SCHEMA = {"type": "record", "name": "Reading", "namespace": "lab",
                "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
GOOD_KEY = b'{"schema": {"type": "string", "optional": false}, "payload": "k"}'

# (kind, destination, key bytes, value: bytes, None, or a callable(schema id) -> bytes,
#  the stage and a piece of the DLQ's error message)
KAFKA_CONVERTER_CORPUS = [
    ("Avro: plain JSON on an Avro topic (no magic byte)", "dlq", GOOD_KEY, b'{"id": 1, "name": "a"}',
     ("VALUE_CONVERTER", "unknown magic byte 0x7b")),
    ("Avro: shorter than the 5-byte header", "dlq", GOOD_KEY, b"\x00\x00\x01",
     ("VALUE_CONVERTER", "shorter than the 5-byte")),
    ("Avro: an empty value (0 bytes)", "dlq", GOOD_KEY, b"", ("VALUE_CONVERTER", "shorter than the 5-byte")),
    ("Avro: an unknown schema id", "dlq", GOOD_KEY, lambda sid: _avro_value(987654, 3),
     ("VALUE_CONVERTER", "unknown schema id 987654")),
    ("Avro: a truncated payload", "dlq", GOOD_KEY, lambda sid: _avro_value(sid, 4)[:-2],
     ("VALUE_CONVERTER", "corrupt Avro")),
    ("Avro: a tombstone (null value)", "landed", GOOD_KEY, None, None),
    ("JSON key without the schema/payload envelope (schemas.enable=true)", "dlq", b'"k"', lambda sid:
     _avro_value(sid, 6), ("KEY_CONVERTER", "schema")),
    ("a key that is not JSON for JsonConverter", "dlq", b"order-7", lambda sid: _avro_value(sid, 7),
     ("KEY_CONVERTER", "not valid JSON")),
    ("a key whose payload does not match its schema", "dlq", b'{"schema": {"type": "int32"}, "payload": "x"}',
     lambda sid: _avro_value(sid, 8), ("KEY_CONVERTER", "does not match")),
]


def _avro_value(schema_id: int, record_id: int) -> bytes:
    from records_io import avro, wire

    return wire(schema_id, avro(VALUE_SCHEMA, {"id": record_id, "name": f"r{record_id}"}))


def test_kafka_corpus_of_converter_errors_to_the_dlq(kafka, schema_registry, topic_name, make_config,
                                                     run_connector, read_table):
    from floeline.config.decoding import AVRO_CONVERTER, JSON_CONVERTER
    from floeline.dev import kafka as devkafka
    from floeline.sources.kafka import produce
    from records_io import consume_to_end, headers_of, register

    topic, dlq = topic_name("conv"), topic_name("conv_dlq")
    devkafka.create_topic(kafka, topic)
    devkafka.create_topic(kafka, dlq)
    schema_id = register(schema_registry, f"{topic}-value", json.dumps(VALUE_SCHEMA))
    seed = {"key": GOOD_KEY, "value": _avro_value(schema_id, 0)}  # a good record first
    corpus = [{"key": key, "value": value(schema_id) if callable(value) else value,
               "headers": [("case", kind.encode())]}
              for kind, _dest, key, value, _error in KAFKA_CONVERTER_CORPUS]
    produce(kafka, topic, [seed] + corpus, partition=0)
    connector = run_connector(make_config(**{
        "topics": topic, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "key.converter": JSON_CONVERTER, "key.converter.schemas.enable": "true",
        "value.converter": AVRO_CONVERTER, "value.converter.schema.registry.url": schema_registry}))

    rows = {_offset(r): r for r in read_table(topic.upper()).collect()}
    to_dlq = [c for c in KAFKA_CONVERTER_CORPUS if c[1] == "dlq"]
    letters = {headers_of(m)["case"]: m for m in consume_to_end(kafka, dlq, len(to_dlq))}
    assert int(rows[0]["ID"]) == 0 and json.loads(rows[0]["RECORD_METADATA"].toJson())["key"] == "k"
    found = {}
    for i, (kind, destination, _key, _value, error) in enumerate(KAFKA_CONVERTER_CORPUS):
        offset = 1 + i
        found[kind] = [d for d, held in (("landed", offset in rows), ("dlq", kind in letters)) if held]
        if kind in letters:
            h = headers_of(letters[kind])
            assert letters[kind].value() == corpus[i]["value"] and letters[kind].key() == corpus[i]["key"], kind
            assert h["__connect.errors.offset"] == str(offset), kind
            assert h["__connect.errors.stage"] == error[0], (kind, h["__connect.errors.stage"])
            assert error[1] in h["__connect.errors.exception.message"], (kind, h["__connect.errors.exception.message"])
    assert rows[1 + 5]["ID"] is None  # the tombstone: a row with RECORD_METADATA only
    assert_each_kind_where_expected(KAFKA_CONVERTER_CORPUS, found)
    assert sum(r.skipped for r in connector.reports) == 0
    Accounting("kafka (Avro values, JSON keys)", len(KAFKA_CONVERTER_CORPUS), 1 + len(corpus), len(rows),
               dlq=len(letters)).check()


# ---- Kinesis: plain and KPL-aggregated records (error table) ------------------------

ONE_MIB = 1024 * 1024


def _kpl_bytes(records: list[tuple[str, bytes]]) -> bytes:
    from floeline.sources.kinesis.kpl import aggregate

    return aggregate(records)


def _kpl_bad_md5() -> bytes:
    data = bytearray(_kpl_bytes([("a", b'{"n": 20}'), ("b", b'{"n": 21}')]))
    data[-1] ^= 0xFF
    return bytes(data)


def _kpl_right_md5_bad_protobuf() -> bytes:
    import hashlib

    from floeline.sources.kinesis.kpl import MAGIC

    body = b"\x1a\xff\xff\x03junk"  # a Record field whose length runs past the end
    return MAGIC + body + hashlib.md5(body).digest()


def _at_the_limit(partition_key: str) -> bytes:
    """A JSON object of exactly 1 MiB with its partition key (Kinesis's record limit)."""
    head, tail = b'{"n": 30, "blob": "', b'"}'
    return head + b"x" * (ONE_MIB - len(partition_key) - len(head) - len(tail)) + tail


# (kind, destination(s), the Kinesis record's data, user records it holds, check on the
#  landed rows (one per user record, in order) or a piece of the error)
KINESIS_CORPUS = [
    ("malformed JSON", "error table", b'{"n": 1,', 1, "not valid JSON"),
    ("a JSON array", "error table", b"[1, 2]", 1, "not an object"),
    ("a JSON string", "error table", b'"hello"', 1, "not an object"),
    ("a JSON null", "error table", b"null", 1, "not an object"),
    ("invalid UTF-8", "error table", b'{"n": 5, "s": "\xff\xfe"}', 1, "UTF-8"),
    ("NaN", "error table", b'{"n": NaN}', 1, "not valid JSON"),
    ("1,000-level nesting", "error table", b'{"n": 7, "d": ' + b"[" * 1000 + b"]" * 1000 + b"}", 1,
     "not valid JSON"),
    ("a UTF-8 BOM before the JSON", "error table", b'\xef\xbb\xbf{"n": 8}', 1, "not valid JSON"),
    ("an empty record (0 bytes): a tombstone, IGNOREd", "skipped", b"", 1, None),
    ("a whitespace-only record: a tombstone, IGNOREd", "skipped", b" \n", 1, None),
    ("duplicate keys (the last wins)", "landed", b'{"n": 9, "s": "a", "s": "b"}', 1,
     lambda rows: rows[0]["S"] == "b"),
    ("text after the JSON (ignored, as for Kafka)", "landed", b'{"n": 10}{"n": 11} xx', 1,
     lambda rows: int(rows[0]["N"]) == 10),
    # The KCL reads data with a wrong MD5, or a protobuf that does not parse, as an
    # ordinary record: here one that is not UTF-8 JSON, so a bad record kept whole.
    ("KPL aggregate with a wrong MD5", "error table", _kpl_bad_md5(), 1, "UTF-8"),
    ("KPL aggregate cut short", "error table", _kpl_bytes([("a", b'{"n": 22}'), ("b", b'{"n": 23}')])[:-9], 1,
     "UTF-8"),
    ("KPL magic and MD5 right, protobuf broken", "error table", _kpl_right_md5_bad_protobuf(), 1, "UTF-8"),
    ("KPL aggregate with one bad user record among good ones", "error table+landed",
     _kpl_bytes([("a", b'{"n": 24}'), ("b", b'{"n": 25,'), ("c", b'{"n": 26}')]), 3,
     lambda rows: sorted(int(r["N"]) for r in rows) == [24, 26]),
    ("a record at the 1 MiB limit", "landed", None, 1, lambda rows: len(rows[0]["BLOB"]) > ONE_MIB - 40),
]


def test_kinesis_corpus_to_the_error_table(aws, warehouse, run_connector, read_table):
    import uuid

    from floeline.config import config_from_dict
    from kinesis_io import create_stream, put, stream_name

    stream = stream_name("bad")
    create_stream(aws, stream, shards=1)
    keys = [f"k{i}" for i in range(len(KINESIS_CORPUS))]
    data = [d if d is not None else _at_the_limit(keys[i]) for i, (_k, _d, d, _n, _c) in enumerate(KINESIS_CORPUS)]
    placed = put(aws, stream, data, key=lambda i, _r: keys[i])
    name = f"k{uuid.uuid4().hex[:6]}"
    connector = run_connector(config_from_dict({
        "name": name, "floeline.source": "kinesis", "kinesis.stream.name": stream,
        "kinesis.application.name": f"app-{name}", "aws.region": aws.region,
        "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
        "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint,
        "floeline.warehouse": warehouse, "buffer.flush.time": "1", "errors.tolerance": "all",
        "behavior.on.null.values": "IGNORE"}))

    rows: dict[str, list] = {}
    for r in read_table(stream.upper()).collect():
        rows.setdefault(json.loads(r["RECORD_METADATA"].toJson())["sequenceNumber"], []).append(r)
    errors: dict[str, list] = {}
    for r in read_table(stream.upper() + "_ERRORS").collect():
        errors.setdefault(json.loads(r["RECORD_SOURCE"].toJson())["sequenceNumber"], []).append(r)
    skipped = sum(r.skipped for r in connector.reports)
    found, wrong = {}, []
    for (kind, destination, _data, _users, check), (_shard, sequence) in zip(KINESIS_CORPUS, placed):
        held = [d for d, where in (("error table", errors), ("landed", rows)) if sequence in where]
        found[kind] = ["+".join(held) if held else "skipped"]
        if callable(check) and not check(rows.get(sequence, [])):
            wrong.append((kind, rows.get(sequence)))
        if isinstance(check, str) and not all(check in e["ERROR"] for e in errors.get(sequence, [])):
            wrong.append((kind, [e["ERROR"] for e in errors[sequence]]))
    assert_each_kind_where_expected(KINESIS_CORPUS, found)
    assert not wrong, wrong
    Accounting("kinesis", len(KINESIS_CORPUS), sum(c[3] for c in KINESIS_CORPUS),
               sum(len(v) for v in rows.values()), error_table=sum(len(v) for v in errors.values()),
               skipped=skipped).check()
