"""Scripts -> statements, PIPE statements and the pipe store, without Spark."""

import os

import pytest

from floeline.errors import SqlError
from floeline.sql.statements import (CreatePipe, PipeCommand, parse_statement, select_item_texts,
                                     split_script)
from floeline.warehouse.pipe_select import compile_select
from floeline.warehouse import pipes
from floeline.warehouse.catalog import Warehouse

SOURCE = "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))"


def test_split_keeps_semicolons_in_strings_and_comments_and_positions():
    script = "select 'a;b';\n-- c;d\n\nCREATE TABLE t (a INT)  ;  ;\n  show pipes"
    statements = split_script(script)
    # a comment before a statement is not its text: the statement starts at CREATE, line 4
    assert [s.text for s in statements] == ["select 'a;b'", "CREATE TABLE t (a INT)", "show pipes"]
    assert [s.line for s in statements] == [1, 4, 5]
    with pytest.raises(SqlError, match=r"statement at line 5 \(show pipes\)"):
        raise statements[2].error("x")


def test_syntax_errors_carry_script_positions():
    statement = split_script("select 1;\nselect a from (\n  select 1 +")[1]
    with pytest.raises(SqlError, match=r"statement at line 2 .*syntax error at line 3, col 12"):
        statement.parse()
    with pytest.raises(SqlError, match="unclosed quote"):
        split_script("select 'abc")


def test_pipe_statements():
    parsed = parse_statement(split_script(
        f'create or replace pipe db."My s".orders as copy into ORDERS from (select $1:a, $1:b {SOURCE})')[0])
    create = parsed.pipe
    assert isinstance(create, CreatePipe) and create.replace and not create.if_not_exists
    assert create.name.normalized == ("DB", "My s", "ORDERS") and create.table.normalized == ("ORDERS",)
    assert len(create.select.expressions) == 2
    assert parse_statement(split_script("SHOW PIPES")[0]).pipe == PipeCommand("show")
    drop = parse_statement(split_script('DROP PIPE IF EXISTS "p q"')[0]).pipe
    assert (drop.action, drop.if_exists, drop.name.normalized) == ("drop", True, ("p q",))
    assert parse_statement(split_script("desc pipe p")[0]).pipe.action == "describe"
    with pytest.raises(SqlError, match="expected AS COPY INTO"):
        parse_statement(split_script("CREATE PIPE p AS SELECT 1")[0])
    with pytest.raises(SqlError, match="cannot be used together"):
        parse_statement(split_script(f"CREATE OR REPLACE PIPE IF NOT EXISTS p AS COPY INTO t FROM (SELECT 1 {SOURCE})")[0])


def test_select_item_texts_and_column_count():
    statement = split_script(f"CREATE PIPE p AS COPY INTO t FROM (SELECT $1:a::NUMBER, CONCAT($1:b, ','), "
                             f"$1['x, y'] AS z {SOURCE})")[0]
    texts = select_item_texts(statement)
    assert texts == ["$1:a::NUMBER", "CONCAT($1:b, ',')", "$1['x, y'] AS z"]
    select = parse_statement(statement).pipe.select
    columns = compile_select(select, ["A", "B", "Z"], texts)
    assert columns[0].error_sql.startswith("concat('column A ($1:a::NUMBER): ', ")
    assert columns[1].error_sql is None
    with pytest.raises(SqlError, match="3 items but the table has 2 columns"):
        compile_select(select, ["A", "B"], texts)
    with pytest.raises(SqlError, match="DATA_SOURCE"):
        compile_select(parse_statement(split_script("CREATE PIPE p AS COPY INTO t FROM (SELECT 1 FROM x)")[0]).pipe.select, ["A"])
    with pytest.raises(SqlError, match="WHERE is not supported"):
        compile_select(parse_statement(split_script(
            f"CREATE PIPE p AS COPY INTO t FROM (SELECT 1 {SOURCE} WHERE $1:a = 1)")[0]).pipe.select, ["A"])


def test_pipe_store_round_trip_and_lookup(tmp_path):
    wh = Warehouse(tmp_path)
    columns = (pipes.PipeColumn("v", None), pipes.PipeColumn("1", "'bad'"))
    pipe = pipes.Pipe("ORDERS", "ORDERS", "pipe", "CREATE PIPE ...", columns, "FLOELINE", "PUBLIC")
    pipes.save(wh, pipe, "FLOELINE", "PUBLIC")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "ORDERS") == pipe
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "orders") is None  # exact names
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "OTHER") is None
    # A pipe named like a table but copying elsewhere is not that table's pipe.
    pipes.save(wh, pipes.Pipe("T2", "X", "pipe", "", columns, "FLOELINE", "PUBLIC"), "FLOELINE", "PUBLIC")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "T2") is None
    # Replacing the file is seen by the next lookup; names with symbols are file-safe.
    replaced = pipes.Pipe("ORDERS", "ORDERS", "pipe", "v2", columns[:1], "FLOELINE", "PUBLIC")
    pipes.save(wh, replaced, "FLOELINE", "PUBLIC")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "ORDERS").sql == "v2"
    odd = pipes.Pipe("a/b ..Ł", "a/b ..Ł", "interactive", "", columns, "FLOELINE", "PUBLIC")
    pipes.save(wh, odd, "FLOELINE", "PUBLIC")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "a/b ..Ł") == odd
    assert [p.name for _, _, p in pipes.list_stored(wh)] == ["ORDERS", "T2"]
    assert not [f for f in os.listdir(tmp_path / "FLOELINE" / "PUBLIC" / "_pipes") if f.startswith(".tmp")]
    assert pipes.delete(wh, "FLOELINE", "PUBLIC", "pipe", "ORDERS")
    assert pipes.pipe_for_table(wh, "FLOELINE", "PUBLIC", "ORDERS") is None
    assert wh.list_tables() == []  # _pipes is not a table


def test_stage_pipe_statements():
    create = parse_statement(split_script(
        "CREATE PIPE p AUTO_INGEST = TRUE COMMENT='x' AS COPY INTO t FROM @s/p FILE_FORMAT=(TYPE=JSON)")[0]).pipe
    assert create.auto_ingest and create.select is None and create.table.normalized == ("T",)
    assert create.copy is not None and create.copy.args["files"][0].this.name == "@s/p"
    plain = parse_statement(split_script("CREATE PIPE p AS COPY INTO t FROM (SELECT $1 FROM @s)")[0]).pipe
    assert not plain.auto_ingest and plain.copy is not None
    refresh = parse_statement(split_script("ALTER PIPE db.s.p REFRESH")[0]).pipe
    assert (refresh.action, refresh.name.normalized) == ("refresh", ("DB", "S", "P"))
    with pytest.raises(SqlError, match="ALTER PIPE supports REFRESH only"):
        parse_statement(split_script("ALTER PIPE p SET PIPE_EXECUTION_PAUSED=TRUE")[0])


def test_optimize_names_its_table():
    from floeline.sql.statements import parse_statement, split_script

    parsed = parse_statement(split_script('OPTIMIZE db.s."my t"')[0])
    assert parsed.optimize.table.normalized == ("DB", "S", "my t") and parsed.tree is None
    with pytest.raises(SqlError, match="unexpected 'b'"):
        parse_statement(split_script("OPTIMIZE a b")[0])


def test_vacuum_names_its_table_and_an_optional_retention():
    from floeline.sql.statements import parse_statement, split_script

    parsed = parse_statement(split_script("VACUUM orders")[0])
    assert parsed.optimize.vacuum and parsed.optimize.retain_hours is None
    parsed = parse_statement(split_script('VACUUM s."t" RETAIN 200 HOURS')[0])
    assert parsed.optimize.table.normalized == ("S", "t") and parsed.optimize.retain_hours == 200
    with pytest.raises(SqlError, match=r"VACUUM table \[RETAIN <hours> HOURS\]"):
        parse_statement(split_script("VACUUM t RETAIN soon")[0])
