"""Staged files that are big, replaced, or not clean, through `floeline sql` and the
pipe service, on real files, Spark and Delta: the statements as a user runs them and
the table read back."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from floeline.errors import SqlError

pytestmark = pytest.mark.integration


def write(path, lines):
    path.write_bytes("".join(lines).encode())


def table(spark, wh, name):
    return spark.read.format("delta").load(wh.resolve([name]).path)


def table_rows(spark, wh, name):
    return [r.asDict() for r in table(spark, wh, name).collect()]


COPY_N = "COPY INTO t FROM (SELECT $1:n::NUMBER, METADATA$FILENAME FROM @s)"
NOTHING = [{"status": "Copy executed with 0 files processed."}]


def history(sql, table_name):
    return [tuple(r.values()) for r in sql(
        "SELECT file_name, status, row_count, file_size, pipe_name FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY("
        f"TABLE_NAME => '{table_name}')) ORDER BY last_load_time, file_name")]


def replace(path, lines, seconds_later):
    """Rewrite a staged file with other bytes and a later modification time."""
    before = path.stat().st_mtime
    write(path, lines)
    os.utime(path, (before + seconds_later, before + seconds_later))


def test_copy_loads_a_file_replaced_under_its_name_and_nothing_twice(spark, sql, stage_dir, wh):
    day = stage_dir / "day.json"
    write(day, ['{"n":1}\n', '{"n":2}\n'])  # 16 bytes
    sql(f"""CREATE TABLE t (n NUMBER, f VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    loaded = [(r["file"], r["status"], r["rows_loaded"]) for r in sql(COPY_N)]
    assert loaded == [("day.json", "LOADED", 2)]
    assert sql(COPY_N) == NOTHING
    # Other bytes of the same size, modified later: another file by content.
    replace(day, ['{"n":3}\n', '{"n":4}\n'], 60)
    assert [(r["file"], r["status"], r["rows_loaded"]) for r in sql(COPY_N)] == [("day.json", "LOADED", 2)]
    # Another size.
    replace(day, ['{"n":5}\n'], 120)
    assert [(r["file"], r["status"], r["rows_loaded"]) for r in sql(COPY_N)] == [("day.json", "LOADED", 1)]
    # The first content again (a re-upload of it): already loaded, by its size and MD5.
    replace(day, ['{"n":1}\n', '{"n":2}\n'], 180)
    assert sql(COPY_N) == NOTHING
    assert sorted((r["N"], r["F"]) for r in table_rows(spark, wh, "T")) == [
        (1, "day.json"), (2, "day.json"), (3, "day.json"), (4, "day.json"), (5, "day.json")]
    # COPY_HISTORY: one row per load, the file's name each time; the size tells the versions apart.
    assert history(sql, "T") == [("day.json", "Loaded", 2, 16, None), ("day.json", "Loaded", 2, 16, None),
                                 ("day.json", "Loaded", 1, 8, None)]


def test_pipe_loads_a_replaced_file_once_and_keeps_the_old_rows(spark, sql, stage_dir, wh):
    from floeline.ingest.pipe_service import PipeService

    sql(f"""CREATE TABLE t (n NUMBER, f VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM (SELECT $1:n::NUMBER, METADATA$FILENAME FROM @s)""")
    lines = []
    service = PipeService(spark, wh, poll_s=0.1, report=lines.append)

    def pending():
        return json.loads(sql("SELECT SYSTEM$PIPE_STATUS('p') AS s")[0]["s"])["pendingFileCount"]

    batch = stage_dir / "batch.json"
    write(batch, ['{"n":1}\n', '{"n":2}\n'])
    assert service.poll() == 1 and service.poll() == 0
    replace(batch, ['{"n":10}\n', '{"n":20}\n', '{"n":30}\n'], 60)
    assert pending() == 1
    assert service.poll() == 1 and service.poll() == 0
    assert pending() == 0
    assert lines == ["pipe FLOELINE.PUBLIC.P: batch.json LOADED rows=2 errors=0",
                     "pipe FLOELINE.PUBLIC.P: batch.json LOADED rows=3 errors=0"]
    # Snowflake appends the new version: the old version's rows stay.
    assert sorted(r["N"] for r in table_rows(spark, wh, "T")) == [1, 2, 10, 20, 30]
    assert history(sql, "T") == [("batch.json", "Loaded", 2, 16, "FLOELINE.PUBLIC.P"),
                                 ("batch.json", "Loaded", 3, 27, "FLOELINE.PUBLIC.P")]


def test_pipe_a_touched_file_with_loaded_content_is_not_pending(spark, sql, stage_dir, wh):
    from floeline.ingest.pipe_service import PipeService

    sql(f"""CREATE TABLE t (n NUMBER, f VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM (SELECT $1:n::NUMBER, METADATA$FILENAME FROM @s)""")
    service = PipeService(spark, wh, poll_s=0.1, report=lambda line: None)  # lists every 0.1 s, not 1 s
    batch = stage_dir / "batch.json"
    write(batch, ['{"n":1}\n'])
    assert service.poll() == 1
    replace(batch, ['{"n":1}\n'], 60)  # the same bytes again (touched, or uploaded again)
    assert service.poll() == 0
    assert [r["N"] for r in table_rows(spark, wh, "T")] == [1]
    status = json.loads(sql("SELECT SYSTEM$PIPE_STATUS('p') AS s")[0]["s"])
    assert status["pendingFileCount"] == 0  # its new version is recorded (SKIPPED): not read again
    assert service.poll() == 0


def test_a_line_that_is_not_utf8_is_a_row_error_with_its_line(spark, sql, stage_dir, wh):
    # Valid gzip; line 2 is Latin-1 ("café" with the byte E9), not UTF-8.
    latin = b'{"n":1,"s":"a"}\n{"n":2,"s":"caf\xe9"}\n{"n":3,"s":"\xc3\xa9"}\n'
    (stage_dir / "latin.json.gz").write_bytes(gzip.compress(latin))
    # UTF-16 (NUL bytes: binary, not text with a bad byte): the whole file fails.
    (stage_dir / "wide.json").write_bytes('{"n":4,"s":"d"}\n'.encode("utf-16"))
    sql(f"""CREATE TABLE t (n NUMBER, s VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    copy = "COPY INTO t FROM (SELECT $1:n::NUMBER, $1:s FROM @s)"
    with pytest.raises(SqlError, match=r"file latin.json.gz of stage FLOELINE.PUBLIC.S, line 2 \(record 2\): "
                                       r"invalid UTF-8: byte 0xE9 is not part of a UTF-8 character.*"
                                       r"nothing was loaded"):
        sql(copy)
    assert table_rows(spark, wh, "T") == []
    result = {r["file"]: r for r in sql(copy + " ON_ERROR=CONTINUE")}
    assert {f: (r["status"], r["rows_parsed"], r["rows_loaded"], r["errors_seen"], r["first_error_line"])
            for f, r in result.items()} == {"latin.json.gz": ("PARTIALLY_LOADED", 3, 2, 1, 2),
                                            "wide.json": ("LOAD_FAILED", 0, 0, 1, None)}
    assert result["latin.json.gz"]["first_error"] == (
        "invalid UTF-8: byte 0xE9 is not part of a UTF-8 character (the file's text must be UTF-8)")
    assert result["wide.json"]["first_error"] == (
        "wide.json is not UTF-8 text (byte 0): check the file's encoding and COMPRESSION")
    assert sorted((r["N"], r["S"]) for r in table_rows(spark, wh, "T")) == [(1, "a"), (3, "\u00e9")]
    assert history(sql, "T") == [("latin.json.gz", "Partially loaded", 2, len(gzip.compress(latin)), None),
                                 ("wide.json", "Load failed", 0, 34, None)]


def test_a_50_mb_json_file_loads_whole(spark, sql, stage_dir, wh):
    """One 50 MB newline-delimited JSON file into a VARIANT column: every record once.
    Gzipped (1.1 MB on disk) the load measured 2-4 s faster than the plain file, whose
    50 MB Spark hands whole to one Python worker."""
    count = 200_000
    # 263 bytes a line: an increasing "n" and a padding string that differs per line.
    data = "".join(f'{{"n":{i},"pad":"{i:08x}{"p" * 234}"}}\n' for i in range(count)).encode()
    assert len(data) >= 50 * 2**20
    (stage_dir / "big.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
    sql(f"""CREATE TABLE big (v VARIANT);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    result = sql("COPY INTO big FROM @s")
    assert [(r["file"], r["status"], r["rows_parsed"], r["rows_loaded"], r["errors_seen"]) for r in result] == [
        ("big.json.gz", "LOADED", count, count, 0)]
    figures = table(spark, wh, "BIG").selectExpr("variant_get(v, '$.n', 'int') AS n", "v:pad::string AS pad") \
        .selectExpr("count(*) AS records", "count(DISTINCT n) AS distinct_n", "min(n) AS lo", "max(n) AS hi",
                    "count_if(length(pad) != 242) AS bad_pad").first().asDict()
    assert figures == {"records": count, "distinct_n": count, "lo": 0, "hi": count - 1, "bad_pad": 0}
