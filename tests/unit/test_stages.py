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
