"""Spark's errors about a statement as one floeline line, in the user's SQL (no Spark:
the condition, parameters and messages are Spark 4.2's, copied from its answers)."""

from __future__ import annotations

from floeline.sql.spark_errors import as_snowflake, explain, plain
from floeline.sql.statements import split_script

ORDER_BY_VARIANT = (
    '[DATATYPE_MISMATCH.INVALID_ORDERING_TYPE] Cannot resolve "variant_get(tweet, $.id) ASC NULLS '
    'LAST" due to data type mismatch: The `sortorder` does not support ordering on type "VARIANT". '
    "SQLSTATE: 42K09; line 1 pos 99;\n'Sort [variant_get(tweet#4, $.id, VariantType, true, Some(UTC)) "
    "ASC NULLS LAST], true\n+- Project [order_id#3, tweet#4]\n\nJVM stacktrace:\norg.apache...")


def test_variant_paths_read_as_the_user_wrote_them():
    assert as_snowflake("variant_get(tweet, $.id)") == "tweet:id"
    assert as_snowflake('"variant_get(v, $.a[0].b) DESC"') == "v:a[0].b DESC"
    assert as_snowflake("min(variant_get(`RECORD_METADATA`, $.offset))") == "min(RECORD_METADATA:offset)"


def test_order_by_a_variant_path_says_to_cast_it():
    line, fragment = explain("DATATYPE_MISMATCH.INVALID_ORDERING_TYPE",
                             {"sqlExpr": '"variant_get(tweet, $.id) ASC NULLS LAST"',
                              "functionName": "`sortorder`", "dataType": '"VARIANT"'}, ORDER_BY_VARIANT)
    assert fragment == "tweet:id"
    assert line == ("ORDER BY tweet:id: a VARIANT value has no order; cast it to a type, "
                    "e.g. ORDER BY tweet:id::NUMBER (or ::STRING, ::TIMESTAMP)")


def test_grouping_or_comparing_variants_says_to_cast_them():
    line, fragment = explain("GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE",
                             {"sqlExpr": '"variant_get(v, $.city)"', "dataType": '"VARIANT"'}, "")
    assert fragment == "v:city" and "GROUP BY v:city::STRING" in line
    line, fragment = explain("DATATYPE_MISMATCH.INVALID_ORDERING_TYPE",
                             {"sqlExpr": '"max(variant_get(v, $.n))"', "dataType": '"VARIANT"'}, "")
    assert fragment == "v:n" and "e.g. max(v:n::NUMBER)" in line


def test_other_errors_keep_sparks_first_line_without_position_plan_and_trace():
    line, fragment = explain("UNRESOLVED_COLUMN.WITH_SUGGESTION", {}, (
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name "
        "`nope` cannot be resolved. Did you mean one of the following? [`ORDER_ID`]. SQLSTATE: "
        "42703; line 1 pos 7;\n'Project ['nope]\n+- SubqueryAlias ORDERS\n\nJVM stacktrace:\n..."))
    assert fragment is None
    assert line == ("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter "
                    "with name `nope` cannot be resolved. Did you mean one of the following? "
                    "[`ORDER_ID`].")
    assert plain(ORDER_BY_VARIANT).endswith('type "VARIANT".')


def test_a_statement_starts_at_its_first_token_not_at_a_comment_before_it():
    script = ("COPY INTO tweets FROM @landing;      -- each file once\n-- and a line of its own\n"
              "/* a block */ CREATE PIPE p AUTO_INGEST=TRUE AS COPY INTO tweets FROM @landing;\n"
              "SELECT v FROM t\n  ORDER BY v : id")
    copy, pipe, select = split_script(script)
    assert copy.text == "COPY INTO tweets FROM @landing" and copy.line == 1
    assert pipe.text.startswith("CREATE PIPE p") and pipe.line == 3
    assert select.position_of("v:id") == (5, 12)
    assert pipe.position_of("v:id") is None
