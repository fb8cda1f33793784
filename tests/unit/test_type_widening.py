"""Which NUMBER(p,s) columns a batch's numbers widen (Delta type widening under schema
evolution), without Spark; and the one-pass read that leaves such values to the
general path instead of rounding them."""

from __future__ import annotations

import pytest

from floeline.ingest.onepass import column_read
from floeline.records.columns import Column
from floeline.warehouse.type_widening import widened_decimal, widenings


@pytest.mark.parametrize("column, batch, wider", [
    ("decimal(10,2)", "DECIMAL(14,4)", "decimal(14,4)"),  # an Avro decimal(10,2) -> (14,4)
    ("decimal(10,2)", "DECIMAL(12,2)", "decimal(12,2)"),  # more integer digits
    ("decimal(10,2)", "DECIMAL(5,4)", "decimal(12,4)"),  # more places: integer digits kept
    ("decimal(10,2)", "DECIMAL(6,2)", None),  # fits
    ("decimal(10,2)", "DECIMAL(3,1)", None),
    ("decimal(38,0)", "DECIMAL(3,2)", None),  # no decimal holds 38 integer digits and a fraction
    ("decimal(30,2)", "DECIMAL(38,10)", "decimal(38,10)"),
    ("decimal(30,2)", "DECIMAL(38,12)", None),  # past 38 digits: Snowflake's rules (round / row error)
    ("decimal(10,2)", "BIGINT", None),  # a whole number's type does not say its digits
    ("decimal(10,2)", "DECIMAL(21,0)", None),  # (past 18 it does: whole numbers never widen)
    ("double", "DECIMAL(14,4)", None),
    ("string", "DECIMAL(14,4)", None),
])
def test_a_decimal_column_widens_to_hold_the_batch(column, batch, wider):
    assert widened_decimal(column, batch) == wider


def test_only_plain_decimal_columns_the_batch_holds_widen():
    columns = [Column("AMOUNT", "decimal(10,2)"), Column("PRICE", "decimal(10,2)"),
               Column("CODE", "string", declared="VARCHAR(10)"), Column("N", "decimal(38,0)")]
    fields = {"amount": (["amount"], "DECIMAL(14,4)"), "code": (["code"], "DECIMAL(14,4)"),
              "n": (["n"], "DECIMAL(5,2)")}
    assert [(c.name, t) for c, t in widenings(columns, fields)] == [("AMOUNT", "decimal(14,4)")]


def test_one_pass_reads_a_scaled_decimal_wide_and_marks_values_that_would_round():
    read = column_read(Column("AMOUNT", "decimal(10,2)"), "j.`amount`")
    assert read.json_type == "decimal(38,29)"
    assert read.value == "try_cast(j.`amount` AS decimal(10,2))"
    assert read.unusual == ("(j.`amount` IS NOT NULL AND (try_cast(j.`amount` AS decimal(10,2)) IS NULL "
                            "OR try_cast(j.`amount` AS decimal(10,2)) != j.`amount`))",)
    # NUMBER(38,0), the connector's own integer columns: read as before
    assert column_read(Column("N", "decimal(38,0)"), "j.`n`").json_type == "decimal(38,0)"
