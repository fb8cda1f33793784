"""What `floeline sql` refuses to hand to Spark, so that a query reads the warehouse's
tables by name and nothing else on the machine.

Spark SQL can read any file it can reach: `delta.`/path``, `parquet.`/path``,
`csv.`/etc/passwd`` and the like are table references to a path; `INSERT OVERWRITE
DIRECTORY`, `LOAD DATA INPATH` and statements sqlglot does not know (passed on as
text: `CREATE TEMPORARY VIEW ... USING text OPTIONS (path ...)`, `VACUUM delta.`...``)
read or write paths; `reflect` / `java_method` call any Java method (environment
variables included). floeline sql resolves every table name against the warehouse
(sql/query.py), and refuses the rest here with the reason; files are read through a
stage (CREATE STAGE, COPY INTO)."""

from __future__ import annotations

from sqlglot import exp

from floeline.errors import SqlError

# Spark's file data sources: `<source>.`<path>`` reads the path directly.
FILE_SOURCES = frozenset({"delta", "parquet", "csv", "json", "orc", "text", "binaryfile", "avro",
                          "xml", "hive"})
JVM_FUNCTIONS = frozenset({"REFLECT", "JAVA_METHOD", "TRY_REFLECT"})
_USE_A_STAGE = "to read files, create a stage on their folder and COPY INTO a table from it"


def is_direct_file_reference(table: exp.Table) -> bool:
    """`format.`path`` (or "format"."path" in Snowflake's quoting): Spark's direct query
    of a file or folder, not a warehouse table."""
    return not table.catalog and (table.db or "").lower() in FILE_SOURCES


def direct_file_error(table: exp.Table) -> SqlError:
    return SqlError(f"floeline sql reads warehouse tables by name only: {table.db}.{table.name!r} "
                    f"would make Spark read the path {table.name!r} directly, outside the warehouse; "
                    f"{_USE_A_STAGE}")


def check_statement(tree: exp.Expression) -> None:
    """Raise a SqlError when the statement would read or write outside the warehouse."""
    if isinstance(tree, exp.Command):
        word = str(tree.this).upper()
        raise SqlError(f"floeline sql does not run {word} statements: Spark would take this one as "
                       f"text, unchecked, and it may read or write any path ({_USE_A_STAGE})")
    if isinstance(tree, exp.LoadData):
        raise SqlError(f"LOAD DATA is not supported: it reads any path; {_USE_A_STAGE}")
    for insert in tree.find_all(exp.Insert):
        if isinstance(insert.this, exp.Directory):
            raise SqlError("INSERT OVERWRITE DIRECTORY is not supported: it writes outside the "
                           "warehouse; write to a table (INSERT INTO t SELECT ...)")
    for function in tree.find_all(exp.Anonymous, exp.Func):
        name = (function.name if isinstance(function, exp.Anonymous) else function.sql_name()).upper()
        if name in JVM_FUNCTIONS:
            raise SqlError(f"{name} is not supported in floeline sql: it calls any Java method "
                           f"in the Spark driver (reading its environment and files)")
