"""Run a SQL script (one statement, or several separated by `;`): the entry point of
`floeline sql` and of Python callers.

    from floeline.sql.results import format_rows
    from floeline.sql.script import run_script
    for statement, df in run_script(spark, open("setup.sql").read(), Warehouse("./warehouse")):
        print(format_rows(df))

Statements run in order; the first failing one stops the script with a SqlError that
names it (earlier statements stay done, as in a Snowflake worksheet)."""

from __future__ import annotations

from sqlglot import exp

from floeline.errors import FloelineError, SqlError
from floeline.sql.copy import CopyInto
from floeline.sql.ddl import Ddl, is_ddl
from floeline.sql.maintenance import optimize, vacuum
from floeline.sql.query import run_query
from floeline.sql.spark_errors import SparkSqlError
from floeline.sql.stage_ddl import StageDdl, is_stage_statement
from floeline.sql.statements import Statement, parse_statement, split_script
from floeline.warehouse.catalog import Warehouse


def run_script(spark, script: str, warehouse: Warehouse) -> list[tuple[Statement, object]]:
    """(statement, result DataFrame) for each statement of the script."""
    return list(iter_script(spark, script, warehouse))


def run_sql(spark, sql: str, warehouse: Warehouse):
    """The result of the script's last statement as a Spark DataFrame (every
    statement runs, as in run_script)."""
    results = run_script(spark, sql, warehouse)
    if not results:
        raise SqlError("no SQL statement given")
    return results[-1][1]


def iter_script(spark, script: str, warehouse: Warehouse):
    """(statement, result DataFrame) of each statement as it runs: a caller that reads a
    result before taking the next one (`floeline sql` prints it) sees the warehouse as it
    was after that statement, before the next one changes it."""
    warehouse.prepare_spark(spark)  # an S3 warehouse: its bucket's endpoint and keys for s3a
    ddl = Ddl(spark, warehouse)
    stage_ddl = StageDdl(spark, warehouse)
    copy = CopyInto(spark, warehouse, ddl.need)
    for statement in split_script(script):
        parsed = parse_statement(statement)
        if parsed.tree is not None and is_stage_statement(parsed.tree):
            yield statement, _run(statement, stage_ddl.execute, parsed.tree)
            continue
        if isinstance(parsed.tree, exp.Copy):
            yield statement, _run(statement, copy.execute, parsed.tree, statement)
            continue
        if parsed.optimize is not None:
            todo = parsed.optimize
            yield statement, _run(statement, lambda name: vacuum(spark, ddl.need(name), todo.retain_hours)
                                  if todo.vacuum else optimize(spark, ddl.need(name)), todo.table)
            continue
        if is_ddl(parsed):
            yield statement, ddl.execute(parsed)
            continue
        yield statement, _run(statement, run_query, spark, parsed.tree, warehouse)


def _run(statement: Statement, action, *args):
    """Run one statement's action; an error names the statement."""
    try:
        return action(*args)
    except SparkSqlError as exc:
        raise located_error(statement, exc) from None
    except SqlError as exc:
        if str(exc).startswith("statement at line"):
            raise
        raise statement.error(str(exc)) from None
    except FloelineError as exc:
        raise statement.error(str(exc)) from None


def located_error(statement: Statement, exc: SparkSqlError) -> SqlError:
    """The statement's error for one Spark refused, with the line and column of the
    part of the statement it names when that is found in the statement's text."""
    problem = str(exc)
    at = statement.position_of(exc.fragment) if exc.fragment else None
    if at is not None:
        problem = problem.replace("query failed:", f"query failed at line {at[0]}, col {at[1]}:", 1)
    return statement.error(problem)
