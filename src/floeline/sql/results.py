"""Statement results as `floeline sql` prints them, and Spark's failures as a user
reads them: shared by the statement runners, the CLI and the demo."""

from __future__ import annotations

import json

from floeline.sql.spark_errors import plain


def spark_error(exc: Exception) -> str:
    """A Spark exception's message without the JVM stack trace and the query plan."""
    return plain(str(exc))


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
