"""`floeline sql` reads warehouse tables by name only: Spark's direct file queries and
statements that reach any path are refused with the reason (no Spark)."""

from __future__ import annotations

import pytest
import sqlglot

from floeline.errors import SqlError, TableError
from floeline.sql.query import translate
from floeline.sql.query_guard import check_statement
from floeline.warehouse.catalog import Warehouse


@pytest.fixture
def warehouse(tmp_path):
    (tmp_path / "wh" / "FLOELINE" / "PUBLIC" / "ORDERS" / "_delta_log").mkdir(parents=True)
    (tmp_path / "wh" / "FLOELINE" / "DELTA" / "EVENTS" / "_delta_log").mkdir(parents=True)
    return Warehouse(tmp_path / "wh")


@pytest.mark.parametrize("query", ['SELECT * FROM delta."/etc"', 'SELECT * FROM "DELTA"."/tmp/other/table"',
                                   'SELECT * FROM parquet."/data/x.parquet"', 'SELECT * FROM csv."/etc/passwd"',
                                   'SELECT * FROM text."/etc/passwd"', 'SELECT * FROM json."/etc"',
                                   'SELECT * FROM binaryFile."/etc/shadow"',
                                   'SELECT o.* FROM orders o JOIN orc."/x" AS x ON true',
                                   'SELECT * FROM orders WHERE 1 IN (SELECT 1 FROM delta."/etc")',
                                   'INSERT INTO delta."/tmp/elsewhere" SELECT 1',
                                   'UPDATE delta."/tmp/elsewhere" SET n = 1',
                                   'DELETE FROM parquet."/tmp/elsewhere"'])
def test_direct_file_queries_are_refused(warehouse, query):
    with pytest.raises(SqlError, match=r"floeline sql reads warehouse tables by name only: .* would make Spark "
                                       r"read the path '/.*' directly, outside the warehouse"):
        translate(query, warehouse)


def test_a_schema_named_like_a_format_is_still_a_warehouse_table(warehouse):
    path = f"{warehouse.root}/FLOELINE/DELTA/EVENTS"
    assert translate("SELECT * FROM delta.events", warehouse) == f"SELECT * FROM delta.`{path}` AS `events`"
    with pytest.raises(TableError, match="floeline.delta.nope not found"):  # DB.SCHEMA.TABLE: the usual error
        translate("SELECT * FROM floeline.delta.nope", warehouse)


@pytest.mark.parametrize("statement, reason", [
    ("CREATE TEMPORARY VIEW v USING text OPTIONS (path '/etc/passwd')", "does not run CREATE statements"),
    ("VACUUM x", "does not run VACUUM statements"),
    ("LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE orders", "LOAD DATA is not supported"),
    ("INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT 1", "INSERT OVERWRITE DIRECTORY is not supported"),
    ("SELECT reflect('java.lang.System', 'getenv', 'AWS_SECRET_ACCESS_KEY')", "REFLECT is not supported"),
    ("SELECT java_method('java.lang.System', 'getProperty', 'user.home')", "JAVA_METHOD is not supported"),
    ("SELECT n FROM (SELECT try_reflect('java.lang.System', 'getenv', 'HOME') AS n)", "TRY_REFLECT is not supported"),
])
def test_statements_that_reach_paths_are_refused(statement, reason):
    with pytest.raises(SqlError, match=reason):
        check_statement(sqlglot.parse_one(statement, read="snowflake"))


def test_ordinary_queries_pass(warehouse):
    for statement in ["SELECT record_metadata:topic FROM orders", "INSERT INTO orders SELECT 1",
                      "WITH a AS (SELECT 1 AS n) SELECT n FROM a", "SELECT upper('reflect')"]:
        check_statement(sqlglot.parse_one(statement, read="snowflake"))
