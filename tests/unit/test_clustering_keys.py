"""CLUSTER BY without Spark: the statement's keys checked against the table's columns,
and which of them a connector's write is ordered by."""

from __future__ import annotations

import json

import pytest

from floeline.errors import SqlError
from floeline.sql.ddl import Ddl
from floeline.sql.statements import parse_statement, split_script
from floeline.warehouse.clustering import keys_of_write

TABLE = 'CREATE TABLE T (id NUMBER, "name" VARCHAR, at TIMESTAMP_NTZ, v VARIANT, ok BOOLEAN, b BINARY) '


def keys(clause: str) -> tuple[str, ...]:
    (statement,) = split_script(TABLE + clause)
    tree = parse_statement(statement).tree
    ddl = Ddl(None, None)
    properties = tree.args.get("properties")
    ddl.evolution(properties)  # CLUSTER BY is a table option like ENABLE_SCHEMA_EVOLUTION
    return ddl.cluster_by(properties, ddl.columns(tree.this))


def test_cluster_by_names_columns_as_queries_find_them():
    assert keys("") == ()
    assert keys("CLUSTER BY (id)") == ("ID",)
    assert keys('CLUSTER BY (at, "name") ENABLE_SCHEMA_EVOLUTION = TRUE') == ("AT", "name")
    assert keys("CLUSTER BY (name)") == ("name",)  # unquoted: any case, as a query finds it


@pytest.mark.parametrize("clause, message", [
    ("CLUSTER BY (v)", "CLUSTER BY V: a column of type variant cannot be a clustering key"),
    ("CLUSTER BY (ok)", "CLUSTER BY OK: a column of type boolean"),
    ("CLUSTER BY (b)", "CLUSTER BY B: a column of type binary"),
    ("CLUSTER BY (missing)", "CLUSTER BY MISSING: no such column (columns: ID, name, AT, V, OK, B)"),
    ("CLUSTER BY (id, id)", "the column is named twice"),
    ("CLUSTER BY (to_date(at))", "columns only (Delta liquid clustering), not expressions"),
    ("CLUSTER BY (t.id)", "columns only"),
])
def test_cluster_by_refuses_what_delta_cannot_cluster_by(clause, message):
    with pytest.raises(SqlError) as failure:
        keys(clause)
    assert message in str(failure.value)


def test_more_than_four_keys_are_refused():
    (statement,) = split_script("CREATE TABLE T (a INT, b INT, c INT, d INT, e INT) CLUSTER BY (a, b, c, d, e)")
    tree = parse_statement(statement).tree
    ddl = Ddl(None, None)
    with pytest.raises(SqlError, match="at most 4 columns"):
        ddl.cluster_by(tree.args["properties"], ddl.columns(tree.this))


def schema(*fields) -> str:
    return json.dumps({"type": "struct", "fields": [
        {"name": name, "type": "long", "nullable": True, "metadata": metadata} for name, metadata in fields]})


def test_a_write_is_ordered_by_the_clustering_keys_it_holds():
    plain = schema(("ID", {}), ("CUSTOMER", {}), ("AT", {}))
    assert keys_of_write(None, plain, ["ID", "CUSTOMER"]) == []  # no CLUSTER BY
    assert keys_of_write('["CUSTOMER", "AT"]', plain, ["ID", "CUSTOMER", "AT"]) == ["CUSTOMER", "AT"]
    assert keys_of_write('["CUSTOMER", "AT"]', plain, ["id", "customer"]) == ["CUSTOMER"]  # a batch without AT
    assert keys_of_write('["AT"]', plain, ["ID"]) == []


def test_a_write_numbering_an_identity_column_keeps_offset_order():
    identity = schema(("N", {"delta.identity.start": 1, "delta.identity.step": 1}), ("CUSTOMER", {}))
    assert keys_of_write('["CUSTOMER"]', identity, ["CUSTOMER"]) == []  # N is numbered by the write
    assert keys_of_write('["CUSTOMER"]', identity, ["N", "CUSTOMER"]) == ["CUSTOMER"]  # N is given
