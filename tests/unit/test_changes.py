"""insert.mode=upsert's pure parts (issue 27): the record key's fields, the MERGE
statement, the columns a batch of changes writes. No Spark; the SQL itself runs in
tests/pipeline/test_upsert.py."""

from __future__ import annotations

import pytest

from floeline.config import config_from_dict
from floeline.errors import ConfigError
from floeline.ingest.upsert_sink import _merged, with_key_fields
from floeline.records.changes import ChangePlan, key_fields_of
from floeline.records.shaping import fields_of
from floeline.warehouse.commits import merge_sql


def test_the_record_keys_fields_come_from_their_merged_schema():
    assert key_fields_of("OBJECT<order_id: BIGINT, line: SMALLINT>") == ("line", "order_id")
    assert key_fields_of("OBJECT<`has space`: STRING>") == ("has space",)
    assert key_fields_of("BIGINT") == ()  # keys that are not structs have no fields
    assert key_fields_of(None) == ()


def test_a_plan_knows_where_its_key_comes_from():
    assert ChangePlan("record_key", ("id",), True).from_record_key
    assert not ChangePlan("record_value", ("id",), False).from_record_key


def test_the_merge_deletes_updates_and_inserts_by_key():
    sql = merge_sql("/w/DB/S/T", "v1", [("ID", "_c1")], [("ID", "_c1"), ("NAME", "_c2"),
                                                          ("RECORD_METADATA", "_c0")], "_delete")
    assert sql == (
        "MERGE INTO delta.`/w/DB/S/T` AS t USING `v1` AS s ON t.`ID` = s.`_c1` "
        "WHEN MATCHED AND s.`_delete` THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.`NAME` = s.`_c2`, t.`RECORD_METADATA` = s.`_c0` "
        "WHEN NOT MATCHED AND NOT s.`_delete` THEN INSERT (`ID`, `NAME`, `RECORD_METADATA`) "
        "VALUES (s.`_c1`, s.`_c2`, s.`_c0`)")


def test_a_merge_with_a_truncate_also_deletes_every_row_the_source_does_not_write():
    sql = merge_sql("/w/T", "v", [("ID", "_c0")], [("ID", "_c0"), ("NAME", "_c1")], "_delete", truncate=True)
    assert sql.endswith("VALUES (s.`_c0`, s.`_c1`) WHEN NOT MATCHED BY SOURCE THEN DELETE")
    assert "NOT MATCHED BY SOURCE" not in merge_sql("/w/T", "v", [("ID", "_c0")], [("ID", "_c0")], "_delete")


def test_truncate_enabled_is_debeziums_setting_and_needs_upsert():
    base = {"name": "c", "topics": "t", "insert.mode": "upsert", "primary.key.mode": "record_key"}
    assert not config_from_dict(base).changes.truncate_enabled  # skipped, as Debezium's sink does
    assert config_from_dict({**base, "truncate.enabled": "true"}).changes.truncate_enabled
    with pytest.raises(ConfigError) as info:
        config_from_dict({"name": "c", "topics": "t", "truncate.enabled": "true"})
    assert "truncate.enabled" in str(info.value) and "insert.mode=upsert" in str(info.value)


def test_a_merge_of_key_columns_alone_has_no_update_and_quotes_every_name():
    sql = merge_sql("/w/t`x", "v", [("a b", "_c0"), ("C", "_c1")], [("a b", "_c0"), ("C", "_c1")], "_delete")
    assert "UPDATE" not in sql
    assert "delta.`/w/t``x`" in sql and "t.`a b` = s.`_c0` AND t.`C` = s.`_c1`" in sql


def test_the_old_keys_of_moved_rows_join_the_images_columns():
    assert _merged("OBJECT<id: BIGINT, name: STRING>", None) == "OBJECT<id: BIGINT, name: STRING>"
    merged = fields_of(_merged("OBJECT<id: BIGINT, name: STRING>", "OBJECT<id: STRING>"))
    assert merged == {"ID": (["id"], "VARIANT"), "NAME": (["name"], "STRING")}
    assert _merged(None, None) == ""


def test_every_key_field_has_a_column_even_when_no_change_holds_it():
    fields = fields_of("OBJECT<Id: BIGINT, name: STRING>")
    with_keys = with_key_fields(fields, ("id", "line"), normalize=False)
    assert with_keys["ID"] == (["Id"], "BIGINT")  # matched case-insensitively
    assert with_keys["LINE"] == (["line"], "VOID")
    assert "LINE" not in fields
