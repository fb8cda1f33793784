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


def test_json_stored_semi_structured_columns_are_read_parsed(warehouse):
    """A table with floeline.variant.storage=json: its VARIANT columns are JSON text; the
    query reads them through a view that parses them, so col:path works unchanged."""
    import sqlglot

    from floeline.sql.query import translate_tree
    from floeline.records.columns import Column

    columns = [Column("RECORD_METADATA", "string", declared="VARIANT"), Column("N", "decimal(38,0)"),
               Column("NAME", "string"), Column("TAGS", "string", declared="ARRAY")]
    path = f"{warehouse.root}/FLOELINE/PUBLIC/ORDERS"
    tree = sqlglot.parse_one("select o.record_metadata:topic::string, tags[0] from public.orders o "
                             "AT(VERSION => 2) where n > 1", read="snowflake")
    sql = translate_tree(tree, warehouse, lambda ref: columns)
    view = (f"(SELECT TRY_PARSE_JSON(`RECORD_METADATA`) AS `RECORD_METADATA`, `N`, `NAME`, "
            f"TRY_PARSE_JSON(`TAGS`) AS `TAGS` FROM delta.`{path}` VERSION AS OF 2) AS o")
    assert view in sql and "record_metadata:topic" in sql
    # Tables without JSON-stored columns are read as they are.
    plain = [Column("N", "decimal(38,0)"), Column("NAME", "string")]
    tree = sqlglot.parse_one("select n from public.orders", read="snowflake")
    assert translate_tree(tree, warehouse, lambda ref: plain) == f"SELECT n FROM delta.`{path}` AS `orders`"
