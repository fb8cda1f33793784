"""A stage path cannot leave its stage: `@s/../x`, FILES=('../x'), absolute and
%-encoded paths are errors naming the stage, and a local stage's symbolic links are
followed only inside it (no Spark)."""

from __future__ import annotations

import os

import pytest
import sqlglot

from floeline.errors import SqlError
from floeline.sql.copy_statement import parse_copy
from floeline.sql.clauses import parse_stage_ref
from floeline.warehouse.stage_paths import inside_stage, why_outside
from floeline.warehouse.stage_store import LocalStore


@pytest.mark.parametrize("path", ["..", "../x", "sub/../../x", "sub/..", "./x", "a/./b", "/etc/passwd",
                                  "%2e%2e/x", "sub/%2E%2E/%2e%2e/x", "%252e%252e/x", "..\\x", "a\x00b",
                                  "\\etc\\passwd"])
def test_paths_that_leave_the_stage_are_refused(path):
    assert why_outside(path) is not None
    with pytest.raises(SqlError, match=r"stage DB\.S\.ST: path .* is outside the stage \(.*\); a stage path is "
                                       r"relative to the stage's URL"):
        inside_stage(path, "DB.S.ST")


@pytest.mark.parametrize("path", ["", "a.json", "sub/", "sub/a.json.gz", "2024/01/x..y.json", "...", "a%20b",
                                  "100%", "sub//a.json"])
def test_paths_inside_the_stage_are_kept(path):
    assert inside_stage(path, "DB.S.ST") == path


def test_stage_references_and_files_entries_are_checked():
    assert parse_stage_ref("@db.sch.st/2024/01/").path == "2024/01/"
    with pytest.raises(SqlError, match=r"stage @db\.sch\.st: path '\.\./\.\./etc' is outside the stage"):
        parse_stage_ref("@db.sch.st/../../etc")
    for statement, shown in [("COPY INTO t FROM @s/../../etc", "path '../../etc'"),
                             ("COPY INTO t FROM @s/sub/../../x", "path 'sub/../../x'"),
                             ("COPY INTO t FROM (SELECT $1 FROM @s/../x)", "path '../x'"),
                             ("COPY INTO t FROM @s/%2e%2e/x", "path '%2e%2e/x'"),
                             ("COPY INTO t FROM @s FILES=('a.json', '../x')", "FILES entry '../x'"),
                             ("COPY INTO t FROM @s/sub/ FILES=('/etc/passwd')", "FILES entry '/etc/passwd'")]:
        with pytest.raises(SqlError, match=f"stage @s: {shown} is outside the stage"):
            parse_copy(sqlglot.parse_one(statement, read="snowflake"))
    copy = parse_copy(sqlglot.parse_one("COPY INTO t FROM @s/sub/ FILES=('a.json') PATTERN='.*'",
                                        read="snowflake"))
    assert (copy.stage.path, copy.files) == ("sub/", ("a.json",))


def test_a_local_stage_follows_symbolic_links_only_inside_it(tmp_path):
    root, outside = tmp_path / "stage", tmp_path / "secret"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    (root / "sub" / "a.json").write_text('{"a":1}\n')
    os.symlink(root / "sub" / "a.json", root / "inside-link.json")  # stays inside: followed
    store = LocalStore(root, "DB.S.ST")
    assert [f.name for f in store.list()] == ["inside-link.json", "sub/a.json"]
    os.symlink(outside / "passwd", root / "sub" / "passwd.json")  # leaves the stage: refused
    with pytest.raises(SqlError, match=r"stage DB\.S\.ST: sub/passwd\.json is a symbolic link to .*/secret/passwd, "
                                       r"outside the stage's folder"):
        store.list()
    with pytest.raises(SqlError, match="is a symbolic link to"):
        store.file("sub/passwd.json")
    os.remove(root / "sub" / "passwd.json")
    os.symlink(outside, root / "linked-dir")  # a linked folder: not walked, and not reachable by name
    assert [f.name for f in store.list()] == ["inside-link.json", "sub/a.json"]
    with pytest.raises(SqlError, match="linked-dir/passwd is a symbolic link to"):
        store.file("linked-dir/passwd")
    with pytest.raises(SqlError, match=r"path '\.\./secret' is outside the stage"):
        store.list("../secret")
    with pytest.raises(SqlError, match=r"file '\.\./secret/passwd' is outside the stage"):
        store.file("../secret/passwd")


def test_a_listed_file_named_with_percent_signs_is_just_a_file(tmp_path):
    (tmp_path / "%2e%2e").mkdir()
    (tmp_path / "%2e%2e" / "a.json").write_text("{}\n")
    store = LocalStore(tmp_path, "DB.S.ST")
    assert [f.name for f in store.list()] == ["%2e%2e/a.json"]  # not '..': nothing decodes it
    assert store.file("%2e%2e/a.json").size == 3
    with pytest.raises(SqlError, match="outside the stage"):  # but a statement's path is decoded for the check
        store.list("%2e%2e/")
