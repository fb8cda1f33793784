"""Stages, file formats and COPY INTO through `floeline sql`, on real files, Spark and
Delta: each statement as a user runs it, and the table read back."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from floeline.errors import SqlError

pytestmark = pytest.mark.integration


def write(path, lines, compress=False):
    data = "".join(lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if compress else data)


def table_rows(spark, wh, name, order=None):
    frame = spark.read.format("delta").load(wh.resolve([name]).path)
    return [r.asDict() for r in (frame.orderBy(order) if order else frame).collect()]


def test_stage_statements_and_list(sql, stage_dir, wh):
    write(stage_dir / "a.json", ['{"x":1}\n'])
    write(stage_dir / "sub" / "b.json.gz", ['{"x":2}\n'], compress=True)
    write(stage_dir / ".hidden", ["x"])
    assert sql(f"""CREATE FILE FORMAT jf TYPE=JSON STRIP_OUTER_ARRAY=FALSE;
                   CREATE STAGE landing URL='file://{stage_dir}/' FILE_FORMAT=(FORMAT_NAME=jf)
                     CREDENTIALS=(AWS_KEY_ID='AKIDEXAMPLE' AWS_SECRET_KEY='very-secret-value')""") == [
        {"status": "Stage area LANDING successfully created."}]
    assert [r["name"] for r in sql("LIST @landing")] == ["a.json", "sub/b.json.gz"]
    assert [r["name"] for r in sql("LIST @landing/sub")] == ["sub/b.json.gz"]
    assert [r["name"] for r in sql("LIST @landing PATTERN='.*[.]gz'")] == ["sub/b.json.gz"]
    shown = sql("SHOW STAGES")
    assert [(r["name"], r["type"], r["has_credentials"]) for r in shown] == [("LANDING", "EXTERNAL", "Y")]
    assert "FORMAT_NAME=jf" in shown[0]["file_format"] and "TYPE=JSON" in shown[0]["file_format"]
    described = {r["property"]: r["property_value"] for r in sql("DESCRIBE STAGE landing")}
    assert described["AWS_KEY_ID"] == "AKIDEXAMPLE" and described["AWS_SECRET_KEY"] == "****"
    everything = json.dumps(shown) + json.dumps(described) + json.dumps(sql("SHOW FILE FORMATS"))
    assert "very-secret-value" not in everything
    with pytest.raises(SqlError, match="already exists; use CREATE OR REPLACE STAGE"):
        sql(f"CREATE STAGE landing URL='file://{stage_dir}/'")
    assert sql("DROP STAGE landing") == [{"status": "LANDING successfully dropped."}]
    with pytest.raises(SqlError, match="stage FLOELINE.PUBLIC.LANDING does not exist"):
        sql("LIST @landing")
    with pytest.raises(SqlError, match="file format option BOGUS is not supported"):
        sql("CREATE FILE FORMAT bad TYPE=JSON BOGUS=1")


def test_copy_json_into_a_variant_table_once_then_force(spark, sql, stage_dir, wh):
    write(stage_dir / "f1.json", ['{"a":1}\n', '{"a":2}\n'])
    write(stage_dir / "f2.json.gz", ['{"a":3}{"a":4}', "[5]\n", '"six"\n'], compress=True)
    sql(f"""CREATE TABLE raw (v VARIANT);
            CREATE STAGE s URL='file://{stage_dir}' FILE_FORMAT=(TYPE=JSON)""")
    result = sql("COPY INTO raw FROM @s")
    assert [(r["file"], r["status"], r["rows_parsed"], r["rows_loaded"], r["errors_seen"]) for r in result] == [
        ("f1.json", "LOADED", 2, 2, 0), ("f2.json.gz", "LOADED", 4, 4, 0)]
    values = sorted(json.dumps(json.loads(r["V"].toJson())) for r in table_rows(spark, wh, "RAW"))
    assert values == sorted(['{"a": 1}', '{"a": 2}', '{"a": 3}', '{"a": 4}', "[5]", '"six"'])
    assert sql("COPY INTO raw FROM @s") == [{"status": "Copy executed with 0 files processed."}]
    os.utime(stage_dir / "f1.json", (1, 1))  # touched, same content: still loaded
    assert sql("COPY INTO raw FROM @s") == [{"status": "Copy executed with 0 files processed."}]
    write(stage_dir / "f1.json", ['{"a":10}\n'])  # replaced under the same name: new content
    assert [(r["file"], r["rows_loaded"]) for r in sql("COPY INTO raw FROM @s")] == [("f1.json", 1)]
    assert [r["file"] for r in sql("COPY INTO raw FROM @s FILES=('f2.json.gz') FORCE=TRUE")] == ["f2.json.gz"]
    assert len(table_rows(spark, wh, "RAW")) == 6 + 1 + 4


def test_copy_transformation_with_file_columns(spark, sql, stage_dir, wh):
    write(stage_dir / "2024" / "orders.json", ['{"order_id":"7","customer":{"name":"Ann"}}\n',
                                               '{"order_id":8,"customer":{"name":"Bob"}}\n'])
    sql(f"""CREATE TABLE orders (id NUMBER, name VARCHAR, file VARCHAR, line NUMBER);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    result = sql("""COPY INTO orders FROM (SELECT $1:order_id::NUMBER, $1:customer.name,
                    METADATA$FILENAME, METADATA$FILE_ROW_NUMBER FROM @s/2024/)""")
    assert [(r["file"], r["rows_loaded"]) for r in result] == [("2024/orders.json", 2)]
    assert table_rows(spark, wh, "ORDERS", "ID") == [
        {"ID": 7, "NAME": "Ann", "FILE": "2024/orders.json", "LINE": 1},
        {"ID": 8, "NAME": "Bob", "FILE": "2024/orders.json", "LINE": 2}]


def test_copy_match_by_column_name(spark, sql, stage_dir, wh):
    write(stage_dir / "p.json", ['{"ID":1,"name":"a","extra":true}\n', '{"id":2}\n'])
    sql(f"""CREATE TABLE people (id NUMBER, name VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    with pytest.raises(SqlError, match="needs one VARIANT column to load it whole"):
        sql("COPY INTO people FROM @s")
    sql("COPY INTO people FROM @s MATCH_BY_COLUMN_NAME=CASE_INSENSITIVE")
    assert table_rows(spark, wh, "PEOPLE", "ID") == [{"ID": 1, "NAME": "a"}, {"ID": 2, "NAME": None}]


def test_bad_records_and_on_error(spark, sql, stage_dir, wh):
    write(stage_dir / "good.json", ['{"n":1}\n'])
    write(stage_dir / "mixed.json", ['{"n":2}\n', '{"n": oops}\n', '{"n":"x"}\n', '{"n":4}\n'])
    (stage_dir / "broken.json.gz").write_bytes(gzip.compress(b'{"n":5}\n' * 100)[:-10])
    write(stage_dir / "empty.json", [])
    sql(f"""CREATE TABLE nums (n NUMBER);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    copy = "COPY INTO nums FROM (SELECT $1:n::NUMBER FROM @s)"
    with pytest.raises(SqlError, match=r"broken.json.gz .*not a complete gzip file.*nothing was loaded"):
        sql(copy)
    with pytest.raises(SqlError, match=r"mixed.json .*line 2 \(record 2\): invalid JSON"):
        sql(copy + " FILES=('mixed.json')")
    assert table_rows(spark, wh, "NUMS") == []
    skipped = {r["file"]: r for r in sql(copy + " ON_ERROR=SKIP_FILE")}
    assert {f: (r["status"], r["rows_loaded"], r["errors_seen"]) for f, r in skipped.items()} == {
        "broken.json.gz": ("LOAD_FAILED", 0, 1), "empty.json": ("LOADED", 0, 0),
        "good.json": ("LOADED", 1, 0), "mixed.json": ("LOAD_FAILED", 0, 2)}
    assert skipped["mixed.json"]["first_error_line"] == 2
    # Failed files are tried again; loaded ones are not.
    continued = {r["file"]: r for r in sql(copy + " ON_ERROR=CONTINUE")}
    assert set(continued) == {"broken.json.gz", "mixed.json"}
    assert (continued["mixed.json"]["status"], continued["mixed.json"]["rows_loaded"]) == ("PARTIALLY_LOADED", 2)
    assert "cannot convert" in continued["mixed.json"]["first_error"] or "invalid JSON" in continued["mixed.json"]["first_error"]
    assert sorted(r["N"] for r in table_rows(spark, wh, "NUMS")) == [1, 2, 4]


def test_copy_csv_positional_and_transformed(spark, sql, stage_dir, wh):
    write(stage_dir / "c.csv", ["id,name,score\n", '1,"Smith, Ann",9.5\n', "2,NULL,\n", "x,bad,1\n"])
    sql(f"""CREATE TABLE scores (id NUMBER, name VARCHAR, score DOUBLE);
            CREATE TABLE names (name VARCHAR, id_text VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/'
              FILE_FORMAT=(TYPE=CSV SKIP_HEADER=1 FIELD_OPTIONALLY_ENCLOSED_BY='"' NULL_IF=('NULL'))""")
    result = sql("COPY INTO scores FROM @s ON_ERROR=CONTINUE")
    assert [(r["status"], r["rows_parsed"], r["rows_loaded"], r["errors_seen"], r["first_error_line"])
            for r in result] == [("PARTIALLY_LOADED", 3, 2, 1, 4)]
    assert table_rows(spark, wh, "SCORES", "ID") == [
        {"ID": 1, "NAME": "Smith, Ann", "SCORE": 9.5}, {"ID": 2, "NAME": None, "SCORE": None}]
    sql("COPY INTO names FROM (SELECT $2, $1 FROM @s)")
    assert sorted(r["ID_TEXT"] for r in table_rows(spark, wh, "NAMES")) == ["1", "2", "x"]


def test_copy_history_lists_every_load(sql, stage_dir):
    write(stage_dir / "a.json", ['{"n":1}\n', '{"n":"x"}\n'])
    sql(f"""CREATE TABLE h (n NUMBER);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    sql("COPY INTO h FROM (SELECT $1:n::NUMBER FROM @s) ON_ERROR=CONTINUE")
    rows = sql("""SELECT file_name, status, row_count, row_parsed, error_count, first_error_line_number,
                         stage_location, table_name, pipe_name
                  FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 'H',
                       START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))""")
    assert rows == [{"file_name": "a.json", "status": "Partially loaded", "row_count": 1, "row_parsed": 2,
                     "error_count": 1, "first_error_line_number": 2, "stage_location": "@FLOELINE.PUBLIC.S",
                     "table_name": "FLOELINE.PUBLIC.H", "pipe_name": None}]
    assert sql("SELECT count(*) AS n FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 'H', "
               "START_TIME => DATEADD(hours, 1, CURRENT_TIMESTAMP())))") == [{"n": 0}]


def test_auto_ingest_pipe_loads_each_new_file_once(spark, sql, stage_dir, wh):
    from floeline.ingest.pipe_service import PipeService

    sql(f"""CREATE TABLE events (payload VARIANT, src VARCHAR);
            CREATE STAGE landing URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            CREATE PIPE events_pipe AUTO_INGEST=TRUE AS
              COPY INTO events FROM (SELECT $1, METADATA$FILENAME FROM @landing)""")
    shown = sql("SHOW PIPES")
    assert [(r["name"], r["kind"], r["used_by_connector"]) for r in shown if r["name"] == "EVENTS_PIPE"] == [
        ("EVENTS_PIPE", "AUTO_INGEST", "N")]
    status = json.loads(sql("SELECT SYSTEM$PIPE_STATUS('events_pipe') AS s")[0]["s"])
    assert status == {"executionState": "RUNNING", "pendingFileCount": 0}
    lines = []
    service = PipeService(spark, wh, poll_s=0.1, report=lines.append)
    write(stage_dir / "1.json", ['{"a":1}{"a":2}'])
    write(stage_dir / "2.json", ['{"a":3}\n', "not json\n"])
    assert json.loads(sql("SELECT SYSTEM$PIPE_STATUS('events_pipe') AS s")[0]["s"])["pendingFileCount"] == 2
    assert service.run(until_caught_up=True) == 0
    assert any("2.json LOAD_FAILED" in line for line in lines), lines  # SKIP_FILE, a pipe's default
    write(stage_dir / "3.json", ['{"a":4}\n'])
    assert service.poll() == 1 and service.poll() == 0  # the failed file is not tried again
    rows = table_rows(spark, wh, "EVENTS")
    assert sorted((json.loads(r["PAYLOAD"].toJson())["a"], r["SRC"]) for r in rows) == [
        (1, "1.json"), (2, "1.json"), (4, "3.json")]
    status = json.loads(sql("SELECT SYSTEM$PIPE_STATUS('events_pipe') AS s")[0]["s"])
    assert status["pendingFileCount"] == 0 and status["lastIngestedFilePath"] == "3.json"
    write(stage_dir / "2.json", ['{"a":3}\n'])  # fixed, same name: new content
    sql("ALTER PIPE events_pipe REFRESH")
    assert service.poll() == 1
    assert len(table_rows(spark, wh, "EVENTS")) == 4
    history = sql("SELECT file_name, status, pipe_name FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY("
                  "TABLE_NAME => 'EVENTS')) ORDER BY last_load_time, file_name")
    assert [(r["file_name"], r["status"]) for r in history] == [
        ("1.json", "Loaded"), ("2.json", "Load failed"), ("3.json", "Loaded"), ("2.json", "Loaded")]
    assert {r["pipe_name"] for r in history} == {"FLOELINE.PUBLIC.EVENTS_PIPE"}


def test_pipes_run_until_caught_up_retries_a_failing_pipe_instead_of_crashing(spark, sql, stage_dir, wh):
    """A pipe's query that fails under `pipes run --until-caught-up` (here its table was
    dropped; in the chaos soak, Spark's Python worker not connecting back on a busy
    machine) is reported once, not raised, and run again after its restart wait (here
    0.2 s, not RESTART_S's 5 s, so the test does not sit out three waits): the run exits
    1 if the fault stays, and loads the file once it is gone."""
    from floeline.ingest.pipe_service import PipeService

    sql(f"""CREATE TABLE events (payload VARIANT);
            CREATE STAGE landing URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            CREATE PIPE events_pipe AUTO_INGEST=TRUE AS COPY INTO events FROM @landing;
            DROP TABLE events""")
    write(stage_dir / "1.json", ['{"a":1}\n'])
    lines = []
    assert PipeService(spark, wh, poll_s=0.1, report=lines.append,
                       restart_s=0.2).run(until_caught_up=True) == 1
    assert [line for line in lines if "was dropped" in line] == [
        "pipe FLOELINE.PUBLIC.EVENTS_PIPE: pipe EVENTS_PIPE: its table FLOELINE.PUBLIC.EVENTS was dropped; "
        "create it again or DROP PIPE EVENTS_PIPE"], lines

    def recreate_on_failure(line):
        lines.append(line)
        if "was dropped" in line:
            sql("CREATE TABLE events (payload VARIANT)")

    lines.clear()
    assert PipeService(spark, wh, poll_s=0.1, report=recreate_on_failure,
                       restart_s=0.2).run(until_caught_up=True) == 0
    assert any("1.json LOADED" in line for line in lines), lines
    assert [json.loads(r["PAYLOAD"].toJson()) for r in table_rows(spark, wh, "EVENTS")] == [{"a": 1}]


def test_pipe_statement_errors(sql, stage_dir):
    sql(f"""CREATE TABLE t (v VARIANT);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON)""")
    with pytest.raises(SqlError, match="ABORT_STATEMENT is for COPY INTO"):
        sql("CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @s ON_ERROR=ABORT_STATEMENT")
    with pytest.raises(SqlError, match="stage FLOELINE.PUBLIC.NOPE does not exist"):
        sql("CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO t FROM @nope")
    with pytest.raises(SqlError, match="FORCE and FILES are not allowed"):
        sql("CREATE PIPE p AS COPY INTO t FROM @s FORCE=TRUE")
    with pytest.raises(SqlError, match="does not exist or does not load staged files"):
        sql("ALTER PIPE nope REFRESH")


def test_history_cache_follows_other_writers_its_own_loads_and_a_recreated_table(spark, sql, stage_dir, wh):
    """The pipe service's cache of a table's load history: what read_history says,
    after a COPY by someone else, the cache's own load, and DROP + CREATE."""
    from floeline.warehouse.load_history import HistoryCache, read_history

    def files(entries):
        return sorted((e.load.file, e.load.status) for e in entries)

    write(stage_dir / "a.json", ['{"a":1}\n'])
    sql(f"""CREATE TABLE t (v VARIANT);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            COPY INTO t FROM @s""")
    ref, cache = wh.resolve(["T"]), HistoryCache()
    assert files(cache.read(spark, ref)) == [("a.json", "LOADED")]
    write(stage_dir / "b.json", ['{"a":2}\n'])
    sql("COPY INTO t FROM @s")  # another writer: the cache reads the commit since
    assert files(cache.read(spark, ref)) == files(read_history(spark, ref)) == [
        ("a.json", "LOADED"), ("b.json", "LOADED")]
    write(stage_dir / "c.json", ['oops\n'])
    sql("COPY INTO t FROM @s ON_ERROR=SKIP_FILE")
    cache.read(spark, ref)
    cache.loaded(spark, ref, [])  # not the cache's own commit (none since): nothing noted
    assert files(cache.read(spark, ref)) == files(read_history(spark, ref))
    sql("CREATE OR REPLACE TABLE t (v VARIANT); COPY INTO t FROM @s FILES=('a.json')")
    assert files(cache.read(spark, ref)) == [("a.json", "LOADED")]
