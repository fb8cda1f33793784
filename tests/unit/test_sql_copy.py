"""COPY INTO and stage statements as parsed (no Spark)."""

from __future__ import annotations

import pytest
import sqlglot

from floeline.errors import SqlError
from floeline.sql.copy_statement import parse_copy
from floeline.sql.clauses import parse_stage_ref
from floeline.warehouse.stages import StagedFile, select_files


def copy(text: str):
    return parse_copy(sqlglot.parse_one(text, read="snowflake"))


def test_stage_references():
    ref = parse_stage_ref("@db.sch.landing/2024/01/")
    assert ref.name.normalized == ("DB", "SCH", "LANDING") and ref.path == "2024/01/"
    ref = parse_stage_ref('@"My Stage"/x.json')
    assert ref.name.normalized == ("My Stage",) and ref.path == "x.json"
    assert parse_stage_ref("@s").path == ""
    with pytest.raises(SqlError, match="user and table stages"):
        parse_stage_ref("@%orders")
    with pytest.raises(SqlError, match="not a stage name"):
        parse_stage_ref("@a.b.c.d")


def test_copy_options():
    c = copy("COPY INTO db.t (a, \"b\") FROM @s/p FILES=('x.json','y.json') PATTERN='.*json' "
             "FILE_FORMAT=(TYPE=JSON STRIP_OUTER_ARRAY=TRUE) ON_ERROR='skip_file' FORCE=TRUE")
    assert c.table.normalized == ("DB", "T") and c.columns == ("A", "b")
    assert (c.stage.path, c.files, c.pattern) == ("p", ("x.json", "y.json"), ".*json")
    assert c.file_format == {"TYPE": "JSON", "STRIP_OUTER_ARRAY": True}
    assert (c.on_error, c.force, c.select) == ("SKIP_FILE", True, None)
    defaults = copy("COPY INTO t FROM @s")
    assert (defaults.on_error, defaults.force, defaults.files, defaults.match_by_column_name) == (
        None, False, None, False)
    transformed = copy("COPY INTO t FROM (SELECT $1:a::NUMBER, METADATA$FILENAME FROM @s/2024/)")
    assert transformed.select is not None and transformed.stage.path == "2024/"


def test_copy_option_errors_name_the_option():
    with pytest.raises(SqlError, match="COPY option PURGEX is not supported"):
        copy("COPY INTO t FROM @s PURGEX=TRUE")
    with pytest.raises(SqlError, match="ON_ERROR=SKIP_FILE_3 is not supported"):
        copy("COPY INTO t FROM @s ON_ERROR=SKIP_FILE_3")
    with pytest.raises(SqlError, match="MATCH_BY_COLUMN_NAME cannot be used with a COPY transformation"):
        copy("COPY INTO t FROM (SELECT $1 FROM @s) MATCH_BY_COLUMN_NAME=CASE_INSENSITIVE")


def test_files_and_pattern_select_from_the_listing():
    files = [StagedFile(n, f"file:///x/{n}", 1, 0) for n in ("a.json", "p/b.json", "p/c.csv")]
    assert [f.name for f in select_files(files, "p/", ["b.json"], None)] == ["p/b.json"]
    assert [f.name for f in select_files(files, "", None, r".*\.json")] == ["a.json", "p/b.json"]
    with pytest.raises(SqlError, match="not a valid regular expression"):
        select_files(files, "", None, "(")
