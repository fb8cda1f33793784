"""Spark's errors about a statement as one floeline line: what is wrong, in the
Snowflake SQL the user wrote, and the fix.

Spark speaks of the query floeline translated the statement to: `tweet:id` is
`variant_get(tweet, $.id)` there, and its `line 1 pos 99` is a position in that text,
not in the user's. Its JVM stack trace goes to Spark's log file (spark.py), never to
the terminal. Errors without a rule here keep Spark's own first line, without the
position and the plan."""

from __future__ import annotations

import re

from floeline.errors import SqlError

# Spark's way of writing a VARIANT path: variant_get(tweet, $.id), variant_get(v, $.a[0].b)
_VARIANT_GET = re.compile(r"variant_get\((`?)([^,`]+)\1, \$([^)]*)\)")
_ORDERING = re.compile(r"^\"?(.*?)\s+(?:ASC|DESC)\s+NULLS\s+(?:FIRST|LAST)\"?$")


class SparkSqlError(SqlError):
    """A statement Spark refused; `fragment` is the part of the user's statement it
    names (e.g. `tweet:id`), for the statement's error to locate, or None."""

    def __init__(self, message: str, fragment: str | None = None):
        super().__init__(message)
        self.fragment = fragment


def as_snowflake(expression: str) -> str:
    """Spark's text of an expression in the form the user wrote it: variant_get(v, $.a.b)
    -> v:a.b (a path of the user's VARIANT column)."""
    def path(match: re.Match) -> str:
        rest = match.group(3)
        return f"{match.group(2)}:{rest[1:] if rest.startswith('.') else rest}"
    return _VARIANT_GET.sub(path, expression.strip().strip('"'))


def explain(condition: str | None, parameters: dict[str, str], message: str) -> tuple[str, str | None]:
    """(one line for the user, the fragment of their statement it names) for Spark's
    error `condition` with its message `parameters`; `message` is Spark's own text."""
    data_type = parameters.get("dataType", "").strip('"')
    if condition == "DATATYPE_MISMATCH.INVALID_ORDERING_TYPE" and data_type == "VARIANT":
        expression = parameters.get("sqlExpr", "")
        sorted_by = _ORDERING.match(expression.strip('"'))
        if sorted_by:
            fragment = as_snowflake(sorted_by.group(1))
            return (f"ORDER BY {fragment}: a VARIANT value has no order; cast it to a type, "
                    f"e.g. ORDER BY {fragment}::NUMBER (or ::STRING, ::TIMESTAMP)", fragment)
        fragment = as_snowflake(expression)
        return (f"{fragment} compares VARIANT values, which have no order; cast them to a type, "
                f"e.g. {_cast_inside(fragment)}", _variant_path(fragment))
    if condition == "GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE" and data_type == "VARIANT":
        fragment = as_snowflake(parameters.get("sqlExpr", ""))
        return (f"GROUP BY {fragment}: VARIANT values cannot be grouped; cast it to a type, "
                f"e.g. GROUP BY {fragment}::STRING (and the same in the SELECT list)", fragment)
    return plain(message), None


def _variant_path(text: str) -> str | None:
    found = re.search(r"\w+:[\w.\[\]]+", text)
    return found.group(0) if found else None


def _cast_inside(text: str) -> str:
    """min(v:a) -> min(v:a::NUMBER): the first VARIANT path in `text` cast."""
    path = _variant_path(text)
    return text.replace(path, f"{path}::NUMBER", 1) if path else f"{text}::NUMBER"


def plain(message: str) -> str:
    """Spark's message without its JVM trace, its query plan, its SQLSTATE and the
    position in the translated query (which is not where the user's text is)."""
    text = message.split("\n\nJVM stacktrace")[0].split("\nJVM stacktrace")[0]
    text = text.split("\n'")[0].split("\n+-")[0].strip()
    text = re.sub(r"\s*SQLSTATE: \w+;?", "", text)
    text = re.sub(r";?\s*line \d+ pos \d+;?$", "", text.strip())
    return as_snowflake(text).strip()


def spark_sql_error(exc: BaseException, log_path: str) -> SparkSqlError:
    """The statement's error for a Spark exception: one line and where its trace is."""
    condition = _call(exc, "getCondition")
    parameters = _call(exc, "getMessageParameters") or {}
    line, fragment = explain(condition, dict(parameters), str(exc))
    where = f"Spark's {condition}, its trace in {log_path}" if condition else f"its trace in {log_path}"
    return SparkSqlError(f"query failed: {line} ({where})", fragment)


def _call(exc: BaseException, method: str):
    try:
        return getattr(exc, method)() if hasattr(exc, method) else None
    except Exception:  # noqa: BLE001 - the JVM is gone: Spark's text is all there is
        return None
