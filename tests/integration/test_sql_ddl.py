"""`floeline sql` DDL end to end on real Delta tables (Spark, no Kafka), and every
compiled pipe expression evaluated by Spark over a VARIANT record."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from floeline.errors import SqlError
from floeline.sql.script import run_script
from floeline.sql.statements import parse_statement, select_item_texts, split_script
from floeline.warehouse.pipe_select import compile_select
from floeline.warehouse import pipes
from floeline.warehouse.catalog import Warehouse

RECORD = {
    "order_id": 12345, "customer_name": "John", "order_total": 100.5, "isPaid": True,
    "city": "New York", "age": 30, "married": True, "has cat": True,
    " @&$#* has Łułósżź": True, "skills": ["sitting", "standing", "eating"],
    "family": {"son": "Jack", "daughter": "Anna"}, "parent": {"child": 1, "child field": "cf"},
    "bad": "abc", "num_text": "42", "M_NAME": "cpu", "M_VALUE": 7, "ts": "2024-01-02 03:04:05",
    "Case": "upper", "case": "lower", "it's": "quote", "both'\"": "both",
}
META = {"topic": "orders", "partition": 0, "offset": 5, "CreateTime": 1700000000000,
        "SnowflakeConnectorPushTime": 1700000000123, "key": "k1"}


def sql_json(value) -> str:
    return "'" + json.dumps(value, ensure_ascii=False).replace("\\", "\\\\").replace("'", "\\'") + "'"


def evaluate(spark, statement: str, columns: list[str], record=RECORD):
    """(values, errors) of the pipe in `statement` over one record, evaluated by Spark."""
    parsed = parse_statement(split_script(statement)[0])
    select = parsed.pipe.select if parsed.pipe else parsed.tree.expression.unnest()
    compiled = compile_select(select, columns, select_item_texts(parsed.statement))
    exprs = [f"{c.value_sql} AS c{i}" for i, c in enumerate(compiled)]
    exprs += [f"{c.error_sql or 'CAST(NULL AS STRING)'} AS e{i}" for i, c in enumerate(compiled)]
    source = f"(SELECT parse_json({sql_json(record)}) AS v, parse_json({sql_json(META)}) AS _meta)"
    row = spark.sql(f"SELECT {', '.join(exprs)} FROM {source}").first()
    n = len(compiled)
    values = [json.loads(v.toJson()) if hasattr(v, "toJson") else v for v in row[:n]]
    return values, list(row[n:])


def test_spec_orders_pipe_with_metadata(spark):
    values, errors = evaluate(spark, """
        CREATE PIPE ORDERS AS COPY INTO ORDERS_TABLE FROM (
        SELECT $1:order_id::NUMBER, $1:customer_name, $1:order_total,
               $1:RECORD_METADATA.topic AS source_topic,
               $1:RECORD_METADATA.offset::NUMBER AS kafka_offset,
               $1:RECORD_METADATA.SnowflakeConnectorPushTime::BIGINT AS ingestion_time,
               $1:RECORD_METADATA.partition::STRING AS partition,
               CONCAT($1['order_total']::STRING, ' USD') AS order_total_text,
               $1['isPaid']::STRING AS ispaid, $1:order_total::VARCHAR || ' USD'
        FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""", [f"C{i}" for i in range(10)])
    assert values == [Decimal(12345), "John", 100.5, "orders", Decimal(5), Decimal(1700000000123),
                      "0", "100.5 USD", "true", "100.5 USD"]
    assert errors == [None] * 10


def test_spec_person_data_pipe(spark):
    values, errors = evaluate(spark, """
        CREATE PIPE PERSON_DATA AS COPY INTO PERSON_DATA FROM (
        SELECT $1:city, $1:age, $1:married, $1['has cat'] AS has_cat,
               $1[' @&$#* has Łułósżź'] AS weird_field_name, $1:skills, $1:family,
               $1:parent.child, $1:parent['child field'], $1:skills[1]::VARCHAR,
               $1:age::NUMBER, $1:Case, $1:case, $1['it''s'], $1['both''"']
        FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""", [f"C{i}" for i in range(15)])
    assert values == ["New York", 30, True, True, True, ["sitting", "standing", "eating"],
                      {"son": "Jack", "daughter": "Anna"}, 1, "cf", "standing", Decimal(30),
                      "upper", "lower", "quote", "both"]
    assert errors == [None] * 15


def test_spec_realtime_metrics_interactive_table(spark):
    values, errors = evaluate(spark, """
        CREATE INTERACTIVE TABLE REALTIME_METRICS ( metric_name VARCHAR, metric_value NUMBER,
        source_topic VARCHAR, timestamp TIMESTAMP_NTZ ) AS (SELECT $1:M_NAME::VARCHAR,
        $1:M_VALUE::NUMBER, $1:RECORD_METADATA.topic::VARCHAR,
        $1:RECORD_METADATA.timestamp::TIMESTAMP_NTZ from TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""",
        ["METRIC_NAME", "METRIC_VALUE", "SOURCE_TOPIC", "TIMESTAMP"])
    assert values == ["cpu", Decimal(7), "orders", None]  # RECORD_METADATA has no `timestamp`
    assert errors == [None] * 4


def test_strict_casts_are_row_errors_and_try_casts_are_null(spark):
    values, errors = evaluate(spark, """
        CREATE PIPE P AS COPY INTO T FROM (SELECT
          $1:bad::NUMBER, TRY_CAST($1:bad AS NUMBER), TO_NUMBER($1:bad), TRY_TO_NUMBER($1:bad),
          $1:num_text::NUMBER, $1:missing::NUMBER, $1:family::NUMBER, TO_DATE($1:bad),
          IFF($1:bad = 'abc', 'n/a', $1:bad::NUMBER), COALESCE($1:num_text::NUMBER, $1:bad::NUMBER),
          PARSE_JSON($1:bad), TRY_PARSE_JSON($1:bad), 1 / 0
        FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""", [f"C{i}" for i in range(13)])
    assert values[1] is None and values[3] is None and values[11] is None
    assert values[4] == Decimal(42) and values[5] is None and values[8] == "n/a"
    assert values[9] == Decimal(42)
    assert errors[0] == "column C0 ($1:bad::NUMBER): cannot convert \"abc\" to NUMBER(38,0)"
    assert "TO_NUMBER" in errors[2] and "abc" in errors[2]
    assert "cannot convert {" in errors[6] and "DATE" in errors[7]
    assert [i for i, e in enumerate(errors) if e] == [0, 2, 6, 7, 10, 12]


def test_functions_and_timestamps(spark):
    values, errors = evaluate(spark, """
        CREATE PIPE P AS COPY INTO T FROM (SELECT
          UPPER($1:customer_name), LOWER($1:city), TRIM('  x '), SUBSTR($1:city, 1, 3),
          COALESCE($1:missing, 'dflt'), IFF($1:age > 18, 'adult', 'minor'),
          CASE WHEN $1:age >= 30 THEN 'thirty+' ELSE 'young' END, TO_VARCHAR($1:age),
          TO_TIMESTAMP_NTZ($1:ts), $1:RECORD_METADATA.CreateTime::TIMESTAMP_NTZ,
          ARRAY_SIZE($1:skills), $1:order_total::NUMBER(10,2), $1:age + 1, LENGTH($1:city),
          TO_DOUBLE($1:num_text), $1:isPaid::BOOLEAN, 'lit', 42, NULL, $1:ts::DATE,
          PARSE_JSON('{"a": 1}'), CASE $1:city WHEN 'New York' THEN 'NY' END, $1
        FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""", [f"C{i}" for i in range(23)])
    import datetime
    assert values[:22] == [
        "JOHN", "new york", "x", "New", "dflt", "adult", "thirty+", "30",
        datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime(2023, 11, 14, 22, 13, 20),
        3, Decimal("100.50"), 31.0, 8, 42.0, True, "lit", 42, None, datetime.date(2024, 1, 2),
        {"a": 1}, "NY"]
    assert values[22]["order_id"] == 12345
    assert errors == [None] * 23


# ---- DDL end to end ----------------------------------------------------------------


def run(spark, wh, script):
    return [(s, df.collect()) for s, df in run_script(spark, script, wh)]


def test_tables_create_describe_alter_show_drop(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    run(spark, wh, """
        CREATE TABLE ORDERS (order_id NUMBER NOT NULL, "customer name" VARCHAR(20), total NUMBER(10,2),
          i INT, f FLOAT, ok BOOLEAN, d DATE, t TIME, ts TIMESTAMP_NTZ, tl TIMESTAMP_LTZ, b BINARY,
          v VARIANT, o OBJECT, a ARRAY, "Łódź €" TEXT) ENABLE_SCHEMA_EVOLUTION = TRUE;
        CREATE TABLE IF NOT EXISTS orders (x INT);
        CREATE TABLE raw."My Table" (x INT)""")
    described = run(spark, wh, "DESCRIBE TABLE orders")[0][1]
    assert [(r["name"], r["type"], r["null?"]) for r in described][:4] == [
        ("ORDER_ID", "NUMBER(38,0)", "N"), ("customer name", "VARCHAR(20)", "Y"),
        ("TOTAL", "NUMBER(10,2)", "Y"), ("I", "NUMBER(38,0)", "Y")]
    assert [r["type"] for r in described][4:] == [
        "FLOAT", "BOOLEAN", "DATE", "TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "BINARY",
        "VARIANT", "OBJECT", "ARRAY", "VARCHAR"]  # declared types kept beside the Delta types
    assert described[-1]["name"] == "Łódź €"
    shown = {r["name"]: r for r in run(spark, wh, "SHOW TABLES")[0][1]}
    assert shown["ORDERS"]["enable_schema_evolution"] == "Y" and shown["ORDERS"]["columns"] == 15
    assert shown["My Table"]["schema_name"] == "RAW" and shown["My Table"]["enable_schema_evolution"] == "N"

    run(spark, wh, """ALTER TABLE orders ADD COLUMN extra VARCHAR(5), "Other" NUMBER;
                      ALTER TABLE orders ADD COLUMN IF NOT EXISTS extra VARCHAR;
                      ALTER TABLE ORDERS SET ENABLE_SCHEMA_EVOLUTION = FALSE""")
    described = run(spark, wh, "DESC TABLE floeline.public.orders")[0][1]
    assert [(r["name"], r["type"]) for r in described][-2:] == [("EXTRA", "VARCHAR(5)"),
                                                               ("Other", "NUMBER(38,0)")]
    assert described[1]["type"] == "VARCHAR(20)"
    assert {r["name"]: r for r in run(spark, wh, "SHOW TABLES")[0][1]}["ORDERS"][
        "enable_schema_evolution"] == "N"
    with pytest.raises(SqlError, match="already exists"):
        run(spark, wh, "ALTER TABLE orders ADD COLUMN extra INT")
    with pytest.raises(SqlError, match="already exists"):
        run(spark, wh, "CREATE TABLE orders (x INT)")

    run(spark, wh, "CREATE OR REPLACE TABLE orders (only_one INT)")
    assert [r["name"] for r in run(spark, wh, "DESCRIBE TABLE orders")[0][1]] == ["ONLY_ONE"]
    run(spark, wh, 'DROP TABLE orders; DROP TABLE IF EXISTS orders; DROP TABLE raw."My Table"')
    assert run(spark, wh, "SHOW TABLES")[0][1] == []
    with pytest.raises(SqlError, match="does not exist"):
        run(spark, wh, "DROP TABLE orders")


def test_pipes_stored_and_listed_from_a_second_warehouse(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    run(spark, wh, """
        CREATE TABLE ORDERS (order_id NUMBER, customer_name VARCHAR, order_total NUMBER,
                             order_date TIMESTAMP_NTZ, source_topic VARCHAR);
        CREATE PIPE ORDERS AS COPY INTO ORDERS FROM (SELECT $1:order_id::NUMBER, $1:customer_name,
            $1:order_total::NUMBER, $1:order_date::TIMESTAMP_NTZ, $1:RECORD_METADATA.topic
            FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')));
        CREATE TABLE OTHER (x VARIANT);
        CREATE PIPE side_pipe AS COPY INTO other FROM (SELECT $1 FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    second = Warehouse(tmp_path / "wh")  # e.g. the connector's process
    pipe = pipes.pipe_for_table(second, "FLOELINE", "PUBLIC", "ORDERS")
    assert pipe is not None and pipe.kind == "pipe" and pipe.table == "ORDERS" and len(pipe.columns) == 5
    assert "$1:order_id::NUMBER" in pipe.sql
    assert pipes.pipe_for_table(second, "FLOELINE", "PUBLIC", "OTHER") is None  # default pipe
    listed = {r["name"]: r for r in run(spark, second, "SHOW PIPES")[0][1]}
    assert listed["ORDERS"]["kind"] == "USER" and listed["ORDERS"]["used_by_connector"] == "Y"
    assert listed["ORDERS-STREAMING"]["kind"] == "DEFAULT" and listed["ORDERS-STREAMING"]["used_by_connector"] == "N"
    assert listed["OTHER-STREAMING"]["used_by_connector"] == "Y"
    assert listed["SIDE_PIPE"]["used_by_connector"] == "N"
    described = run(spark, second, "DESCRIBE PIPE orders")[0][1]
    assert described[0]["table"] == "FLOELINE.PUBLIC.ORDERS"

    # Replaced: the next lookup sees the new definition.
    run(spark, wh, """CREATE OR REPLACE PIPE ORDERS AS COPY INTO ORDERS FROM (SELECT 1, 'x', 2,
        NULL, $1:RECORD_METADATA.topic FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    assert pipes.pipe_for_table(second, "FLOELINE", "PUBLIC", "ORDERS").columns[1].value_sql == "'x'"
    run(spark, wh, "DROP PIPE orders; DROP PIPE IF EXISTS orders")
    assert pipes.pipe_for_table(second, "FLOELINE", "PUBLIC", "ORDERS") is None
    with pytest.raises(SqlError, match="does not exist"):
        run(spark, wh, "DESCRIBE PIPE orders")


def test_interactive_table(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    run(spark, wh, """CREATE INTERACTIVE TABLE REALTIME_METRICS ( metric_name VARCHAR, metric_value NUMBER,
        source_topic VARCHAR, timestamp TIMESTAMP_NTZ ) AS (SELECT $1:M_NAME::VARCHAR, $1:M_VALUE::NUMBER,
        $1:RECORD_METADATA.topic::VARCHAR, $1:RECORD_METADATA.timestamp::TIMESTAMP_NTZ
        from TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    pipe = pipes.pipe_for_table(Warehouse(tmp_path / "wh"), "FLOELINE", "PUBLIC", "REALTIME_METRICS")
    assert pipe.kind == "interactive" and len(pipe.columns) == 4
    shown = run(spark, wh, "SHOW TABLES")[0][1]
    assert shown[0]["kind"] == "INTERACTIVE"
    assert [r["name"] for r in run(spark, wh, "DESCRIBE TABLE realtime_metrics")[0][1]] == [
        "METRIC_NAME", "METRIC_VALUE", "SOURCE_TOPIC", "TIMESTAMP"]
    with pytest.raises(SqlError, match="interactive table"):
        run(spark, wh, """CREATE PIPE REALTIME_METRICS AS COPY INTO REALTIME_METRICS FROM (SELECT 1, 2, 3, 4
            FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))""")
    run(spark, wh, "DROP TABLE realtime_metrics")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "REALTIME_METRICS") is None


def test_errors_name_the_statement_and_leave_nothing_behind(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    run(spark, wh, "CREATE TABLE T (a NUMBER, b VARCHAR)")
    source = "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    cases = [
        (f"CREATE PIPE P AS COPY INTO NOPE FROM (SELECT $1:a {source}", "NOPE does not exist"),
        (f"CREATE PIPE T AS COPY INTO T FROM (SELECT $1:a {source}", "1 item but the table has 2 columns"),
        (f"CREATE PIPE T AS COPY INTO T FROM (SELECT $1:a, FROBNICATE($1:b) {source}", "FROBNICATE"),
        (f"CREATE PIPE T AS COPY INTO T FROM (SELECT $1:a, $1:b::NOTATYPE {source}", "line 1"),
        (f"CREATE PIPE T AS COPY INTO T FROM (SELECT $1:a, b {source}", "reads the record through \\$1"),
        ("CREATE TABLE U (a NOTATYPE)", "NOTATYPE"),
        ("CREATE TABLE U (a NUMBER, a VARCHAR)", "defined twice"),
        ("CREATE INTERACTIVE TABLE U (a NUMBER) AS (SELECT $1:a, $1:b FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))",
         "2 items but the table has 1 column"),
        ("SELECT FROM WHERE (", "syntax error"),
        ("CREATE TABLE V (a INT);\nSELECT * FROM\n  nope_table", "statement at line 2"),
    ]
    for statement, problem in cases:
        with pytest.raises(SqlError, match=problem):
            run(spark, wh, statement)
    assert [t.name for t in wh.list_tables()] == ["T", "V"]  # V ran before the failing SELECT
    assert pipes.list_stored(wh) == [] and pipes.list_stored(wh, "interactive") == []


def test_queries_read_variants_snowflake_style(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    run(spark, wh, "CREATE TABLE EVENTS (record_metadata VARIANT, payload VARIANT, n NUMBER)")
    spark.sql(f"INSERT INTO delta.`{wh.root}/FLOELINE/PUBLIC/EVENTS` SELECT parse_json({sql_json(META)}), "
              f"parse_json({sql_json(RECORD)}), 1")
    rows = run(spark, wh, """SELECT record_metadata:topic::string AS topic, payload:parent.child::NUMBER AS c,
        payload['has cat'] AS cat, payload:skills[0]::VARCHAR AS s, IFF(n = 1, 'one', 'other') AS i,
        TO_VARCHAR(payload:age) AS age, ARRAY_SIZE(payload:skills) AS k, payload:family.son AS son
        FROM events WHERE record_metadata:partition = 0 AND payload:age > 18""")[0][1]
    assert len(rows) == 1
    row = rows[0]
    assert (row["topic"], row["c"], row["s"], row["i"], row["age"], row["k"]) == (
        "orders", Decimal(1), "sitting", "one", "30", 3)
    assert json.loads(row["cat"].toJson()) is True and json.loads(row["son"].toJson()) == "Jack"
    assert run(spark, wh, "SELECT count(*) AS n FROM events AT(VERSION => 0)")[0][1][0]["n"] == 0


def test_cli_runs_files_arguments_and_stdin(spark, tmp_path, capsys, monkeypatch):
    import io

    from floeline.cli import main

    wh = str(tmp_path / "wh")
    setup = tmp_path / "setup.sql"
    setup.write_text("CREATE TABLE PERSON_DATA (city VARCHAR, has_cat BOOLEAN);\n"
                     "CREATE PIPE PERSON_DATA AS COPY INTO PERSON_DATA FROM (SELECT $1:city,\n"
                     "  $1['has cat'] AS has_cat FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')));\n")
    assert main(["sql", "--warehouse", wh, "-f", str(setup)]) == 0
    out = capsys.readouterr().out
    assert "Table PERSON_DATA successfully created." in out and "Pipe PERSON_DATA successfully created." in out
    assert main(["sql", "--warehouse", wh, "--format", "json", "SHOW PIPES"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["kind"], r["used_by_connector"]) for r in rows] == [
        ("PERSON_DATA", "USER", "Y"), ("PERSON_DATA-STREAMING", "DEFAULT", "N")]
    monkeypatch.setattr("sys.stdin", io.StringIO("DESCRIBE TABLE person_data"))
    assert main(["sql", "--warehouse", wh]) == 0
    assert "| HAS_CAT | BOOLEAN" in capsys.readouterr().out
    assert main(["sql", "--warehouse", wh, "CREATE PIPE X AS COPY INTO PERSON_DATA FROM (SELECT\n"
                 "$1:a::NOPE FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"]) == 1
    err = capsys.readouterr().err
    assert "statement at line 1 (CREATE PIPE X" in err and "line 2" in err


def test_each_statement_is_read_before_the_next_one_runs(spark, tmp_path):
    """`floeline sql "SELECT * FROM T; CREATE OR REPLACE TABLE T ..."` prints the SELECT
    before T is replaced (iter_script yields each result as its statement ran)."""
    from floeline.sql.script import iter_script

    wh = Warehouse(tmp_path / "wh")
    run_script(spark, "CREATE TABLE T (a NUMBER)", wh)
    seen = [(df.columns, df.collect()) for _, df in iter_script(
        spark, "SELECT * FROM T; CREATE OR REPLACE TABLE T (b VARCHAR); SELECT * FROM T", wh)]
    assert [columns for columns, _ in seen] == [["A"], ["status"], ["B"]]
