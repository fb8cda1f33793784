"""Clauses several statements share: option lists (`NAME = value ...`, as in
CREATE STAGE, FILE_FORMAT=(...) and COPY's options) and stage references
(`@stage[/path]`, as in LIST, COPY and a transforming COPY's FROM)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from floeline.errors import SqlError
from floeline.sql.statements import Name
from floeline.warehouse.stage_paths import inside_stage


def value_of(node: exp.Expression):
    """A property value as Python: 'text' and words -> str, numbers -> int, TRUE ->
    True, ('a', 'b') -> list, a name -> its text."""
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else int(node.this) if node.this.lstrip("-").isdigit() else node.this
    if isinstance(node, (exp.Tuple, exp.Paren)):
        items = node.expressions if isinstance(node, exp.Tuple) else [node.this]
        return [value_of(i) for i in items]
    if isinstance(node, exp.Table):
        return ".".join(p.name for p in (node.args.get(k) for k in ("catalog", "db", "this")) if p)
    if isinstance(node, (exp.Var, exp.Identifier, exp.Column)):
        return node.name
    if isinstance(node, exp.Null):
        return None
    return node.sql("snowflake")


def options_of(properties) -> dict[str, object]:
    """Property(NAME = value) items as {NAME: value}."""
    out: dict[str, object] = {}
    for prop in properties or []:
        if not isinstance(prop, exp.Property):
            raise SqlError(f"unexpected option {prop.sql('snowflake')!r}")
        out[prop.name.upper()] = value_of(prop.args["value"])
    return out


@dataclass(frozen=True)
class StageRef:
    """`@name/path` as written in LIST, COPY and a transforming COPY's FROM."""

    name: Name
    path: str


def parse_stage_ref(text: str) -> StageRef:
    """@stage, @stage/path/, @db.schema.stage/path, @"Quoted Stage"/path."""
    if not text.startswith("@"):
        raise SqlError(f"expected a stage reference (@stage[/path]), not {text!r}")
    body = text[1:]
    if body.startswith(("~", "%")):
        raise SqlError(f"{text}: user and table stages (@~, @%table) are not supported; "
                       f"create a named stage (CREATE STAGE) and load from it")
    parts, quoted, i, current = [], [], 0, ""
    while i < len(body) and body[i] != "/":
        if body[i] == '"':
            end = body.index('"', i + 1)
            current, i = body[i + 1:end], end + 1
            quoted.append(True)
            continue
        if body[i] == ".":
            parts.append(current)
            if len(quoted) < len(parts):
                quoted.append(False)
            current = ""
        else:
            current += body[i]
        i += 1
    parts.append(current)
    if len(quoted) < len(parts):
        quoted.append(False)
    if not all(parts) or len(parts) > 3:
        raise SqlError(f"{text}: not a stage name (@stage, @schema.stage or @db.schema.stage)")
    path = body[i + 1:] if i < len(body) else ""
    return StageRef(Name(tuple(parts), tuple(quoted)), inside_stage(path, "@" + body[:i]))
