"""Snowflake pipe and query expressions -> Spark SQL, without Spark. (That the SQL
runs in Spark is checked in tests/integration/test_sql_ddl.py.)"""

import pytest
import sqlglot

from floeline.errors import SqlError
from floeline.records.snowflake_sql.expressions import Compiler, Mode, variant_path_sql


def pipe(expression: str):
    tree = sqlglot.parse_one(f"SELECT {expression}", read="snowflake").expressions[0]
    return Compiler(Mode.PIPE).compile(tree)


def query(expression: str) -> str:
    tree = sqlglot.parse_one(f"SELECT {expression}", read="snowflake")
    return Compiler(Mode.QUERY).rewrite(tree).sql("databricks")


@pytest.mark.parametrize("expression, sql", [
    ("$1:field", "variant_get(v, '$[\\'field\\']', 'variant')"),
    ("$1['field name']", "variant_get(v, '$[\\'field name\\']', 'variant')"),
    ("$1[' @&$#* has Łułósżź']", "variant_get(v, '$[\\' @&$#* has Łułósżź\\']', 'variant')"),
    ("$1:parent.child", "variant_get(v, '$[\\'parent\\'][\\'child\\']', 'variant')"),
    ("$1:parent['child field']", "variant_get(v, '$[\\'parent\\'][\\'child field\\']', 'variant')"),
    ("$1:arr[2].x", "variant_get(v, '$[\\'arr\\'][2][\\'x\\']', 'variant')"),
    ("$1:\"Mixed Case\"", "variant_get(v, '$[\\'Mixed Case\\']', 'variant')"),
    ("$1", "v"),
])
def test_record_paths_read_v_case_sensitively(expression, sql):
    compiled = pipe(expression)
    assert (compiled.sql, compiled.type, compiled.errors) == (sql, "variant", ())


@pytest.mark.parametrize("field", ["topic", "partition", "offset", "CreateTime", "key", "headers",
                                   "SnowflakeConnectorPushTime"])
def test_record_metadata_reads_meta(field):
    assert pipe(f"$1:RECORD_METADATA.{field}").sql == f"variant_get(_meta, '$[\\'{field}\\']', 'variant')"
    assert pipe(f"$1['RECORD_METADATA']['{field}']").sql == pipe(f"$1:RECORD_METADATA.{field}").sql
    assert pipe("$1:RECORD_METADATA").sql == "_meta"
    assert pipe("$1:record_metadata.topic").sql.startswith("variant_get(v,")  # keys are case-sensitive


def test_keys_with_quotes():
    assert pipe("$1['it''s']").sql == "variant_get(v, '$[\"it\\'s\"]', 'variant')"
    assert variant_path_sql("v", ["a", "b'\"c", "d"]) == (
        "variant_get(try_variant_get(variant_get(v, '$[\\'a\\']', 'variant'), '$', "
        "'map<string,variant>')['b\\'\"c'], '$[\\'d\\']', 'variant')")


def test_strict_cast_is_a_try_cast_plus_a_row_error():
    for text in ("$1:id::NUMBER", "CAST($1:id AS NUMBER)", "TO_NUMBER($1:id)", "$1:id::INT"):
        compiled = pipe(text)
        assert compiled.sql == "try_cast(CAST(variant_get(v, '$[\\'id\\']', 'variant') AS STRING) AS DECIMAL(38,0))"
        assert "is_variant_null" in compiled.error_sql and "to NUMBER(38,0)" in compiled.error_sql
    for text in ("TRY_CAST($1:id AS NUMBER)", "TRY_TO_NUMBER($1:id)"):
        assert pipe(text).errors == ()
    assert pipe("TO_NUMBER($1:x, 10, 2)").sql.endswith("AS DECIMAL(10,2))")
    assert pipe("$1:x::NUMBER(12,3)").sql.endswith("AS DECIMAL(12,3))")


@pytest.mark.parametrize("text, spark", [
    ("$1:a::VARCHAR", "CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING)"),
    ("$1:a::STRING", "CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING)"),
    ("$1:a::VARIANT", "variant_get(v, '$[\\'a\\']', 'variant')"),
    ("$1:a::FLOAT", "try_cast(CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING) AS DOUBLE)"),
    ("$1:a::BOOLEAN", "try_cast(CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING) AS BOOLEAN)"),
    ("$1:a::DATE", "try_cast(CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING) AS DATE)"),
    ("TO_VARCHAR($1:a)", "CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING)"),
    ("PARSE_JSON('{}')", "try_parse_json('{}')"),
])
def test_casts(text, spark):
    assert pipe(text).sql == spark


def test_timestamps_accept_text_and_epoch_numbers():
    sql = pipe("$1:t::TIMESTAMP_NTZ").sql
    assert sql.startswith("coalesce(try_cast(CAST(variant_get(v, '$[\\'t\\']', 'variant') AS STRING) AS TIMESTAMP_NTZ)")
    assert "timestamp_millis" in sql and pipe("TO_TIMESTAMP_LTZ($1:t)").type == "timestamp"


def test_functions_literals_and_operators():
    assert pipe("CONCAT($1:total::VARCHAR, ' USD')").sql == \
        "concat(CAST(variant_get(v, '$[\\'total\\']', 'variant') AS STRING), ' USD')"
    assert pipe("$1:a || 'x'").sql == pipe("CONCAT($1:a, 'x')").sql
    assert pipe("UPPER($1:n)").sql == "upper(CAST(variant_get(v, '$[\\'n\\']', 'variant') AS STRING))"
    assert pipe("TRIM($1:n)").sql.startswith("trim(BOTH ' ' FROM CAST(")
    assert pipe("SUBSTR($1:n, 1, 2)").sql.startswith("substring(CAST(")
    assert pipe("ARRAY_SIZE($1:a)").sql == \
        "array_size(try_variant_get(variant_get(v, '$[\\'a\\']', 'variant'), '$', 'array<variant>'))"
    assert (pipe("'x'").sql, pipe("42").sql, pipe("NULL").sql, pipe("TRUE").sql) == ("'x'", "42", "NULL", "TRUE")
    assert pipe("IFF($1:a = 'x', 1, 2)").sql == \
        "IF((CAST(variant_get(v, '$[\\'a\\']', 'variant') AS STRING) = 'x'), 1, 2)"
    assert pipe("CASE WHEN $1:n > 1 THEN 'a' ELSE 'b' END").sql.startswith("CASE WHEN (try_cast(")
    assert pipe("COALESCE($1:a, $1:b)").sql.startswith("coalesce(variant_get(")
    assert pipe("IFF(TRUE, 'n/a', 1)").type == "variant"  # mixed branches: no ANSI cast failure


def test_errors_of_untaken_branches_do_not_count():
    compiled = pipe("IFF($1:kind = 'n', $1:x::NUMBER, NULL)")
    assert compiled.error_sql.startswith("CASE WHEN (CAST(variant_get(v, '$[\\'kind\\']'")
    compiled = pipe("COALESCE($1:a::NUMBER, $1:b::NUMBER)")
    assert "IS NULL THEN" in compiled.error_sql


def test_unknown_functions_columns_and_paths_are_errors():
    with pytest.raises(SqlError, match="unknown or unsupported function FROBNICATE"):
        pipe("FROBNICATE($1:a)")
    with pytest.raises(SqlError, match=r"reads the record through \$1"):
        pipe("order_id")
    with pytest.raises(SqlError, match="one input column"):
        pipe("$2:a")
    with pytest.raises(SqlError, match="format"):
        pipe("TO_VARCHAR($1:a, 'YYYY')")
    with pytest.raises(SqlError, match="only has a meaning in a pipe"):
        query("$1:a")


def test_queries_use_sparks_variant_syntax():
    assert query("record_metadata:topic") == "SELECT (record_metadata:topic)"
    assert query("col:a.b::NUMBER") == "SELECT (CAST(col:a.b AS DECIMAL(38,0)))"
    assert query("col['k']") == "SELECT (col:k)"
    assert query("col['has cat']") == "SELECT (col:['has cat'])"
    assert query("col:arr[0]") == "SELECT (col:arr[0])"
    assert query("IFF(n = 1, 'a', 'b') AS x") == "SELECT (IF((n = 1), 'a', 'b')) AS x"
    assert query("TO_NUMBER(x)") == "SELECT (CAST(x AS DECIMAL(38,0)))"
    assert query("TRY_TO_NUMBER(x)") == "SELECT (try_cast(x AS DECIMAL(38,0)))"
    assert query("count(*) FROM t WHERE col:n = 1") == \
        "SELECT COUNT(*) FROM t WHERE ((CAST(col:n AS DOUBLE) = 1))"
