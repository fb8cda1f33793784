"""Which tables one write job may write together (ingest/tables_together.py): the
default pipe's plans compared, and which Delta tables take files written without
them (warehouse/commits.FilesCommits). No Spark."""

from __future__ import annotations

import json

from floeline.ingest.table_sink import DefaultPipe
from floeline.records.columns import Column, TableSchema
from floeline.records.values_to_columns import SERVER_SIDE
from floeline.warehouse.commits import plain_fields, reads_files_of

COLUMNS = (Column("RECORD_METADATA", "variant"), Column("N", "decimal(38,0)"), Column("NAME", "string"))


def _pipe(fields, columns=COLUMNS, table="DB.S.T", reject=True, rejects=False) -> DefaultPipe:
    return DefaultPipe(TableSchema(columns, True), fields, fields, reject, rejects, None, table)


def test_tables_whose_keys_make_the_same_columns_are_written_together():
    a = _pipe({"N": (["n"], "DECIMAL(4,0)"), "NAME": (["name"], "STRING")}, table="DB.S.A")
    b = _pipe({"N": (["n"], "DECIMAL(6,0)"), "NAME": (["name"], "STRING")}, table="DB.S.B")
    # Integers of other sizes both fit NUMBER(38,0): no row of either can fail.
    assert a.same_rows_as(b, SERVER_SIDE) and b.same_rows_as(a, SERVER_SIDE)


def test_other_keys_other_columns_or_possible_row_errors_keep_tables_apart():
    base = _pipe({"N": (["n"], "DECIMAL(4,0)")})
    assert not base.same_rows_as(_pipe({"N": (["N"], "DECIMAL(4,0)")}), SERVER_SIDE)  # another key
    assert not base.same_rows_as(_pipe({"N": (["n"], "DECIMAL(4,0)")}, columns=COLUMNS[:2]), SERVER_SIDE)
    # A string into NUMBER may fail per row: that table's rows are checked on its own.
    assert not base.same_rows_as(_pipe({"N": (["n"], "STRING")}), SERVER_SIDE)
    # Keys without a column are row errors there.
    assert not base.same_rows_as(_pipe({"N": (["n"], "DECIMAL(4,0)")}, rejects=True), SERVER_SIDE)


def _schema(*fields) -> dict:
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": nullable, "metadata": metadata} for n, t, nullable, metadata in fields]}


def test_a_plain_table_reads_files_of_some_or_all_of_its_columns():
    table = plain_fields(_schema(("RECORD_METADATA", "variant", True, {}), ("N", "decimal(38,0)", True, {}),
                                 ("NAME", "string", True, {})))
    files = [("RECORD_METADATA", json.dumps("variant")), ("N", json.dumps("decimal(38,0)"))]
    assert reads_files_of(table, files)  # NAME, left out, reads as NULL
    assert not reads_files_of(table, [("N", json.dumps("string"))])  # another type
    assert not reads_files_of(table, [("OTHER", json.dumps("string"))])
    assert not reads_files_of(table, [])


def test_a_column_with_rules_a_plain_file_skips_makes_the_table_write_its_own_rows():
    # NOT NULL, a default, an identity, a generated column, a comment: all in the field.
    assert plain_fields(_schema(("N", "long", False, {}))) is None
    assert plain_fields(_schema(("N", "long", True, {"CURRENT_DEFAULT": "0"}))) is None
    assert plain_fields(_schema(("N", "long", True, {"delta.identity.start": 1}))) is None
    assert not reads_files_of(None, [("N", json.dumps("long"))])
