"""Run a SQL script (one statement, or several separated by `;`): the entry point of
`floeline sql` and of Python callers.

    from floeline.sql.script import run_script
    for statement, df in run_script(spark, open("setup.sql").read(), Warehouse("./warehouse")):
        print(format_rows(df))

Statements run in order; the first failing one stops the script with a SqlError that
names it (earlier statements stay done, as in a Snowflake worksheet)."""

from __future__ import annotations

from floeline.errors import FloelineError, SqlError
from floeline.sql.ddl import Ddl, is_ddl
from floeline.sql.query import run_query
from floeline.sql.statements import Statement, parse_statement, split_script
from floeline.warehouse.catalog import Warehouse


def run_script(spark, script: str, warehouse: Warehouse) -> list[tuple[Statement, object]]:
    """(statement, result DataFrame) for each statement of the script."""
    results = []
    ddl = Ddl(spark, warehouse)
    for statement in split_script(script):
        parsed = parse_statement(statement)
        if is_ddl(parsed):
            results.append((statement, ddl.execute(parsed)))
            continue
        try:
            results.append((statement, run_query(spark, parsed.tree, warehouse)))
        except SqlError as exc:
            raise statement.error(str(exc)) from None
        except FloelineError as exc:  # a table that is not there, an ambiguous name
            raise statement.error(str(exc)) from None
    return results
