"""`floeline sql` table-name resolution and rewriting, without Spark."""

import pytest

from floeline.errors import FloelineError, TableError
from floeline.sql.query import translate
from floeline.warehouse.catalog import Warehouse


@pytest.fixture
def warehouse(tmp_path):
    for db, schema, table in [("FLOELINE", "PUBLIC", "ORDERS"), ("FLOELINE", "PUBLIC", "My T"),
                              ("OTHER", "RAW", "ORDERS")]:
        (tmp_path / db / schema / table / "_delta_log").mkdir(parents=True)
    return Warehouse(tmp_path)


def test_names_resolve_case_insensitively_at_every_level(warehouse):
    path = f"{warehouse.root}/FLOELINE/PUBLIC/ORDERS"
    assert translate("select * from floeline.public.orders", warehouse) == \
        f"SELECT * FROM delta.`{path}` AS `orders`"
    assert f"delta.`{path}` AS o" in translate("select o.x from PUBLIC.orders o", warehouse)


def test_ambiguous_and_missing_names_are_errors(warehouse):
    with pytest.raises(TableError, match="ambiguous"):
        translate("select * from orders", warehouse)
    with pytest.raises(TableError, match="nope not found"):
        translate("select * from nope", warehouse)
    with pytest.raises(FloelineError, match="syntax"):
        translate("select from where (", warehouse)


def test_quoted_names_keep_case_and_variant_paths_pass_through(warehouse):
    sql = translate('select record_metadata:topic::string from public."My T"', warehouse)
    assert "My T" in sql and "record_metadata:topic" in sql
    with pytest.raises(TableError):
        translate('select * from public."my t"', warehouse)


def test_time_travel_ddl_and_ctes(warehouse):
    path = f"{warehouse.root}/OTHER/RAW/ORDERS"
    assert "VERSION AS OF 1" in translate("select * from raw.orders version as of 1", warehouse)
    assert translate("describe raw.orders", warehouse) == f"DESCRIBE delta.`{path}`"
    assert "FROM x" in translate("with x as (select 1) select * from x", warehouse)
