"""When a micro-batch may take one pass, and what that pass checks (no Spark)."""

from floeline import jvm
from floeline.ingest import onepass as fastpath
from floeline.sources.base import BatchEnd
from floeline.sources.kafka import batch_end_from_offsets
from floeline.records.columns import Column, TableSchema

ORDERS = TableSchema((Column("RECORD_METADATA", "variant"), Column("ORDER_ID", "decimal(38,0)"),
                      Column("NAME", "string"), Column("PAID", "boolean"),
                      Column("TAGS", "variant")), True)


def test_plan_parses_known_keys_into_column_types():
    plan = fastpath.typed_plan(ORDERS, frozenset({"order_id", "name", "paid", "tags"}))
    assert plan is not None
    assert "`order_id` decimal(38,0)" in plan.json_schema and "`tags` variant" in plan.json_schema
    assert plan.json_schema.endswith(f"{fastpath.CORRUPT_FIELD} STRING")
    assert plan.columns[1] == "j.`order_id` AS `ORDER_ID`"
    # The record check rides in the first written column, so Spark cannot prune it.
    assert plan.columns[0].startswith("CASE WHEN value IS NULL") and "raise_error" in plan.columns[0]
    assert plan.columns[0].endswith("ELSE CAST(_meta AS variant) END AS `RECORD_METADATA`")
    # UTF-8 and unknown keys: the JVM check made for exactly this key set.
    check = jvm.known_keys_function(frozenset({"order_id", "name", "paid", "tags"}))
    assert f"NOT {check}(value)" in plan.check and f"{fastpath.CORRUPT_FIELD} IS NOT NULL" in plan.check
    assert plan.known_keys == frozenset({"order_id", "name", "paid", "tags"})


def test_each_key_set_has_its_own_check_function():
    one, other = frozenset({"a", "b"}), frozenset({"a", "b", "c"})
    assert jvm.known_keys_function(one) == jvm.known_keys_function(frozenset({"b", "a"}))
    assert jvm.known_keys_function(one) != jvm.known_keys_function(other)
    assert jvm.known_keys_function(one).isidentifier()


def test_from_json_is_as_strict_as_parse_json():
    sql = fastpath.from_json_sql("a BIGINT")
    assert "'allowNonNumericNumbers', 'false'" in sql and "'allowSingleQuotes', 'false'" in sql


def test_keys_missing_from_a_nullable_column_are_left_out_for_delta_to_fill():
    plan = fastpath.typed_plan(ORDERS, frozenset({"order_id"}))
    assert not any("`NAME`" in c for c in plan.columns)  # NULL, or an AUTOINCREMENT value
    # a DEFAULT column takes the general path, which fills in the default per record
    with_default = TableSchema((Column("N", "string", default="'x'"),), False)
    assert fastpath.typed_plan(with_default, frozenset({"n"})) is None


def test_headers_the_rules_change_send_a_record_to_the_general_path():
    plan = fastpath.typed_plan(ORDERS, frozenset({"order_id"}), "exists(headers, h -> true)")
    assert plan.check.endswith("OR exists(headers, h -> true)")


def test_general_path_is_needed_for():
    # two keys that differ only in case map to one column
    assert fastpath.typed_plan(ORDERS, frozenset({"name", "NAME"})) is None
    # a key without a column (evolution adds it, or the record is rejected)
    assert fastpath.typed_plan(ORDERS, frozenset({"order_id", "new_key"})) is None
    # a type from_json would read differently from the general path
    ts = TableSchema((Column("AT", "timestamp"),), True)
    assert fastpath.typed_plan(ts, frozenset({"at"})) is None
    # a NOT NULL column no key fills
    strict = TableSchema((Column("ID", "decimal(38,0)", nullable=False), Column("N", "string")), True)
    assert fastpath.typed_plan(strict, frozenset({"n"})) is None


def test_normalized_keys_name_their_columns():
    # column identifier normalization: "city" (quoted) -> city, id -> ID
    table = TableSchema((Column("ID", "decimal(38,0)"), Column("city", "string")), False)
    plan = fastpath.typed_plan(table, frozenset({"id", '"city"'}), normalize=True)
    assert plan.columns[1].startswith('j.`"city"` AS `city`')
    # without normalization "city" (quoted) is a key of its own: no column for it
    assert fastpath.typed_plan(table, frozenset({"id", '"city"'})) is None


def test_not_null_columns_are_checked_per_record():
    strict = TableSchema((Column("ID", "decimal(38,0)", nullable=False),), False)
    plan = fastpath.typed_plan(strict, frozenset({"id"}))
    assert "j.`id` IS NULL" in plan.check
    # a key without a column while evolution is off: the general path rejects or ignores it
    assert fastpath.typed_plan(strict, frozenset({"id", "no_column"})) is None


def test_batch_end_reads_sparks_offset_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"orders":{"0":12,"1":0}}\n')
    entry = fastpath.offset_log_entry(str(tmp_path), 3)
    # next offset 12 -> the batch's last position is 11; partition 1 has nothing yet
    assert batch_end_from_offsets(entry) == BatchEnd({"orders/0": "11"})
    assert fastpath.offset_log_entry(str(tmp_path), 4) is None
    assert batch_end_from_offsets("not json") is None


def test_json_stored_variant_columns_parse_as_variant_and_write_json():
    schema = TableSchema((Column("RECORD_METADATA", "string", declared="VARIANT"),
                          Column("N", "decimal(38,0)"), Column("P", "string", declared="VARIANT")), True)
    plan = fastpath.typed_plan(schema, frozenset({"n", "p"}))
    assert "`p` variant" in plan.json_schema
    # the batch builds `_meta` as JSON text for such a column (metadata.py's as_json)
    assert plan.columns[0].endswith("ELSE _meta END AS `RECORD_METADATA`")
    assert plan.columns[2] == "to_json(CASE WHEN NOT is_variant_null(j.`p`) THEN j.`p` END) AS `P`"
    # OBJECT and ARRAY have conversion rules: the general path applies them.
    with_object = TableSchema((Column("P", "string", declared="OBJECT"),), True)
    assert fastpath.typed_plan(with_object, frozenset({"p"})) is None


def test_the_more_tables_learn_their_keys_at_once_the_fewer_records_each_samples():
    from floeline.ingest.onepass_tables import sample_per_channel

    assert sample_per_channel(1, 1) == 1000  # one table: one pass's own sample
    assert sample_per_channel(1, 4) == 250
    assert sample_per_channel(100, 4) == 25  # 100 tables x 100 records
    assert sample_per_channel(1000, 1) == 100  # never fewer than 100 a table
    assert sample_per_channel(3, 3) == 334  # a third of 1000, rounded up
