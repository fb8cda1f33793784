"""Hostile names (issue 11, item 7): a database, schema, table or connector name can
never reach outside its folder or the warehouse; every odd name still gets a table of
its own, and reads back as itself."""

from __future__ import annotations

import os

import pytest

from floeline.config import config_from_dict
from floeline.errors import ConfigError, TableError
from floeline.warehouse.catalog import Warehouse, folder_name, name_of_folder

HOSTILE = ["..", ".", "../../etc", "a/b", "/abs", "x\\y", "%2F", ".hidden", "_stages", "`; DROP TABLE t; --",
           "'quoted'", '"dq"', "ünï €", "a" * 200]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_stays_in_its_schema_folder_and_reads_back(tmp_path, name):
    warehouse = Warehouse(tmp_path / "wh")
    ref = warehouse.table("DB", "PUBLIC", name)
    schema_dir = os.path.realpath(tmp_path / "wh" / "DB" / "PUBLIC")
    assert os.path.dirname(os.path.realpath(ref.path)) == schema_dir
    assert os.path.basename(ref.path) not in (".", "..") and "/" not in os.path.basename(ref.path)
    assert name_of_folder(folder_name(name)) == name
    # databases and schemas too
    ref = warehouse.table(name, name, "T")
    assert os.path.realpath(ref.path).startswith(os.path.realpath(tmp_path / "wh") + os.sep)
    assert os.path.realpath(ref.path).count(os.sep) == os.path.realpath(tmp_path / "wh").count(os.sep) + 3


def test_listed_tables_read_back_their_names(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    names = ["a/b", "..", "50%", "_STAGES", "_private"]
    for name in names:
        os.makedirs(os.path.join(warehouse.table("DB", "PUBLIC", name).path, "_delta_log"))
    # a table named as one of floeline's own folders is not that folder, and is listed
    assert not os.path.exists(warehouse.schema_path("DB", "PUBLIC", "_STAGES"))
    assert sorted(t.name for t in warehouse.list_tables()) == sorted(names)
    assert warehouse.resolve(['a/b'], [True]).name == "a/b"


@pytest.mark.parametrize("name,why", [("", "empty"), ("a\0b", "NUL"), ("x" * 10_000, "at most 255 bytes")])
def test_names_no_folder_can_hold_are_refused_with_the_reason(tmp_path, name, why):
    with pytest.raises(TableError, match=why):
        Warehouse(tmp_path).table("DB", "PUBLIC", name)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "c\\d"])
def test_a_connector_name_cannot_move_its_checkpoint(name):
    with pytest.raises(ConfigError, match="checkpoint's folder"):
        config_from_dict({"name": name, "topics": "t", "bootstrap.servers": "localhost:9092"})
