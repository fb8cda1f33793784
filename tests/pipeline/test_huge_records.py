"""Huge records do not kill the process (issue 11, item 4): a 10 MB value lands, and a
record with 100,000 keys either lands or goes to the error table with a message that
says why; the records around them land either way."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_a_10_mb_record_lands_beside_small_ones(memory_log, make_config, run_memory, read_table):
    big = "x" * (10 * 1024 * 1024)
    memory_log.append("orders/0", "orders", [b'{"n": 1}', json.dumps({"n": 2, "blob": big}).encode(),
                                             b'{"n": 3}'])
    run_memory(make_config(errors__tolerance="all"))
    rows = {int(r["N"]): r["BLOB"] for r in read_table("ORDERS").collect()}
    assert sorted(rows) == [1, 2, 3] and rows[2] == big and rows[1] is None


def test_a_record_with_100000_keys_is_a_row_error_that_says_why(memory_log, make_config, run_memory,
                                                                read_table):
    """Its keys would add 100,000 columns, over floeline.schema.evolution.max.new.columns:
    the batch's other records still get their columns and land; it goes to the error
    table with a message that says why."""
    wide = {f"k{i}": i for i in range(100_000)}
    memory_log.append("orders/0", "orders", [b'{"n": 1}', json.dumps({"n": 2, **wide}).encode(),
                                             b'{"n": 3}'])
    run_memory(make_config(errors__tolerance="all"))
    table = read_table("ORDERS")
    assert sorted(int(r["N"]) for r in table.collect()) == [1, 3]
    assert len(table.columns) == 2  # RECORD_METADATA, N
    (error,) = read_table("ORDERS_ERRORS").collect()
    assert error["RECORD_POSITION"] == "1"
    assert "record has 100000 keys that match no column" in error["ERROR"], error["ERROR"][:500]
    assert "more keys than floeline.schema.evolution.max.new.columns (1000)" in error["ERROR"]
