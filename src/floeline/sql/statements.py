"""A SQL script -> statements -> what each statement asks for.

Scripts are split at `;` by sqlglot's Snowflake tokenizer (so a `;` inside a string or
comment does not split). Each statement is parsed from the script with everything
before it blanked out (newlines kept), so the line/col that sqlglot reports is the
position in the user's file. sqlglot does not know PIPE statements; their head
(`CREATE [OR REPLACE] PIPE name AS COPY INTO table FROM (`) is read from the tokens
here and only the SELECT inside is given to sqlglot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from floeline.errors import SqlError
from floeline.secrets import mask_assignments

READ = "snowflake"

@dataclass(frozen=True)
class Name:
    """An object name as written: its parts (1 to 3) and which were double-quoted."""

    parts: tuple[str, ...]
    quoted: tuple[bool, ...]

    @property
    def normalized(self) -> tuple[str, ...]:
        """Snowflake's stored form: unquoted parts uppercased, quoted kept."""
        return tuple(p if q else p.upper() for p, q in zip(self.parts, self.quoted))

    def qualified(self, database: str, schema: str) -> "Name":
        """DB.SCHEMA.NAME, missing leading parts taken from the defaults (as quoted,
        so that they are used exactly)."""
        missing = 3 - len(self.parts)
        defaults = (database, schema)[:missing] if missing else ()
        return Name(tuple(defaults) + self.parts, (True,) * missing + self.quoted)

    def __str__(self) -> str:
        return ".".join(f'"{p}"' if q else p for p, q in zip(self.parts, self.quoted))


@dataclass(frozen=True)
class Statement:
    text: str  # the statement as written
    script: str  # the script with every other statement blanked: positions stay true
    line: int  # first line of the statement in the script

    def parse(self) -> exp.Expression:
        try:
            trees = sqlglot.parse(self.script, read=READ)
        except sqlglot.errors.ParseError as exc:
            raise self.error(_parse_problem(exc)) from None
        trees = [t for t in trees if t is not None]
        if len(trees) != 1:
            raise self.error("expected one statement")
        return trees[0]

    def position_of(self, fragment: str) -> tuple[int, int] | None:
        """(line, column) in the script where `fragment` first appears in this statement,
        compared case-insensitively and ignoring spaces around ':' (None: not found)."""
        words = [re.escape(part) for part in re.split(r"\s*:\s*", fragment.strip())]
        found = re.search(r"\s*:\s*".join(words), self.script, re.IGNORECASE)
        if found is None:
            return None
        before = self.script[:found.start()]
        return before.count("\n") + 1, found.start() - (before.rfind("\n") + 1) + 1

    def error(self, problem: str) -> SqlError:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        first = mask_assignments(first)  # CREDENTIALS=(AWS_SECRET_KEY='...') never shown
        shown = first if len(first) <= 100 else first[:97] + "..."
        return SqlError(f"statement at line {self.line} ({shown}): {problem}")


def _parse_problem(exc: sqlglot.errors.ParseError) -> str:
    if exc.errors:
        e = exc.errors[0]
        near = (e.get("highlight") or "").strip()
        description = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>", r"'\1'",
                             str(e.get("description")))
        return (f"syntax error at line {e.get('line')}, col {e.get('col')}"
                + (f" near {near!r}" if near else "") + f": {description}")
    return f"syntax error: {exc}"


def _blank(text: str) -> str:
    return "".join(c if c == "\n" else " " for c in text)


def split_script(script: str) -> list[Statement]:
    """The script's statements, in order (empty ones skipped)."""
    try:
        tokens = Dialect.get_or_raise(READ).tokenize(script)
    except sqlglot.errors.TokenError as exc:
        raise SqlError(f"cannot read the SQL: {exc} (an unclosed quote or comment?)") from None
    bounds, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            bounds.append((start, token.start))
            start = token.end + 1
    bounds.append((start, len(script)))
    statements = []
    for begin, end in bounds:
        body = script[begin:end]
        if not [t for t in tokens if begin <= t.start < end and t.token_type != TokenType.SEMICOLON]:
            continue
        # The statement starts at its first token: a comment before it is not its text.
        lead = min(t.start for t in tokens if begin <= t.start < end) - begin
        statements.append(Statement(
            text=body[lead:].strip(), script=_blank(script[:begin + lead]) + body[lead:],
            line=script.count("\n", 0, begin + lead) + 1))
    return statements


# ---- what a statement asks for -----------------------------------------------------


@dataclass(frozen=True)
class CreatePipe:
    name: Name
    table: Name
    select: exp.Select | None  # a streaming pipe's SELECT
    replace: bool
    if_not_exists: bool
    copy: exp.Copy | None = None  # a pipe that loads staged files: its COPY INTO
    auto_ingest: bool = False


@dataclass(frozen=True)
class PipeCommand:
    """SHOW PIPES, DESCRIBE PIPE name, DROP PIPE [IF EXISTS] name."""

    action: str  # "show" | "describe" | "drop" | "refresh" (ALTER PIPE p REFRESH)
    name: Name | None = None
    if_exists: bool = False


@dataclass(frozen=True)
class Optimize:
    """OPTIMIZE table: Delta's compaction of the table's small files; VACUUM table
    [RETAIN n HOURS] (`vacuum`): deleting the files no version kept for time travel
    needs any more."""

    table: Name
    vacuum: bool = False
    retain_hours: float | None = None


@dataclass(frozen=True)
class Parsed:
    statement: Statement
    tree: exp.Expression | None = None  # every statement but the PIPE ones and OPTIMIZE
    pipe: CreatePipe | PipeCommand | None = field(default=None)
    optimize: Optimize | None = None


class _Cursor:
    """Reads a statement's tokens left to right."""

    def __init__(self, statement: Statement):
        self.statement = statement
        self.tokens = Dialect.get_or_raise(READ).tokenize(statement.script)
        self.i = 0

    def peek(self, offset: int = 0):
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, offset: int = 0) -> str:
        token = self.peek(offset)
        return token.text.upper() if token is not None and token.token_type != TokenType.IDENTIFIER else ""

    def accept(self, *words: str) -> bool:
        if all(self.word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            token = self.peek()
            where = f"line {token.line}, col {token.col}" if token else "the end"
            raise self.statement.error(f"expected {' '.join(words)} at {where}")

    def name(self) -> Name:
        parts, quoted = [], []
        while True:
            token = self.peek()
            if token is None or token.token_type in (TokenType.L_PAREN, TokenType.R_PAREN,
                                                     TokenType.DOT, TokenType.STRING):
                raise self.statement.error(f"expected a name at "
                                           f"{f'line {token.line}, col {token.col}' if token else 'the end'}")
            parts.append(token.text)
            quoted.append(token.token_type == TokenType.IDENTIFIER)
            self.i += 1
            if not (self.peek() and self.peek().token_type == TokenType.DOT):
                break
            self.i += 1
        if len(parts) > 3:
            raise self.statement.error(f"name {'.'.join(parts)} has more than 3 parts (DB.SCHEMA.NAME)")
        return Name(tuple(parts), tuple(quoted))


def parse_statement(statement: Statement) -> Parsed:
    """The statement, parsed: PIPE statements by hand, all others by sqlglot."""
    cursor = _Cursor(statement)
    first = cursor.word()
    if first == "CREATE":
        cursor.accept("CREATE")
        replace = cursor.accept("OR", "REPLACE")
        if cursor.accept("PIPE"):
            return Parsed(statement, pipe=_create_pipe(cursor, replace))
    elif first == "ALTER" and cursor.word(1) == "PIPE":
        cursor.i += 2
        name = cursor.name()
        if not cursor.accept("REFRESH"):
            raise statement.error("ALTER PIPE supports REFRESH only (ALTER PIPE name REFRESH)")
        _expect_end(cursor)
        return Parsed(statement, pipe=PipeCommand("refresh", name))
    elif first in ("SHOW", "DESC", "DESCRIBE", "DROP") and cursor.word(1) in ("PIPE", "PIPES"):
        cursor.i += 2
        if first == "SHOW":
            if cursor.word(-1) != "PIPES":
                raise statement.error("write SHOW PIPES")
            _expect_end(cursor)
            return Parsed(statement, pipe=PipeCommand("show"))
        if_exists = first == "DROP" and cursor.accept("IF", "EXISTS")
        name = cursor.name()
        _expect_end(cursor)
        return Parsed(statement, pipe=PipeCommand("drop" if first == "DROP" else "describe", name, if_exists))
    elif first in ("OPTIMIZE", "VACUUM"):
        # The tokenizer may take all after the first word as one string: read from it.
        end = cursor.peek().end + 1
        rest = _Cursor(Statement(statement.text, _blank(statement.script[:end]) + statement.script[end:],
                                 statement.line))
        table = rest.name()
        retain = None
        if first == "VACUUM" and rest.accept("RETAIN"):
            token = rest.peek()
            if token is None or token.token_type != TokenType.NUMBER:
                raise statement.error("write VACUUM table [RETAIN <hours> HOURS]")
            retain = float(token.text)
            rest.i += 1
            rest.expect("HOURS")
        _expect_end(rest)
        return Parsed(statement, optimize=Optimize(table, first == "VACUUM", retain))
    return Parsed(statement, tree=statement.parse())


def _expect_end(cursor: _Cursor) -> None:
    token = cursor.peek()
    if token is not None:
        raise cursor.statement.error(f"unexpected {token.text!r} at line {token.line}, col {token.col}")


def _create_pipe(cursor: _Cursor, replace: bool) -> CreatePipe:
    statement = cursor.statement
    if_not_exists = cursor.accept("IF", "NOT", "EXISTS")
    if replace and if_not_exists:
        raise statement.error("OR REPLACE and IF NOT EXISTS cannot be used together")
    name = cursor.name()
    auto_ingest = False
    while cursor.peek() is not None and not (cursor.word() == "AS" and cursor.word(1) == "COPY"):
        # Pipe options: AUTO_INGEST matters for a pipe of staged files; the rest
        # (COMMENT, ERROR_INTEGRATION, ...) mean nothing here.
        if cursor.word() == "AUTO_INGEST" and cursor.word(1) == "=":
            auto_ingest = cursor.word(2) == "TRUE"
        cursor.i += 1
    if not (cursor.word() == "AS" and cursor.word(1) == "COPY" and cursor.word(2) == "INTO"):
        cursor.expect("AS", "COPY", "INTO")  # raises, naming what was expected
    cursor.i += 1
    copy_start = cursor.peek().start
    if any(t.token_type == TokenType.PARAMETER and t.text == "@" for t in cursor.tokens[cursor.i:]):
        # COPY INTO t FROM @stage ...: a pipe that loads staged files.
        body = _blank(statement.script[:copy_start]) + statement.script[copy_start:]
        try:
            copy = sqlglot.parse_one(body, read=READ)
        except sqlglot.errors.ParseError as exc:
            raise statement.error(_parse_problem(exc)) from None
        if not isinstance(copy, exp.Copy):
            raise statement.error("expected COPY INTO table FROM @stage after AS")
        cursor.expect("COPY", "INTO")
        return CreatePipe(name, cursor.name(), None, replace, if_not_exists, copy, auto_ingest)
    cursor.expect("COPY", "INTO")
    table = cursor.name()
    cursor.expect("FROM")
    token = cursor.peek()
    if token is None:
        raise statement.error("expected (SELECT ... FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))) after FROM")
    body = _blank(statement.script[:token.start]) + statement.script[token.start:]
    try:
        tree = sqlglot.parse_one(body, read=READ)
    except sqlglot.errors.ParseError as exc:
        raise statement.error(_parse_problem(exc)) from None
    select = tree.unnest() if isinstance(tree, exp.Subquery) else tree
    if not isinstance(select, exp.Select):
        raise statement.error("COPY INTO ... FROM needs (SELECT ... FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))")
    return CreatePipe(name, table, select, replace, if_not_exists)


def table_name(table: exp.Table) -> Name:
    """The Name of a sqlglot table reference."""
    ids = [table.args.get(k) for k in ("catalog", "db", "this") if table.args.get(k) is not None]
    return Name(tuple(i.name for i in ids), tuple(bool(i.args.get("quoted")) for i in ids))


def identifier(node: exp.Expression) -> str:
    """A column name as Snowflake stores it (unquoted -> uppercase)."""
    ident = node if isinstance(node, exp.Identifier) else node.this
    return ident.name if ident.args.get("quoted") else ident.name.upper()


def select_item_texts(statement: Statement) -> list[str]:
    """The items of the statement's first SELECT list as the user wrote them (for
    error messages: sqlglot would print `$1:a::NUMBER` as CAST(GET_PATH(...)))."""
    tokens = Dialect.get_or_raise(READ).tokenize(statement.script)
    items, depth, start, last = [], 0, None, None
    inside = False
    for token in tokens:
        if not inside:
            inside = token.token_type == TokenType.SELECT
            continue
        if depth == 0 and token.token_type in (TokenType.FROM, TokenType.R_PAREN):
            break
        if depth == 0 and token.token_type == TokenType.COMMA:
            items.append(statement.script[start:last + 1] if start is not None else "")
            start = None
            continue
        depth += token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET)
        depth -= token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET)
        start = token.start if start is None else start
        last = token.end
    if start is not None:
        items.append(statement.script[start:last + 1])
    return items
