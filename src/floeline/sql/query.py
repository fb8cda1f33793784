"""`floeline sql`: Spark SQL over the warehouse's tables, named TABLE, SCHEMA.TABLE or
DB.SCHEMA.TABLE as in Snowflake. Table names are resolved against the warehouse
directory and rewritten to Delta paths with sqlglot (its Databricks dialect reads
Spark SQL plus the `col:path` variant access Snowflake users write)."""

from __future__ import annotations

import json

import sqlglot
from sqlglot import exp

from floeline.errors import FloelineError
from floeline.warehouse.catalog import Warehouse

DIALECT = "databricks"


def translate(sql: str, warehouse: Warehouse) -> str:
    """The statement with every warehouse table reference replaced by its Delta path."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError as exc:
        raise FloelineError(f"SQL syntax error: {exc}") from exc
    ctes = {cte.alias_or_name.upper() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        if not parts or (len(parts) == 1 and parts[0].upper() in ctes) or table.db == "delta":
            continue
        identifiers = [table.args.get(k) for k in ("catalog", "db", "this") if table.args.get(k)]
        quoted = [bool(getattr(i, "quoted", False)) for i in identifiers]
        ref = warehouse.resolve(parts, quoted)
        alias = table.args.get("alias")
        replacement = exp.Table(this=exp.to_identifier(ref.path, quoted=True),
                                db=exp.to_identifier("delta"))
        for arg in ("version", "joins", "pivots", "laterals"):
            if table.args.get(arg):
                replacement.set(arg, table.args[arg])
        if alias is None and isinstance(table.parent, (exp.From, exp.Join)):
            # Columns qualified by the table's name (ORDERS.ID) keep working.
            alias = exp.TableAlias(this=exp.to_identifier(table.name, quoted=True))
        if alias is not None:
            replacement.set("alias", alias)
        table.replace(replacement)
    return tree.sql(dialect=DIALECT)


def run_sql(spark, sql: str, warehouse: Warehouse):
    """The query's result as a Spark DataFrame."""
    try:
        return spark.sql(translate(sql, warehouse))
    except FloelineError:
        raise
    except Exception as exc:
        message = str(exc).split("\n\nJVM stacktrace")[0]
        raise FloelineError(f"query failed: {message}") from exc


def _printable(df):
    """Variant and complex columns as JSON text, so every value prints plainly."""
    exprs = []
    for field in df.schema.fields:
        name = "`" + field.name.replace("`", "``") + "`"
        kind = field.dataType.typeName()
        if kind in ("variant", "struct", "array", "map"):
            exprs.append(f"to_json({name}) AS {name}")
        else:
            exprs.append(name)
    return df.selectExpr(*exprs)


def format_rows(df, fmt: str = "table") -> str:
    """The result as an aligned text table or as one JSON object per line."""
    names = df.columns
    rows = _printable(df).collect()
    if fmt == "json":
        out = []
        for row in rows:
            obj = {}
            for name, field, value in zip(names, df.schema.fields, row):
                if value is not None and field.dataType.typeName() in ("variant", "struct", "array", "map"):
                    value = json.loads(value)
                elif value is not None and not isinstance(value, (int, float, bool, str)):
                    value = float(value) if field.dataType.typeName() == "decimal" and value % 1 else (
                        int(value) if field.dataType.typeName() == "decimal" else str(value))
                obj[name] = value
            out.append(json.dumps(obj, ensure_ascii=False))
        return "\n".join(out)
    cells = [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    fmt_row = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"
    body = [line, fmt_row(names), line] + [fmt_row(r) for r in cells] + [line]
    body.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(body)
