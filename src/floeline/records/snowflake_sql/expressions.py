"""Snowflake expressions (as sqlglot parses them with read="snowflake") -> Spark SQL.

One compiler serves two callers:
- pipes (`Mode.PIPE`): the SELECT list of CREATE PIPE / CREATE INTERACTIVE TABLE.
  `$1` is the record content (column `v`), `$1:RECORD_METADATA...` reads column
  `_meta`. A strict conversion (`::NUMBER`, CAST, TO_NUMBER, TO_DATE, ...) cannot be
  a Spark CAST: under ANSI mode one bad record would fail the whole micro-batch. So it
  compiles to a try-conversion for the value plus an error expression that is non-NULL
  exactly for the rows whose conversion failed; the connector turns those into row
  errors. TRY_CAST / TRY_TO_* never produce errors (NULL, as in Snowflake).
- queries (`Mode.QUERY`): variant access on columns (`record_metadata:topic`,
  `col['k']`, `col:arr[0]`) and Snowflake functions inside an ordinary SELECT. Casts
  stay strict Spark casts there (a bad value fails the query, as in Snowflake).

Every compiled expression carries a coarse type (a Spark type string, "variant", or
None when unknown) so that variants are converted where Spark will not do it
implicitly: comparisons and arithmetic with a VARIANT, ARRAY_SIZE, mixed branches of
IFF/CASE/COALESCE. Path keys are case-sensitive, as in Snowflake.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from sqlglot import exp

from floeline.errors import SqlError
from floeline.records.content import sql_string
from floeline.records.snowflake_sql.types import snowflake_type, spark_type

SPARK_DIALECT = "databricks"
METADATA_KEY = "RECORD_METADATA"
# The input frame a pipe's SELECT reads: the record ($1) and its RECORD_METADATA.
PIPE_RECORD_COLUMN, PIPE_METADATA_COLUMN = "v", "_meta"


class Mode(enum.Enum):
    PIPE = "pipe"
    QUERY = "query"


@dataclass(frozen=True)
class Compiled:
    """A Spark SQL expression, its coarse type, and the SQL expressions (NULL when
    fine) whose first non-NULL value says why this row's value failed."""

    sql: str
    type: str | None = None
    errors: tuple[str, ...] = ()

    @property
    def error_sql(self) -> str | None:
        return _first(self.errors)


def _first(errors: tuple[str, ...] | list[str]) -> str | None:
    errors = [e for e in errors if e]
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else f"coalesce({', '.join(errors)})"


def position(node: exp.Expression) -> str:
    """' (line L, col C)' for the node, or '' when sqlglot kept no position."""
    for n in node.walk():
        meta = getattr(n, "meta", None) or {}
        if "line" in meta:
            return f" (line {meta['line']}, col {meta['col']})"
    return ""


def _is_number(t: str | None) -> bool:
    return t is not None and (t.startswith("decimal") or t in ("double", "float", "bigint", "int"))


_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMESTAMPS = ("timestamp", "timestamp_ntz")
# Left as they are by `rewrite` (sqlglot writes them; a literal may be a LIMIT or a
# time-travel version, not an expression).
_LEAVES = (exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.Alias)

# Spark functions whose arguments are strings (a VARIANT argument is cast to STRING).
_STRING_FUNCTIONS = {
    exp.Upper: "upper", exp.Lower: "lower", exp.Length: "length", exp.Replace: "replace",
    exp.Left: "left", exp.Right: "right", exp.Initcap: "initcap", exp.Contains: "contains",
    exp.StartsWith: "startswith", exp.EndsWith: "endswith", exp.MD5: "md5",
    exp.RegexpReplace: "regexp_replace", exp.SplitPart: "split_part", exp.Substring: "substring",
}
_STRING_RESULT = {"upper", "lower", "replace", "left", "right", "initcap", "md5", "regexp_replace",
                  "split_part", "substring"}
_NUMBER_FUNCTIONS = {exp.Abs: "abs", exp.Round: "round", exp.Floor: "floor", exp.Ceil: "ceil"}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_COMPARISONS = {exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_TIMESTAMP_FUNCTIONS = {"TO_TIMESTAMP": "timestamp", "TO_TIMESTAMP_NTZ": "timestamp_ntz",
                        "TO_TIMESTAMP_LTZ": "timestamp", "TO_TIMESTAMP_TZ": "timestamp"}

SUPPORTED_FUNCTIONS = (
    "CONCAT/||, UPPER, LOWER, TRIM/LTRIM/RTRIM, LENGTH/LEN, SUBSTR/SUBSTRING, LEFT, RIGHT, "
    "REPLACE, REGEXP_REPLACE, SPLIT_PART, INITCAP, CONTAINS, STARTSWITH, ENDSWITH, MD5, "
    "COALESCE/NVL/IFNULL, NVL2, NULLIF, IFF, CASE, ABS, ROUND, FLOOR, CEIL, "
    "TO_NUMBER/TO_DECIMAL/TO_NUMERIC, TO_DOUBLE, TO_BOOLEAN, TO_VARCHAR/TO_CHAR, TO_DATE, "
    "TO_TIMESTAMP[_NTZ|_LTZ|_TZ], PARSE_JSON, TO_VARIANT, TO_JSON, ARRAY_SIZE, "
    "CURRENT_TIMESTAMP, CURRENT_DATE, and the TRY_ forms of the conversions")


# A SELECT over staged files (COPY INTO ... FROM (SELECT ... FROM @stage)) may read
# these file columns; COPY gives each row the Spark column named here.
FILE_COLUMNS = {
    "METADATA$FILENAME": ("_file", "string"),
    "METADATA$FILE_ROW_NUMBER": ("_row", "bigint"),
    "METADATA$FILE_CONTENT_KEY": ("_md5", "string"),
    "METADATA$FILE_LAST_MODIFIED": ("_file_modified", "timestamp_ntz"),
    "METADATA$START_SCAN_TIME": ("_scan_time", "timestamp"),
}


class Compiler:
    """Compiles one expression tree; `mode` decides what `$1` and columns mean.
    `staged` compiles a SELECT over staged files (the METADATA$ file columns exist);
    `positional`, of delimited files: `$1`, `$2`, ... are the fields of the record
    (column `v` holds them as an array)."""

    def __init__(self, mode: Mode, staged: bool = False, positional: bool = False):
        self.mode = mode
        self.staged, self.positional = staged, positional

    # ---- entry points ------------------------------------------------------------

    def compile(self, node: exp.Expression) -> Compiled:
        handler = self._handler(node)
        if handler is not None:
            return handler(node)
        if self.mode is Mode.QUERY:
            return Compiled(self._generic(node))
        if self.staged and isinstance(node, exp.Column) and node.name.upper() in FILE_COLUMNS:
            column, kind = FILE_COLUMNS[node.name.upper()]
            return Compiled(column, kind)
        if isinstance(node, exp.Column):
            raise SqlError(f"{node.sql('snowflake')}{position(node)}: a pipe reads the record "
                           f"through $1, e.g. $1:{node.name} or $1['{node.name}']")
        if isinstance(node, exp.Func):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            raise SqlError(f"unknown or unsupported function {name.upper()}{position(node)} "
                           f"in a pipe; supported: {SUPPORTED_FUNCTIONS}")
        raise SqlError(f"unsupported expression {node.sql('snowflake')!r}{position(node)} in a pipe")

    def handles(self, node: exp.Expression) -> bool:
        return self._handler(node) is not None

    def rewrite(self, tree: exp.Expression) -> exp.Expression:
        """The tree with every expression this compiler knows replaced by its Spark SQL
        (query mode: the rest is left to sqlglot's Spark generator)."""
        def replace(node):
            if self.handles(node) and not isinstance(node, _LEAVES):
                return exp.Var(this=f"({self.compile(node).sql})")
            return node
        return tree.transform(replace)

    def _generic(self, node: exp.Expression) -> str:
        return self.rewrite(node.copy()).sql(dialect=SPARK_DIALECT)

    def _handler(self, node):
        if isinstance(node, (exp.JSONExtract, exp.Bracket, exp.Parameter)):
            return self._access
        if isinstance(node, exp.Cast):  # TryCast is a Cast
            return self._cast
        for kinds, handler in self._table():
            if isinstance(node, kinds):
                return handler
        if isinstance(node, exp.Anonymous):
            name = node.name.upper()
            if name.removeprefix("TRY_") in _TIMESTAMP_FUNCTIONS or name in ("TO_OBJECT", "TO_ARRAY"):
                return self._anonymous
        return None

    def _table(self):
        return (
            ((exp.Literal, exp.Null, exp.Boolean), self._literal),
            ((exp.Paren,), lambda n: self._wrap(self.compile(n.this))),
            ((exp.Alias,), lambda n: self.compile(n.this)),
            ((exp.Concat, exp.DPipe), self._concat),
            (tuple(_STRING_FUNCTIONS), self._string_function),
            ((exp.Trim,), self._trim),
            (tuple(_NUMBER_FUNCTIONS), self._number_function),
            (tuple(_ARITHMETIC), self._arithmetic),
            ((exp.Neg,), lambda n: self._unary("-", n, "double")),
            (tuple(_COMPARISONS), self._comparison),
            ((exp.And, exp.Or), self._logical),
            ((exp.Not,), lambda n: self._unary("NOT ", n, "boolean")),
            ((exp.Is,), self._is),
            ((exp.In,), self._in),
            ((exp.Like, exp.ILike), self._like),
            ((exp.Between,), self._between),
            ((exp.If,), self._iff),
            ((exp.Case,), self._case),
            ((exp.Coalesce,), self._coalesce),
            ((exp.Nullif,), self._nullif),
            ((exp.Nvl2,), self._nvl2),
            ((exp.ToNumber,), self._to_number),
            ((exp.ToDouble,), lambda n: self._to(n, "double")),
            ((exp.ToBoolean,), lambda n: self._to(n, "boolean")),
            ((exp.TsOrDsToDate,), lambda n: self._to(n, "date")),
            ((exp.ToChar,), self._to_char),
            ((exp.ParseJSON,), self._parse_json),
            ((exp.ToVariant,), lambda n: self.convert(self.compile(n.this), "variant", False, "VARIANT")),
            ((exp.JSONFormat,), self._to_json),
            ((exp.ArraySize,), self._array_size),
            ((exp.CurrentTimestamp,), lambda n: Compiled("current_timestamp()", "timestamp")),
            ((exp.CurrentDate,), lambda n: Compiled("current_date()", "date")),
        )

    # ---- values -------------------------------------------------------------------

    def _literal(self, node) -> Compiled:
        if isinstance(node, exp.Null):
            return Compiled("NULL", None)
        if isinstance(node, exp.Boolean):
            return Compiled("TRUE" if node.this else "FALSE", "boolean")
        if node.is_string:
            return Compiled(sql_string(node.this), "string")
        text = node.this
        return Compiled(text, "double" if "e" in text.lower() else "decimal")

    @staticmethod
    def _wrap(c: Compiled) -> Compiled:
        return Compiled(f"({c.sql})", c.type, c.errors)

    def _access(self, node) -> Compiled:
        """$1:a.b, $1['k'], $1:a[0], col:a, col['k'] -> variant_get (pipes) or Spark's
        own `col:path` syntax (queries on a column)."""
        steps: list[str | int] = []
        base = node
        while True:
            if isinstance(base, exp.JSONExtract):
                steps[:0] = self._json_path(base.expression, base)
                base = base.this
            elif isinstance(base, exp.Bracket):
                if len(base.expressions) != 1:
                    raise SqlError(f"{base.sql('snowflake')}{position(base)}: use one key per [...]")
                key = base.expressions[0]
                if isinstance(key, exp.Literal) and key.is_string:
                    steps.insert(0, key.this)
                elif isinstance(key, exp.Literal) and re.fullmatch(r"\d+", key.this):
                    steps.insert(0, int(key.this))
                else:
                    raise SqlError(f"{base.sql('snowflake')}{position(base)}: a [...] key must be a "
                                   f"string literal ('field name') or an array index (0, 1, ...)")
                base = base.this
            else:
                break
        if isinstance(base, exp.Parameter):
            if self.mode is Mode.QUERY:
                raise SqlError(f"$1{position(base)} only has a meaning in a pipe's SELECT "
                               f"(CREATE PIPE ... AS COPY INTO ...); in a query name a column")
            number = int(str(base.this.this))
            if self.positional:  # $n: field n of a delimited record
                if number < 1:
                    raise SqlError(f"${number}{position(base)}: fields are numbered from $1")
                return Compiled(variant_path_sql(PIPE_RECORD_COLUMN, [number - 1] + steps), "variant")
            if number != 1:
                raise SqlError(f"${number}{position(base)}: " + (
                    "a JSON or Parquet file's record is one column, $1" if self.staged else
                    "a streaming pipe has one input column, $1 (the record)"))
            root = PIPE_RECORD_COLUMN
            if steps and steps[0] == METADATA_KEY:
                root, steps = PIPE_METADATA_COLUMN, steps[1:]
            return Compiled(variant_path_sql(root, steps), "variant")
        root = self.compile(base)
        if not steps:
            return root
        if self.mode is Mode.QUERY and isinstance(base, exp.Column) and all(
                isinstance(s, int) or ("'" not in s and "\\" not in s) for s in steps):
            path = "".join(f"[{s}]" if isinstance(s, int) else
                           (("." if i else "") + s if _SIMPLE_KEY.fullmatch(s) else f"['{s}']")
                           for i, s in enumerate(steps))
            return Compiled(f"{root.sql}:{path}", "variant", root.errors)
        source = root.sql if root.type == "variant" else f"CAST({root.sql} AS VARIANT)"
        return Compiled(variant_path_sql(source, steps), "variant", root.errors)

    @staticmethod
    def _json_path(path: exp.Expression, node) -> list[str | int]:
        steps: list[str | int] = []
        for part in path.expressions:
            if isinstance(part, exp.JSONPathRoot):
                continue
            if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
                steps.append(part.this)
            elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
                steps.append(part.this)
            else:
                raise SqlError(f"unsupported path {node.sql('snowflake')}{position(node)}: use keys "
                               f"($1:a.b, $1:a['b c']) and array indexes ($1:a[0])")
        return steps

    # ---- conversions --------------------------------------------------------------

    def convert(self, c: Compiled, target: str, strict: bool, label: str) -> Compiled:
        """`c` as Spark type `target`. Strict in a pipe: a try-conversion plus an error
        for the rows where a non-NULL input gave NULL."""
        if target == "variant":
            if c.type == "variant":
                return c
            return Compiled(f"CAST({c.sql} AS VARIANT)", "variant", c.errors)
        if c.type == target or (target == "string" and c.type in ("variant", None)):
            return Compiled(f"CAST({c.sql} AS {target.upper()})" if c.type != target else c.sql,
                            target, c.errors)
        if self.mode is Mode.QUERY and strict:
            return Compiled(f"CAST({c.sql} AS {target.upper()})", target, c.errors)
        # A VARIANT goes through its text: Spark's variant casts can raise even in
        # try_cast (an integer variant to TIMESTAMP), its string casts do not.
        source = f"CAST({c.sql} AS STRING)" if c.type == "variant" else c.sql
        if target in _TIMESTAMPS and _is_number(c.type):
            value = _epoch_timestamp(c.sql, target)
        elif target in _TIMESTAMPS and c.type in ("variant", "string", None):
            value = (f"coalesce(try_cast({source} AS {target.upper()}), "
                     f"{_epoch_timestamp(f'try_cast({source} AS DECIMAL(38,9))', target)})")
        else:
            value = f"try_cast({source} AS {target.upper()})"
        if not strict:
            return Compiled(value, target, c.errors)
        present = f"{c.sql} IS NOT NULL"
        shown = f"CAST({c.sql} AS STRING)"
        if c.type == "variant":
            present += f" AND NOT is_variant_null({c.sql})"
            shown = f"to_json({c.sql})"
        elif c.type == "string":
            shown = f"concat('\\'', {c.sql}, '\\'')"
        error = (f"CASE WHEN {present} AND {value} IS NULL THEN "
                 f"concat('cannot convert ', {shown}, ' to {label}') END")
        return Compiled(value, target, c.errors + (error,))

    def _cast(self, node: exp.Cast) -> Compiled:
        try:
            target = spark_type(node.to)
        except SqlError as exc:
            raise SqlError(f"{exc}{position(node)}") from None
        strict = not isinstance(node, exp.TryCast)
        return self.convert(self.compile(node.this), target, strict, snowflake_type(target))

    def _to(self, node, target: str) -> Compiled:
        if node.args.get("format"):
            raise SqlError(f"{node.sql('snowflake')}{position(node)}: format arguments are not "
                           f"supported; convert without a format or use CAST")
        return self.convert(self.compile(node.this), target, not node.args.get("safe"),
                            snowflake_type(target))

    def _to_number(self, node) -> Compiled:
        if node.args.get("format"):
            raise SqlError(f"{node.sql('snowflake')}{position(node)}: TO_NUMBER with a format is "
                           f"not supported; give precision and scale: TO_NUMBER(x, 10, 2)")
        precision = node.args.get("precision")
        scale = node.args.get("scale")
        p = int(precision.this) if isinstance(precision, exp.Literal) else 38
        s = int(scale.this) if isinstance(scale, exp.Literal) else 0
        target = f"decimal({p},{s})"
        return self.convert(self.compile(node.this), target, not node.args.get("safe"),
                            snowflake_type(target))

    def _to_char(self, node) -> Compiled:
        if node.args.get("format"):
            raise SqlError(f"{node.sql('snowflake')}{position(node)}: TO_VARCHAR with a format is "
                           f"not supported; use TO_VARCHAR(x)")
        return self.convert(self.compile(node.this), "string", False, "VARCHAR")

    def _anonymous(self, node) -> Compiled:
        name = node.name.upper()
        args = node.expressions
        if len(args) != 1:
            raise SqlError(f"{name}{position(node)} takes one argument here (formats and scales "
                           f"are not supported)")
        arg = self.compile(args[0])
        if name in ("TO_OBJECT", "TO_ARRAY"):
            return self.convert(arg, "variant", False, "VARIANT")
        target = _TIMESTAMP_FUNCTIONS[name.removeprefix("TRY_")]
        return self.convert(arg, target, not name.startswith("TRY_"), snowflake_type(target))

    def _parse_json(self, node) -> Compiled:
        arg = self.convert(self.compile(node.this), "string", False, "VARCHAR")
        if self.mode is Mode.QUERY and not node.args.get("safe"):
            return Compiled(f"parse_json({arg.sql})", "variant", arg.errors)
        value = f"try_parse_json({arg.sql})"
        if node.args.get("safe"):
            return Compiled(value, "variant", arg.errors)
        error = (f"CASE WHEN {arg.sql} IS NOT NULL AND {value} IS NULL THEN "
                 f"concat('PARSE_JSON: not valid JSON: ', left({arg.sql}, 200)) END")
        return Compiled(value, "variant", arg.errors + (error,))

    def _to_json(self, node) -> Compiled:
        arg = self.convert(self.compile(node.this), "variant", False, "VARIANT")
        return Compiled(f"to_json({arg.sql})", "string", arg.errors)

    def _array_size(self, node) -> Compiled:
        arg = self.convert(self.compile(node.this), "variant", False, "VARIANT")
        return Compiled(f"array_size(try_variant_get({arg.sql}, '$', 'array<variant>'))",
                        "int", arg.errors)

    # ---- functions and operators -------------------------------------------------

    def _args(self, node) -> list[exp.Expression]:
        out = []
        for key in node.arg_types:
            value = node.args.get(key)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, exp.Expression):
                    out.append(item)
        return out

    def _as_string(self, node) -> Compiled:
        c = self.compile(node)
        return self.convert(c, "string", False, "VARCHAR") if c.type == "variant" else c

    def _as_number(self, node) -> Compiled:
        c = self.compile(node)
        if c.type in ("variant", "string"):
            return self.convert(c, "double", True, "FLOAT")
        return c

    def _concat(self, node) -> Compiled:
        parts = [self._as_string(a) for a in self._args(node)]
        return Compiled(f"concat({', '.join(p.sql for p in parts)})", "string",
                        sum((p.errors for p in parts), ()))

    def _string_function(self, node) -> Compiled:
        name = _STRING_FUNCTIONS[type(node)]
        args = [self._as_string(node.this)] + [self.compile(a) for a in self._args(node)[1:]]
        if name == "initcap":
            args = args[:1]
        result = "string" if name in _STRING_RESULT else ("int" if name == "length" else "boolean")
        return Compiled(f"{name}({', '.join(a.sql for a in args)})", result,
                        sum((a.errors for a in args), ()))

    def _trim(self, node) -> Compiled:
        this = self._as_string(node.this)
        side = {"LEADING": "LEADING", "TRAILING": "TRAILING"}.get(str(node.args.get("position") or "").upper(), "BOTH")
        chars = node.args.get("expression")
        if chars is None:
            chars_sql, errors = "' '", ()
        else:
            c = self._as_string(chars)
            chars_sql, errors = c.sql, c.errors
        return Compiled(f"trim({side} {chars_sql} FROM {this.sql})", "string", this.errors + errors)

    def _number_function(self, node) -> Compiled:
        name = _NUMBER_FUNCTIONS[type(node)]
        args = [self._as_number(node.this)] + [self.compile(a) for a in self._args(node)[1:]]
        return Compiled(f"{name}({', '.join(a.sql for a in args)})", args[0].type,
                        sum((a.errors for a in args), ()))

    def _arithmetic(self, node) -> Compiled:
        left, right = self._as_number(node.this), self._as_number(node.expression)
        op = _ARITHMETIC[type(node)]
        sql = f"({left.sql} {op} {right.sql})"
        if op in ("/", "%"):  # Snowflake: division by zero fails the row; Spark's ANSI mode the job
            sql = f"try_{'divide' if op == '/' else 'mod'}({left.sql}, {right.sql})"
            error = (f"CASE WHEN {right.sql} = 0 THEN 'division by zero' END"
                     if self.mode is Mode.PIPE else None)
            return Compiled(sql, "double", left.errors + right.errors + ((error,) if error else ()))
        return Compiled(sql, left.type if left.type == right.type else "double",
                        left.errors + right.errors)

    def _unary(self, op: str, node, result: str) -> Compiled:
        c = self._as_number(node.this) if op == "-" else self._boolean(node.this)
        return Compiled(f"({op}{c.sql})", result, c.errors)

    def _boolean(self, node) -> Compiled:
        c = self.compile(node)
        if c.type in ("variant", "string"):
            return self.convert(c, "boolean", True, "BOOLEAN")
        return c

    def _pair(self, left: Compiled, right: Compiled) -> tuple[Compiled, Compiled]:
        """Both sides comparable: a VARIANT side takes the other side's type."""
        if left.type == "variant" and right.type not in ("variant", None):
            left = self.convert(left, right.type if not _is_number(right.type) else "double", True,
                                snowflake_type(right.type))
        elif right.type == "variant" and left.type not in ("variant", None):
            right = self.convert(right, left.type if not _is_number(left.type) else "double", True,
                                 snowflake_type(left.type))
        elif left.type == "variant" and right.type == "variant":
            left = Compiled(f"to_json({left.sql})", "string", left.errors)
            right = Compiled(f"to_json({right.sql})", "string", right.errors)
        return left, right

    def _comparison(self, node) -> Compiled:
        left, right = self._pair(self.compile(node.this), self.compile(node.expression))
        return Compiled(f"({left.sql} {_COMPARISONS[type(node)]} {right.sql})", "boolean",
                        left.errors + right.errors)

    def _logical(self, node) -> Compiled:
        left, right = self._boolean(node.this), self._boolean(node.expression)
        op = "AND" if isinstance(node, exp.And) else "OR"
        return Compiled(f"({left.sql} {op} {right.sql})", "boolean", left.errors + right.errors)

    def _is(self, node) -> Compiled:
        this = self.compile(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return Compiled(f"({this.sql} IS NULL)", "boolean", this.errors)
        other = self.compile(target)
        return Compiled(f"({this.sql} IS {other.sql})", "boolean", this.errors)

    def _in(self, node) -> Compiled:
        if node.args.get("query"):
            return Compiled(self._generic(node), "boolean")
        this = self.compile(node.this)
        items = [self._pair(this, self.compile(e)) for e in node.expressions]
        left = items[0][0] if items else this
        sql = f"({left.sql} IN ({', '.join(r.sql for _, r in items)}))"
        return Compiled(sql, "boolean", left.errors + sum((r.errors for _, r in items), ()))

    def _like(self, node) -> Compiled:
        this, pattern = self._as_string(node.this), self._as_string(node.expression)
        op = "ILIKE" if isinstance(node, exp.ILike) else "LIKE"
        return Compiled(f"({this.sql} {op} {pattern.sql})", "boolean", this.errors + pattern.errors)

    def _between(self, node) -> Compiled:
        this = self.compile(node.this)
        low_this, low = self._pair(this, self.compile(node.args["low"]))
        _, high = self._pair(this, self.compile(node.args["high"]))
        return Compiled(f"({low_this.sql} BETWEEN {low.sql} AND {high.sql})", "boolean",
                        low_this.errors + low.errors + high.errors)

    # ---- conditionals: errors of a branch count only when that branch is taken ----

    def _unify(self, branches: list[Compiled]) -> list[Compiled]:
        """Branches of one type. Mixed with a VARIANT, or (in a pipe) of unrelated types
        such as 'n/a' and a NUMBER, all become VARIANT: Spark would otherwise cast one
        branch to the other's type and, under ANSI mode, fail the whole batch on a bad
        value; as a VARIANT the connector's cast to the column reports a row error."""
        types = {b.type for b in branches if b.type is not None}
        mixed = len(types) > 1 and not all(_is_number(t) for t in types)
        if ("variant" in types and len(types) > 1) or (mixed and self.mode is Mode.PIPE):
            return [b if b.type in ("variant", None) else
                    Compiled(f"CAST({b.sql} AS VARIANT)", "variant", b.errors) for b in branches]
        return branches

    @staticmethod
    def _result_type(branches: list[Compiled]) -> str | None:
        types = {b.type for b in branches if b.type is not None}
        return types.pop() if len(types) == 1 else None

    def _iff(self, node) -> Compiled:
        cond = self._boolean(node.this)
        yes, no = self._unify([self.compile(node.args["true"]),
                               self.compile(node.args["false"]) if node.args.get("false")
                               else Compiled("NULL")])
        errors = cond.errors
        if yes.errors or no.errors:
            errors += (f"CASE WHEN {cond.sql} THEN {yes.error_sql or 'NULL'} "
                       f"ELSE {no.error_sql or 'NULL'} END",)
        return Compiled(f"IF({cond.sql}, {yes.sql}, {no.sql})", self._result_type([yes, no]), errors)

    def _case(self, node) -> Compiled:
        subject = self.compile(node.this) if node.this is not None else None
        conditions, values = [], []
        for branch in node.args.get("ifs") or []:
            if subject is not None:
                left, right = self._pair(subject, self.compile(branch.this))
                conditions.append(Compiled(f"({left.sql} = {right.sql})", "boolean",
                                           left.errors + right.errors))
            else:
                conditions.append(self._boolean(branch.this))
            values.append(self.compile(branch.args["true"]))
        default = self.compile(node.args["default"]) if node.args.get("default") else Compiled("NULL")
        *values, default = self._unify(values + [default])
        whens = " ".join(f"WHEN {c.sql} THEN {v.sql}" for c, v in zip(conditions, values))
        sql = f"CASE {whens} ELSE {default.sql} END"
        errors = sum((c.errors for c in conditions), ())
        if any(v.errors for v in values) or default.errors:
            whens = " ".join(f"WHEN {c.sql} THEN {v.error_sql or 'NULL'}"
                             for c, v in zip(conditions, values))
            errors += (f"CASE {whens} ELSE {default.error_sql or 'NULL'} END",)
        return Compiled(sql, self._result_type(values + [default]), errors)

    def _coalesce(self, node) -> Compiled:
        items = self._unify([self.compile(a) for a in self._args(node)])
        error = None
        for item in reversed(items):  # a later argument is evaluated only when the earlier are NULL
            if error is None:
                error = item.error_sql
            else:
                error = _first([item.error_sql or "", f"CASE WHEN {item.sql} IS NULL THEN {error} END"])
        return Compiled(f"coalesce({', '.join(i.sql for i in items)})", self._result_type(items),
                        (error,) if error else ())

    def _nullif(self, node) -> Compiled:
        left, right = self._pair(self.compile(node.this), self.compile(node.expression))
        return Compiled(f"nullif({left.sql}, {right.sql})", left.type, left.errors + right.errors)

    def _nvl2(self, node) -> Compiled:
        test = self.compile(node.this)
        yes, no = self._unify([self.compile(node.args["true"]),
                               self.compile(node.args["false"]) if node.args.get("false")
                               else Compiled("NULL")])
        return Compiled(f"IF({test.sql} IS NOT NULL, {yes.sql}, {no.sql})", self._result_type([yes, no]),
                        test.errors + yes.errors + no.errors)


def _epoch_timestamp(number_sql: str, target: str) -> str:
    """A number since the epoch as a timestamp. Like Snowflake's TO_TIMESTAMP of an
    integer string, the unit follows the magnitude: seconds below 31536000000, then
    milliseconds, microseconds, nanoseconds. NULL (never an overflow) out of range."""
    n = number_sql
    return (f"CAST(CASE WHEN abs({n}) < 31536000000 THEN timestamp_seconds({n}) "
            f"WHEN abs({n}) < 31536000000000 THEN timestamp_millis(CAST({n} AS BIGINT)) "
            f"WHEN abs({n}) < 31536000000000000 THEN timestamp_micros(CAST({n} AS BIGINT)) "
            f"WHEN abs({n}) < 9000000000000000000000 THEN timestamp_micros(CAST({n} / 1000 AS BIGINT)) "
            f"END AS {target.upper()})")


def variant_path_sql(root: str, steps: list[str | int]) -> str:
    """The VARIANT at `steps` (keys and array indexes) under `root`, NULL when absent.

    Spark's path syntax has no escape inside ['...'], so a key holding both quote
    characters is read through a map of the object's fields instead."""
    sql, path = root, "$"
    for step in steps:
        if isinstance(step, int):
            path += f"[{step}]"
        elif "'" not in step:
            path += "['" + step + "']"
        elif '"' not in step:
            path += '["' + step + '"]'
        else:
            if path != "$":
                sql = f"variant_get({sql}, {sql_string(path)}, 'variant')"
                path = "$"
            sql = f"try_variant_get({sql}, '$', 'map<string,variant>')[{sql_string(step)}]"
    if path == "$":
        return sql
    return f"variant_get({sql}, {sql_string(path)}, 'variant')"
