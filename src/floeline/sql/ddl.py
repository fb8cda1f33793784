"""DDL: CREATE/DROP/ALTER/SHOW/DESCRIBE for tables, pipes and interactive tables
(stages and file formats: sql/stage_ddl.py).

Names follow Snowflake: unquoted -> uppercase, quoted kept as written; an unqualified
name is in FLOELINE.PUBLIC (floeline's default database and schema); an existing
table is found as queries find it (an unquoted part also matches case-insensitively).

Every statement is checked completely (types, names, the pipe's SELECT, column
counts) before anything is written, so a failing statement leaves nothing behind.
Each statement's result is a small DataFrame (a `status` row, or the listing)."""

from __future__ import annotations


from sqlglot import exp

from floeline.errors import FloelineError, SqlError, TableError
from floeline.naming import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.records.snowflake_sql.types import declared_type, snowflake_type, spark_type
from floeline.sql.copy_statement import parse_copy, transformation
from floeline.sql.statements import (CreatePipe, Name, Parsed, PipeCommand, identifier,
                                     select_item_texts, table_name)
from floeline.warehouse.pipe_select import compile_select
from floeline.warehouse import clustering, pipes, tables
from floeline.warehouse.catalog import TableRef, Warehouse
from floeline.records.columns import Column

_DEFAULT_PIPE_TEXT = "default pipe: first-level keys -> columns by name (case-insensitive)"


def is_ddl(parsed: Parsed) -> bool:
    tree = parsed.tree
    return parsed.pipe is not None or isinstance(tree, (exp.Create, exp.Drop, exp.Alter, exp.Show)) or (
        isinstance(tree, exp.Describe) and isinstance(tree.this, exp.Table))


def _identity(name: str, constraint) -> tuple[int, int]:
    """(start, step) of AUTOINCREMENT / IDENTITY [(start, step) | START s INCREMENT i];
    Snowflake's default is (1, 1). ORDER / NOORDER are accepted: Delta's identity values
    are unique and grow with each write, with gaps, as NOORDER's are."""
    values = []
    for arg, default in (("start", 1), ("increment", 1)):
        literal = constraint.args.get(arg)
        try:
            values.append(default if literal is None else int(literal.sql("snowflake")))
        except ValueError:
            raise SqlError(f"column {name}: AUTOINCREMENT {arg} must be an integer, not "
                           f"{literal.sql('snowflake')}") from None
    if values[1] == 0:
        raise SqlError(f"column {name}: AUTOINCREMENT increment cannot be 0")
    return values[0], values[1]


class Ddl:
    """Runs DDL statements against one warehouse."""

    def __init__(self, spark, warehouse: Warehouse):
        self.spark, self.warehouse = spark, warehouse

    def execute(self, parsed: Parsed):
        statement = parsed.statement
        try:
            if parsed.pipe is not None:
                if isinstance(parsed.pipe, CreatePipe):
                    return self.create_pipe(parsed.pipe, parsed)
                return getattr(self, f"{parsed.pipe.action}_pipe")(parsed.pipe)
            tree = parsed.tree
            if isinstance(tree, exp.Create) and str(tree.args.get("kind")).upper() == "TABLE":
                return self.create_table(tree, parsed)
            if isinstance(tree, exp.Drop) and str(tree.args.get("kind")).upper() == "TABLE":
                return self.drop_table(tree)
            if isinstance(tree, exp.Alter) and str(tree.args.get("kind")).upper() == "TABLE":
                return self.alter_table(tree)
            if isinstance(tree, exp.Show) and str(tree.this).upper() == "TABLES":
                return self.show_tables()
            if isinstance(tree, exp.Describe):
                return self.describe_table(tree)
        except SqlError as exc:
            message = str(exc)
            if message.startswith("statement at line"):
                raise
            raise statement.error(message) from None
        except FloelineError as exc:
            raise statement.error(str(exc)) from None
        raise statement.error("unsupported statement; floeline runs SELECT queries, COPY INTO, "
                              "LIST @stage and CREATE/DROP/ALTER/SHOW/DESCRIBE for TABLE, PIPE, "
                              "INTERACTIVE TABLE, STAGE and FILE FORMAT")

    # ---- names ------------------------------------------------------------------

    def new_ref(self, name: Name) -> TableRef:
        database, schema, table = name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        return self.warehouse.table(database, schema, table)

    def find(self, name: Name) -> TableRef | None:
        """The existing table `name` names, or None (ambiguity is an error)."""
        full = name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA)
        missing = 3 - len(name.parts)
        # Defaults are matched case-insensitively like an unquoted name.
        quoted = [False] * missing + list(name.quoted)
        try:
            return self.warehouse.resolve(list(full.parts), quoted)
        except TableError as exc:
            if "not found" in str(exc):
                return None
            raise

    def need(self, name: Name) -> TableRef:
        ref = self.find(name)
        if ref is None:
            raise SqlError(f"table {name} does not exist (tables: "
                           f"{', '.join(t.full_name for t in self.warehouse.list_tables()) or 'none'})")
        return ref

    def status(self, message: str):
        return self.spark.createDataFrame([(message,)], "status string")

    def interactive(self, ref: TableRef) -> pipes.Pipe | None:
        return pipes.load(self.warehouse, ref.database, ref.schema, "interactive", ref.name)

    # ---- tables -----------------------------------------------------------------

    def columns(self, schema: exp.Schema) -> list[Column]:
        out, seen = [], set()
        for definition in schema.expressions:
            if not isinstance(definition, exp.ColumnDef):
                raise SqlError(f"unsupported table element {definition.sql('snowflake')!r}: "
                               f"only column definitions (name TYPE [NOT NULL] [DEFAULT expr | "
                               f"AUTOINCREMENT])")
            out.append(self.column(definition))
            if out[-1].name in seen:
                raise SqlError(f"column {out[-1].name} is defined twice")
            seen.add(out[-1].name)
        return out

    @staticmethod
    def column(definition: exp.ColumnDef) -> Column:
        name = identifier(definition.this)
        if definition.args.get("kind") is None:
            raise SqlError(f"column {name} has no type")
        try:
            kind = spark_type(definition.args["kind"])
            declared = declared_type(definition.args["kind"])
        except SqlError as exc:
            raise SqlError(f"column {name}: {exc}") from None
        nullable, default, identity = True, None, None
        for constraint in definition.args.get("constraints") or []:
            if isinstance(constraint.kind, exp.NotNullColumnConstraint):
                nullable = bool(constraint.kind.args.get("allow_null"))
            elif isinstance(constraint.kind, exp.CommentColumnConstraint):
                continue
            elif isinstance(constraint.kind, exp.DefaultColumnConstraint):
                # Snowflake's expression in Spark SQL (Delta checks it when the table is made)
                default = constraint.kind.this.sql(dialect="spark")
            elif isinstance(constraint.kind, (exp.AutoIncrementColumnConstraint,
                                              exp.GeneratedAsIdentityColumnConstraint)):
                identity = _identity(name, constraint.kind)
            else:
                raise SqlError(f"column {name}: constraint {constraint.sql('snowflake')!r} is not "
                               f"supported (NOT NULL, DEFAULT, AUTOINCREMENT / IDENTITY, COMMENT)")
        if identity is not None:
            if default is not None:
                raise SqlError(f"column {name} cannot have both DEFAULT and AUTOINCREMENT")
            if not kind.startswith("decimal(") or not kind.endswith(",0)"):
                raise SqlError(f"column {name}: AUTOINCREMENT / IDENTITY needs an integer type "
                               f"(NUMBER, INT, ...), not {snowflake_type(kind)}")
            kind = "bigint"  # Delta's identity columns are LONG
        return Column(name, kind, nullable, default, identity, declared)

    @staticmethod
    def evolution(properties: exp.Properties | None) -> tuple[bool | None, bool]:
        """(ENABLE_SCHEMA_EVOLUTION or None, whether the table is INTERACTIVE)."""
        evolution, interactive = None, False
        for prop in (properties.expressions if properties else []):
            if isinstance(prop, exp.InteractiveProperty):
                interactive = True
            elif isinstance(prop, exp.Property) and prop.name.upper() == "ENABLE_SCHEMA_EVOLUTION":
                value = prop.args.get("value")
                text = value.sql("snowflake").upper() if value is not None else ""
                if text not in ("TRUE", "FALSE"):
                    raise SqlError(f"ENABLE_SCHEMA_EVOLUTION must be TRUE or FALSE, not {text}")
                evolution = text == "TRUE"
            elif isinstance(prop, (exp.SchemaCommentProperty, exp.ClusterProperty)):
                continue  # (CLUSTER BY: cluster_by)
            else:
                raise SqlError(f"table option {prop.sql('snowflake')!r} is not supported "
                               f"(ENABLE_SCHEMA_EVOLUTION = TRUE|FALSE, CLUSTER BY (col, ...), COMMENT)")
        return evolution, interactive

    @staticmethod
    def cluster_by(properties, columns: list[Column]) -> tuple[str, ...]:
        """CLUSTER BY's columns (empty without it), checked against the table's `columns`
        (`properties`: the statement's, or ALTER TABLE's ClusterProperty)."""
        found = ([properties] if isinstance(properties, exp.ClusterProperty) else
                 [p for p in (properties.expressions if properties else [])
                  if isinstance(p, exp.ClusterProperty)])
        if not found:
            return ()
        names = []
        for expression in found[0].expressions:
            if not isinstance(expression, exp.Column) or expression.table:
                raise SqlError(f"CLUSTER BY {expression.sql('snowflake')}: floeline clusters by "
                               f"columns only (Delta liquid clustering), not expressions; add a "
                               f"column holding the value and cluster by it")
            names.append(identifier(expression.this))
        by_key = {}
        for column in columns:  # an unquoted name matches any case, as queries find columns
            by_key.setdefault(column.name.upper(), column.name)
        resolved = [n if any(c.name == n for c in columns) else by_key.get(n.upper(), n) for n in names]
        return clustering.check_columns(resolved, columns)

    def create_table(self, tree: exp.Create, parsed: Parsed):
        schema = tree.this
        if not isinstance(schema, exp.Schema):
            raise SqlError("CREATE TABLE needs a column list: CREATE TABLE NAME (col TYPE, ...)")
        name = table_name(schema.this)
        replace, if_not_exists = bool(tree.args.get("replace")), bool(tree.args.get("exists"))
        if replace and if_not_exists:
            raise SqlError("OR REPLACE and IF NOT EXISTS cannot be used together")
        columns = self.columns(schema)
        evolution, interactive = self.evolution(tree.args.get("properties"))
        cluster_by = self.cluster_by(tree.args.get("properties"), columns)
        transformation = None
        if interactive:
            select = tree.expression
            select = select.unnest() if isinstance(select, exp.Subquery) else select
            if not isinstance(select, exp.Select):
                raise SqlError("CREATE INTERACTIVE TABLE needs AS (SELECT ... FROM "
                               "TABLE(DATA_SOURCE(TYPE => 'STREAMING')))")
            transformation = compile_select(select, [c.name for c in columns],
                                            select_item_texts(parsed.statement))
        elif tree.expression is not None:
            raise SqlError("CREATE TABLE ... AS SELECT is not supported; create the table with a "
                           "column list (or CREATE INTERACTIVE TABLE ... AS for a streaming transformation)")
        ref = self.new_ref(name)
        exists = self.warehouse.is_table(ref)
        if exists and if_not_exists:
            return self.status(f"{ref.name} already exists, statement succeeded.")
        if exists and not replace:
            raise SqlError(f"table {ref.full_name} already exists; use CREATE OR REPLACE TABLE "
                           f"or CREATE TABLE IF NOT EXISTS")
        if exists:
            self.drop(ref)
        # Snowflake's rule: tables created by hand have schema evolution off unless asked.
        tables.create_table(self.spark, ref, columns, evolution=bool(evolution) and not interactive,
                            cluster_by=cluster_by)
        if transformation is not None:
            try:
                pipes.save(self.warehouse, pipes.Pipe(
                    name=ref.name, table=ref.name, kind="interactive", sql=parsed.statement.text,
                    columns=transformation, database=ref.database, schema=ref.schema),
                    ref.database, ref.schema)
            except OSError as exc:
                tables.drop_table(self.warehouse, ref)  # nothing half-created
                raise SqlError(f"cannot store the transformation of {ref.full_name}: {exc}") from exc
        kind = "Interactive table" if interactive else "Table"
        return self.status(f"{kind} {ref.name} successfully created.")

    def drop(self, ref: TableRef) -> None:
        tables.drop_table(self.warehouse, ref)
        pipes.delete(self.warehouse, ref.database, ref.schema, "interactive", ref.name)

    def drop_table(self, tree: exp.Drop):
        for table in tree.args.get("tables") or ([tree.this] if tree.this else []):
            ref = self.find(table_name(table))
            if ref is None:
                if tree.args.get("exists"):
                    return self.status("Drop statement executed successfully (table already dropped).")
                self.need(table_name(table))
            self.drop(ref)
            return self.status(f"{ref.name} successfully dropped.")
        raise SqlError("DROP TABLE needs a table name")

    def alter_table(self, tree: exp.Alter):
        ref = self.find(table_name(tree.this))
        if ref is None:
            if tree.args.get("exists"):
                return self.status("Statement executed successfully (table does not exist).")
            self.need(table_name(tree.this))
        actions = tree.args.get("actions") or []
        if actions and all(isinstance(a, exp.ColumnDef) for a in actions):
            return self.add_columns(ref, actions)
        if len(actions) == 1 and isinstance(actions[0], exp.ClusterProperty):
            columns = tables.read_schema(self.spark, ref).columns
            clustering.set_cluster_by(self.spark, ref, self.cluster_by(actions[0], list(columns)))
            return self.status("Statement executed successfully.")
        if len(actions) == 1 and isinstance(actions[0], exp.Command) and " ".join(
                f"{actions[0].this} {actions[0].expression}".upper().split()) == "DROP CLUSTERING KEY":
            clustering.set_cluster_by(self.spark, ref, ())
            return self.status("Statement executed successfully.")
        if len(actions) == 1 and isinstance(actions[0], exp.AlterSet):
            props = [p for e in actions[0].expressions
                     for p in (e.expressions if isinstance(e, exp.Properties) else [e])]
            evolution, interactive = self.evolution(exp.Properties(expressions=props))
            if evolution is None or interactive:
                raise SqlError("ALTER TABLE ... SET supports ENABLE_SCHEMA_EVOLUTION = TRUE|FALSE")
            tables.set_evolution(self.spark, ref, evolution)
            return self.status("Statement executed successfully.")
        raise SqlError("ALTER TABLE supports ADD [COLUMN] [IF NOT EXISTS] name TYPE, ..., "
                       "SET ENABLE_SCHEMA_EVOLUTION = TRUE|FALSE, CLUSTER BY (col, ...) and "
                       "DROP CLUSTERING KEY")

    def add_columns(self, ref: TableRef, definitions: list[exp.ColumnDef]):
        current = tables.read_schema(self.spark, ref)
        existing = {c.name for c in current.columns}
        new, names = [], set()
        for definition in definitions:
            column = self.column(definition)
            if column.name in existing or column.name in names:
                if definition.args.get("exists"):
                    continue
                raise SqlError(f"column {column.name} already exists in {ref.full_name}; "
                               f"write ADD COLUMN IF NOT EXISTS to skip it")
            if not column.nullable:
                raise SqlError(f"column {column.name}: a column added to an existing table cannot be "
                               f"NOT NULL (its existing rows have no value)")
            if column.default is not None or column.identity is not None:
                raise SqlError(f"column {column.name}: a column added to an existing table cannot "
                               f"have DEFAULT or AUTOINCREMENT (Delta would not fill its existing "
                               f"rows); create the table with it (CREATE OR REPLACE TABLE)")
            new.append(column)
            names.add(column.name)
        if new:
            tables.add_columns(self.spark, ref, new)
        return self.status("Statement executed successfully.")

    def show_tables(self):
        rows = []
        for ref in self.warehouse.list_tables():
            schema = tables.read_schema(self.spark, ref)
            keys = clustering.read_cluster_by(self.spark, ref) if schema else ()
            rows.append((ref.name, ref.database, ref.schema,
                         "INTERACTIVE" if self.interactive(ref) else "TABLE",
                         len(schema.columns) if schema else 0,
                         "Y" if schema and schema.evolution else "N",
                         f"LINEAR({', '.join(keys)})" if keys else ""))
        return self.spark.createDataFrame(rows, "name string, database_name string, schema_name string, "
                                                "kind string, columns int, enable_schema_evolution string, "
                                                "cluster_by string")

    def describe_table(self, tree: exp.Describe):
        ref = self.need(table_name(tree.this))
        schema = tables.read_schema(self.spark, ref)
        rows = [(c.name, snowflake_type(c.type, c.declared), "COLUMN", "Y" if c.nullable else "N",
                 c.default)
                for c in schema.columns]
        return self.spark.createDataFrame(
            rows, "name string, type string, kind string, `null?` string, default string")

    # ---- pipes ------------------------------------------------------------------

    def create_pipe(self, create: CreatePipe, parsed: Parsed):
        database, schema, name = create.name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        if create.copy is not None:
            return self.create_stage_pipe(create, parsed, database, schema, name)
        table_parts = create.table
        if len(table_parts.parts) < 3:  # an unqualified target is in the pipe's schema
            table_parts = table_parts.qualified(*(database, schema))
        ref = self.find(table_parts)
        if ref is None:
            raise SqlError(f"COPY INTO {create.table}: table {'.'.join(table_parts.normalized)} does not "
                           f"exist; create it first (CREATE TABLE)")
        if self.interactive(ref) is not None:
            raise SqlError(f"{ref.full_name} is an interactive table: its transformation belongs to the "
                           f"table (CREATE OR REPLACE INTERACTIVE TABLE to change it), not to a pipe")
        existing = pipes.load(self.warehouse, database, schema, "pipe", name)
        if existing is not None and create.if_not_exists:
            return self.status(f"{name} already exists, statement succeeded.")
        if existing is not None and not create.replace:
            raise SqlError(f"pipe {database}.{schema}.{name} already exists; use CREATE OR REPLACE PIPE")
        table_schema = tables.read_schema(self.spark, ref)
        columns = compile_select(create.select, [c.name for c in table_schema.columns],
                                 select_item_texts(parsed.statement))
        pipes.save(self.warehouse, pipes.Pipe(
            name=name, table=ref.name, kind="pipe", sql=parsed.statement.text, columns=columns,
            database=ref.database, schema=ref.schema), database, schema)
        used = (ref.database, ref.schema, ref.name) == (database, schema, name)
        note = "" if used else (f" (the connector uses a pipe only when it is named like its table: "
                                f"this one is not used for {ref.name})")
        return self.status(f"Pipe {name} successfully created.{note}")

    def create_stage_pipe(self, create: CreatePipe, parsed: Parsed, database: str, schema: str, name: str):
        """A pipe that loads staged files: its COPY is checked (table, stage, file format,
        transformation) and stored; `floeline pipes run` runs it when AUTO_INGEST=TRUE."""
        from floeline.sources import s3_notifications
        from floeline.warehouse import stage_store, stages

        copy = parse_copy(create.copy)
        table = copy.table if len(copy.table.parts) == 3 else copy.table.qualified(database, schema)
        ref = self.need(table)
        stage_db, stage_schema, stage_name = copy.stage.name.qualified(database, schema).normalized
        stage = stages.load_stage(self.warehouse, stage_db, stage_schema, stage_name)
        if stage is None:
            raise SqlError(f"stage {stage_db}.{stage_schema}.{stage_name} does not exist (CREATE STAGE)")
        fmt = stages.resolve_format(self.warehouse, stage, copy.file_format, stage_db, stage_schema)
        compiled = transformation(copy, tables.read_schema(self.spark, ref), fmt, parsed.statement)
        if copy.force or copy.files is not None:
            raise SqlError("a pipe loads each new file once: FORCE and FILES are not allowed in its COPY")
        existing = pipes.load(self.warehouse, database, schema, "pipe", name)
        if existing is not None and create.if_not_exists:
            return self.status(f"{name} already exists, statement succeeded.")
        if existing is not None and not create.replace:
            raise SqlError(f"pipe {database}.{schema}.{name} already exists; use CREATE OR REPLACE PIPE")
        on_error = copy.on_error or "SKIP_FILE"  # Snowpipe's default
        if on_error == "ABORT_STATEMENT":
            raise SqlError("a pipe loads files one by one: use ON_ERROR=SKIP_FILE (the default) or "
                           "CONTINUE; ABORT_STATEMENT is for COPY INTO")
        settings = {"stage": [stage.database, stage.schema, stage.name], "path": copy.stage.path,
                    "pattern": copy.pattern,
                    "file_format": copy.file_format, "on_error": on_error,
                    "match_by_column_name": compiled is None, "auto_ingest": create.auto_ingest,
                    "refreshed_ms": 0, "notification_channel": None}
        if create.auto_ingest and stage_store.is_s3(stage):
            # As Snowpipe: the pipe's own queue, for the bucket's ObjectCreated events.
            settings["notification_channel"] = s3_notifications.ensure_queue(
                s3_notifications.queue_name(database, schema, name), stage_store.region(),
                stage.resolved_credentials(), stage.endpoint)
        pipes.save(self.warehouse, pipes.Pipe(
            name=name, table=ref.name, kind="pipe", sql=parsed.statement.text,
            columns=compiled.columns if compiled is not None else (), database=ref.database,
            schema=ref.schema, copy=settings), database, schema)
        return self.status(f"Pipe {name} successfully created.")

    def refresh_pipe(self, command: PipeCommand):
        """ALTER PIPE p REFRESH: the pipe service tries the stage's files again, failed
        ones included (loaded ones stay loaded: the table's load history says so)."""
        import time

        database, schema, name = command.name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        pipe = pipes.load(self.warehouse, database, schema, "pipe", name)
        if pipe is None or not pipe.loads_files:
            raise SqlError(f"pipe {database}.{schema}.{name} does not exist or does not load staged "
                           f"files (SHOW PIPES lists them)")
        from dataclasses import replace

        settings = {**pipe.copy, "refreshed_ms": int(time.time() * 1000)}
        pipes.save(self.warehouse, replace(pipe, copy=settings), database, schema)
        return self.status(f"Pipe {name} refreshed: its stage's files are queued again.")

    def _pipe_rows(self):
        rows = []
        stored = pipes.list_stored(self.warehouse)
        for database, schema, pipe in stored:
            used = not pipe.loads_files and (pipe.database, pipe.schema, pipe.table) == (
                database, schema, pipe.name)
            kind = ("AUTO_INGEST" if pipe.copy.get("auto_ingest") else "STAGE") if pipe.loads_files else "USER"
            rows.append((pipe.name, database, schema, f"{pipe.database}.{pipe.schema}.{pipe.table}",
                         kind, "Y" if used else "N", pipe.sql, (pipe.copy or {}).get("notification_channel")))
        user_tables = {(r[1], r[2], r[0]) for r in rows if r[5] == "Y"}
        for ref in self.warehouse.list_tables():
            if self.interactive(ref) is not None:
                continue
            used = (ref.database, ref.schema, ref.name) not in user_tables
            rows.append((pipes.default_pipe_name(ref.name), ref.database, ref.schema, ref.full_name,
                         "DEFAULT", "Y" if used else "N", _DEFAULT_PIPE_TEXT, None))
        return sorted(rows, key=lambda r: (r[1], r[2], r[0]))

    def show_pipe(self, command: PipeCommand):
        return self.spark.createDataFrame(
            self._pipe_rows(), "name string, database_name string, schema_name string, table string, "
                               "kind string, used_by_connector string, definition string, "
                               "notification_channel string")

    def describe_pipe(self, command: PipeCommand):
        database, schema, name = command.name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        rows = [r for r in self._pipe_rows() if (r[1], r[2], r[0]) == (database, schema, name)]
        if not rows:
            raise SqlError(f"pipe {database}.{schema}.{name} does not exist (SHOW PIPES lists them)")
        return self.spark.createDataFrame(
            rows, "name string, database_name string, schema_name string, table string, "
                  "kind string, used_by_connector string, definition string, "
                  "notification_channel string")

    def _drop_queue(self, pipe) -> str:
        """Delete a dropped auto-ingest pipe's SQS queue; a note when it is left behind."""
        from floeline.errors import FloelineError
        from floeline.sources import s3_notifications
        from floeline.warehouse import stages

        channel = (pipe.copy or {}).get("notification_channel") if pipe is not None else None
        if not channel:
            return ""
        stage = stages.load_stage(self.warehouse, *pipe.copy["stage"])
        if stage is None:
            return f" Its queue {channel} is left: its stage is gone (delete the queue with your AWS tools)."
        try:
            s3_notifications.delete_queue(channel, stage.resolved_credentials(), stage.endpoint)
        except FloelineError as exc:
            return f" Its queue {channel} is left: {exc}"
        return ""

    def drop_pipe(self, command: PipeCommand):
        database, schema, name = command.name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized
        pipe = pipes.load(self.warehouse, database, schema, "pipe", name)
        if pipes.delete(self.warehouse, database, schema, "pipe", name):
            return self.status(f"{name} successfully dropped.{self._drop_queue(pipe)}")
        if name.endswith(pipes.DEFAULT_PIPE_SUFFIX):
            raise SqlError(f"{name} is a default pipe: it cannot be dropped (it exists for its table)")
        if command.if_exists:
            return self.status("Drop statement executed successfully (pipe already dropped).")
        raise SqlError(f"pipe {database}.{schema}.{name} does not exist (SHOW PIPES lists them)")

