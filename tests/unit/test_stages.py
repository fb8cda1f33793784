"""Stage and file format definitions, and the load history's commit entries (no Spark)."""

from __future__ import annotations

import pytest

from floeline.errors import SqlError
from floeline.warehouse import load_history, stages
from floeline.warehouse.catalog import Warehouse


def test_stage_definitions_round_trip_and_mask_secrets(tmp_path):
    wh = Warehouse(tmp_path)
    stage = stages.Stage("S", "DB", "SCH", "s3://b/p/", {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "sk"},
                         "http://127.0.0.1:5000", {"TYPE": "JSON"})
    stages.save_stage(wh, stage)
    assert stages.load_stage(wh, "DB", "SCH", "S") == stage
    assert stage.masked() == {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "****"}
    assert [s.full_name for s in stages.list_stages(wh)] == ["DB.SCH.S"]
    assert stages.delete_stage(wh, "DB", "SCH", "S") and not stages.delete_stage(wh, "DB", "SCH", "S")


def test_file_format_resolution(tmp_path):
    wh = Warehouse(tmp_path)
    stages.save_file_format(wh, "FLOELINE", "PUBLIC", "JF", {"TYPE": "JSON", "STRIP_OUTER_ARRAY": True})
    stage = stages.Stage("S", "FLOELINE", "PUBLIC", None, file_format={"FORMAT_NAME": "jf"})
    fmt = stages.resolve_format(wh, stage, None, "FLOELINE", "PUBLIC")
    assert (fmt.type, fmt.strip_outer_array) == ("JSON", True)
    # The statement's own FILE_FORMAT wins over the stage's.
    assert stages.resolve_format(wh, stage, {"TYPE": "CSV"}, "FLOELINE", "PUBLIC").type == "CSV"
    assert stages.resolve_format(wh, None, None, "FLOELINE", "PUBLIC").type == "CSV"  # Snowflake's default
    with pytest.raises(SqlError, match="file format NOPE does not exist"):
        stages.resolve_format(wh, None, {"FORMAT_NAME": "NOPE"}, "FLOELINE", "PUBLIC")


def test_load_history_entries_survive_the_commit_metadata():
    load = load_history.FileLoad("DB.SCH.S", "a/b.json", 10, "abc", 1000, "PARTIALLY_LOADED", 3, 2, 1,
                                 "bad", 2, "DB.SCH.P")
    text = load_history.commit_metadata([load])
    assert load_history.parse_commit_metadata(text) == [load]
    assert load_history.parse_commit_metadata('{"floeline.channels": {}}') == []
    entry = load_history.HistoryEntry(load, 3, 5)
    loaded = load_history.Loaded([entry])
    assert loaded.holds("DB.SCH.S", "a/b.json", 10, "abc") and not loaded.holds("DB.SCH.S", "a/b.json", 11, "abc")
    assert loaded.listed("DB.SCH.S", "a/b.json", 10, 1000)


def _every_file(root):
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_stage_secrets_live_in_the_owner_only_secrets_store_not_the_definition(tmp_path):
    import stat

    wh = Warehouse(tmp_path)
    stage = stages.Stage("S3S", "DB", "SCH", "s3://b/p/",
                         {"AWS_KEY_ID": "AKIDSTAGE", "AWS_SECRET_KEY": "sk-very-secret", "AWS_TOKEN": "tok-secret"})
    stages.save_stage(wh, stage)
    assert stages.load_stage(wh, "DB", "SCH", "S3S") == stage
    holding = sorted(str(p.relative_to(tmp_path)) for p, data in _every_file(tmp_path).items()
                     if b"sk-very-secret" in data or b"tok-secret" in data)
    assert holding == ["_secrets/DB/SCH/_stages/S3S.json"]
    definition = (tmp_path / "DB" / "SCH" / "_stages" / "S3S.json").read_text()
    assert '"AKIDSTAGE"' in definition and '"stored_secrets": [\n  "AWS_SECRET_KEY",\n  "AWS_TOKEN"\n ]' in definition
    assert stat.S_IMODE((tmp_path / holding[0]).stat().st_mode) == 0o600
    for folder in ("_secrets", "_secrets/DB", "_secrets/DB/SCH", "_secrets/DB/SCH/_stages"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o700, folder
    # Replaced without credentials: the old secrets go; dropped: nothing is left.
    stages.save_stage(wh, stages.Stage("S3S", "DB", "SCH", "s3://b/p/"))
    assert not (tmp_path / holding[0]).exists()
    stages.save_stage(wh, stage)
    assert stages.delete_stage(wh, "DB", "SCH", "S3S")
    assert not any(b"sk-very-secret" in data for data in _every_file(tmp_path).values())


def test_an_older_definition_with_inline_secrets_still_loads(tmp_path):
    import json

    wh = Warehouse(tmp_path)
    old = {"name": "OLD", "database": "DB", "schema": "SCH", "url": "s3://b/p/", "endpoint": None,
           "credentials": {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "inline-secret"}, "file_format": {},
           "comment": None, "format": 1}
    (tmp_path / "DB" / "SCH" / "_stages").mkdir(parents=True)
    (tmp_path / "DB" / "SCH" / "_stages" / "OLD.json").write_text(json.dumps(old))
    loaded = stages.load_stage(wh, "DB", "SCH", "OLD")
    assert loaded.credentials == {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "inline-secret"}
    from floeline.secrets import scrub
    assert scrub("denied for inline-secret") == "denied for ****"
    stages.save_stage(wh, loaded)  # CREATE OR REPLACE rewrites it in the new form
    assert "inline-secret" not in (tmp_path / "DB" / "SCH" / "_stages" / "OLD.json").read_text()
    assert stages.load_stage(wh, "DB", "SCH", "OLD") == loaded


def test_a_definition_whose_secrets_are_gone_names_the_fix(tmp_path):
    wh = Warehouse(tmp_path)
    stages.save_stage(wh, stages.Stage("S3S", "DB", "SCH", "s3://b/p/", {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "x"}))
    (tmp_path / "_secrets" / "DB" / "SCH" / "_stages" / "S3S.json").unlink()
    with pytest.raises(SqlError, match=r"stage DB\.SCH\.S3S: its secret credentials \(AWS_SECRET_KEY\) are not in "
                                       r"the warehouse's secrets store .*CREATE OR REPLACE STAGE"):
        stages.load_stage(wh, "DB", "SCH", "S3S")


def test_a_failing_create_stage_never_quotes_its_secret():
    from floeline.sql.statements import Statement

    text = "CREATE STAGE s URL='ftp://b/' CREDENTIALS=(AWS_KEY_ID='AK' AWS_SECRET_KEY='sk-12345' AWS_TOKEN='t''x')"
    message = str(Statement(text, text, 1).error("stage URL ..."))
    assert "sk-12345" not in message and "t''x" not in message
    assert "AWS_KEY_ID='AK' AWS_SECRET_KEY='****' AWS_TOKEN='****'" in message
