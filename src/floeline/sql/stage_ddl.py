"""Stage and file format statements: CREATE [OR REPLACE] STAGE / FILE FORMAT, DROP,
SHOW STAGES / FILE FORMATS, DESCRIBE STAGE, and LIST @stage[/path] [PATTERN=...].

Names follow Snowflake like tables (unquoted -> uppercase, unqualified -> FLOELINE.PUBLIC).
A stage's URL is `file:///dir/` (a local directory), `s3://bucket/prefix/` (with
CREDENTIALS=(AWS_KEY_ID=... AWS_SECRET_KEY=...) and, for an S3-compatible store,
ENDPOINT='http://host:port'), or none (an internal stage in the warehouse). Secrets
are stored for reading the store and never printed."""

from __future__ import annotations

from urllib.parse import urlparse

from sqlglot import exp

from floeline import secret_references
from floeline.errors import SqlError
from floeline.naming import DEFAULT_DATABASE, DEFAULT_SCHEMA
from floeline.records.file_formats import FileFormat, FileFormatError
from floeline.sql.clauses import options_of, parse_stage_ref, value_of
from floeline.sql.statements import Name, table_name
from floeline.warehouse import stages
from floeline.warehouse.catalog import Warehouse

_STAGE_PROPERTIES = ("URL", "ENDPOINT", "CREDENTIALS", "FILE_FORMAT", "COMMENT")


def is_stage_statement(tree: exp.Expression) -> bool:
    kind = str(tree.args.get("kind") or "").upper()
    if isinstance(tree, (exp.Create, exp.Drop, exp.Describe)) and kind in ("STAGE", "FILE FORMAT"):
        return True
    if isinstance(tree, exp.Show) and str(tree.this).upper() in ("STAGES", "FILE FORMATS"):
        return True
    return isinstance(tree, exp.ListStage)


class StageDdl:
    """Runs stage and file format statements against one warehouse."""

    def __init__(self, spark, warehouse: Warehouse):
        self.spark, self.warehouse = spark, warehouse

    def execute(self, tree: exp.Expression):
        kind = str(tree.args.get("kind") or "").upper()
        if isinstance(tree, exp.ListStage):
            return self.list_stage(tree)
        if isinstance(tree, exp.Show):
            return self.show_stages() if str(tree.this).upper() == "STAGES" else self.show_formats()
        if isinstance(tree, exp.Create):
            return self.create_stage(tree) if kind == "STAGE" else self.create_format(tree)
        if isinstance(tree, exp.Drop):
            return self.drop(tree, kind)
        return self.describe_stage(tree)

    def status(self, message: str):
        return self.spark.createDataFrame([(message,)], "status string")

    @staticmethod
    def qualified(name: Name) -> tuple[str, str, str]:
        return name.qualified(DEFAULT_DATABASE, DEFAULT_SCHEMA).normalized

    def stage(self, name: Name) -> stages.Stage:
        database, schema, stage_name = self.qualified(name)
        found = stages.load_stage(self.warehouse, database, schema, stage_name)
        if found is None:
            known = ", ".join(s.full_name for s in stages.list_stages(self.warehouse)) or "none"
            raise SqlError(f"stage {database}.{schema}.{stage_name} does not exist (stages: {known})")
        return found

    # ---- CREATE -----------------------------------------------------------------

    def create_stage(self, tree: exp.Create):
        database, schema, name = self.qualified(table_name(tree.this))
        props = tree.args.get("properties")
        url = endpoint = comment = None
        credentials: dict[str, str] = {}
        file_format: dict[str, object] = {}
        for prop in props.expressions if props else []:
            if isinstance(prop, exp.CredentialsProperty):
                credentials = {k: str(v) for k, v in options_of(prop.expressions).items()}
            elif isinstance(prop, exp.FileFormatProperty):
                file_format = options_of(prop.expressions)
            elif isinstance(prop, exp.SchemaCommentProperty):
                comment = value_of(prop.this)
            elif isinstance(prop, exp.Property) and prop.name.upper() in ("URL", "ENDPOINT"):
                value = str(value_of(prop.args["value"]))
                url, endpoint = (value, endpoint) if prop.name.upper() == "URL" else (url, value)
            else:
                raise SqlError(f"stage option {prop.sql('snowflake')!r} is not supported "
                               f"(supported: {', '.join(_STAGE_PROPERTIES)})")
        if url is not None:
            scheme = urlparse(url).scheme
            if scheme not in ("file", "s3"):
                raise SqlError(f"stage URL {url!r}: use 'file:///absolute/dir/' or 's3://bucket/prefix/'")
            if scheme == "file" and not urlparse(url).path.startswith("/"):
                raise SqlError(f"stage URL {url!r}: a file URL needs an absolute path (file:///dir/)")
        unknown = set(credentials) - {"AWS_KEY_ID", "AWS_SECRET_KEY", "AWS_TOKEN"}
        if unknown:
            raise SqlError(f"CREDENTIALS {', '.join(sorted(unknown))} not supported "
                           f"(AWS_KEY_ID, AWS_SECRET_KEY, AWS_TOKEN)")
        for key, value in credentials.items():
            secret_references.check(value, f"stage {database}.{schema}.{name} CREDENTIALS {key}")
        stage = stages.Stage(name, database, schema, url, credentials, endpoint, file_format, comment)
        stages.resolve_format(self.warehouse, stage, None, database, schema)  # checks the options
        existing = stages.load_stage(self.warehouse, database, schema, name)
        if existing is not None and tree.args.get("exists"):
            return self.status(f"{name} already exists, statement succeeded.")
        if existing is not None and not tree.args.get("replace"):
            raise SqlError(f"stage {stage.full_name} already exists; use CREATE OR REPLACE STAGE")
        stages.save_stage(self.warehouse, stage)
        return self.status(f"Stage area {name} successfully created.")

    def create_format(self, tree: exp.Create):
        database, schema, name = self.qualified(table_name(tree.this))
        props = tree.args.get("properties")
        options = options_of(props.expressions if props else [])
        try:
            FileFormat().with_options(options)
        except FileFormatError as exc:
            raise SqlError(str(exc)) from None
        existing = stages.load_file_format(self.warehouse, database, schema, name)
        if existing is not None and tree.args.get("exists"):
            return self.status(f"{name} already exists, statement succeeded.")
        if existing is not None and not tree.args.get("replace"):
            raise SqlError(f"file format {database}.{schema}.{name} already exists; "
                           f"use CREATE OR REPLACE FILE FORMAT")
        stages.save_file_format(self.warehouse, database, schema, name, options)
        return self.status(f"File format {name} successfully created.")

    # ---- DROP / SHOW / DESCRIBE / LIST ----------------------------------------------

    def drop(self, tree: exp.Drop, kind: str):
        database, schema, name = self.qualified(table_name(tree.args["tables"][0]))
        remove = stages.delete_stage if kind == "STAGE" else stages.delete_file_format
        if remove(self.warehouse, database, schema, name):
            return self.status(f"{name} successfully dropped.")
        if tree.args.get("exists"):
            return self.status(f"Drop statement executed successfully ({name} already dropped).")
        raise SqlError(f"{kind.lower()} {database}.{schema}.{name} does not exist")

    def _stage_row(self, stage: stages.Stage):
        fmt = stages.resolve_format(self.warehouse, stage, None, stage.database, stage.schema)
        return (stage.name, stage.database, stage.schema, stage.url or "", stage.kind,
                "Y" if stage.credentials else "N", stage.endpoint or "",
                _format_text(stage.file_format, fmt), stage.comment or "")

    _STAGE_COLUMNS = ("name string, database_name string, schema_name string, url string, "
                      "type string, has_credentials string, endpoint string, file_format string, "
                      "comment string")

    def show_stages(self):
        return self.spark.createDataFrame([self._stage_row(s) for s in stages.list_stages(self.warehouse)],
                                          self._STAGE_COLUMNS)

    def show_formats(self):
        rows = []
        for database, schema, name, options in stages.list_file_formats(self.warehouse):
            fmt = FileFormat().with_options(options)
            rows.append((name, database, schema, fmt.type, _format_text({}, fmt)))
        return self.spark.createDataFrame(rows, "name string, database_name string, schema_name string, "
                                                "type string, format_options string")

    def describe_stage(self, tree: exp.Describe):
        stage = self.stage(table_name(tree.this))
        fmt = stages.resolve_format(self.warehouse, stage, None, stage.database, stage.schema)
        rows = [("STAGE_LOCATION", "URL", stage.url or "(internal)"),
                ("STAGE_LOCATION", "ENDPOINT", stage.endpoint or ""),
                ("STAGE_CREDENTIALS", "AWS_KEY_ID", stage.masked().get("AWS_KEY_ID", "")),
                ("STAGE_CREDENTIALS", "AWS_SECRET_KEY", stage.masked().get("AWS_SECRET_KEY", ""))]
        rows += [("STAGE_FILE_FORMAT", k, _text(v)) for k, v in fmt.options().items()]
        return self.spark.createDataFrame(rows, "parent_property string, property string, "
                                                "property_value string")

    def list_stage(self, tree: exp.ListStage):
        ref = parse_stage_ref(str(value_of(tree.this)))
        stage = self.stage(ref.name)
        pattern = tree.args.get("pattern")
        files = stages.select_files(stages.list_files(self.warehouse, stage, ref.path), ref.path, None,
                                    str(value_of(pattern)) if pattern is not None else None)
        rows = [(f.name, f.size, f.modified_ms) for f in files]
        return self.spark.createDataFrame(rows, "name string, size bigint, last_modified_ms bigint")


def _text(value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(repr(v) for v in value) + ")"
    return "" if value is None else str(value)


def _format_text(declared: dict, fmt: FileFormat) -> str:
    named = next((v for k, v in declared.items() if k.upper() == "FORMAT_NAME"), None)
    text = " ".join(f"{k}={_text(v)}" for k, v in fmt.options().items())
    return f"FORMAT_NAME={named} ({text})" if named else text
