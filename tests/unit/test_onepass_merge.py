"""When a batch of change events may take the one-pass MERGE, and what it checks (no Spark)."""

from floeline import jvm
from floeline.ingest import onepass_merge
from floeline.ingest.onepass import CORRUPT_FIELD
from floeline.records.columns import Column, TableSchema

CUSTOMERS = TableSchema((Column("RECORD_METADATA", "variant"), Column("ID", "decimal(38,0)", nullable=False),
                         Column("NAME", "string"), Column("RATING", "double")), True)
IMAGES = frozenset({"id", "name", "rating"})


def plan(schema=CUSTOMERS, key=("id",), images=IMAGES, delete_enabled=True):
    return onepass_merge.merge_plan(schema, key, images, delete_enabled)


def test_the_after_image_is_read_into_the_columns_and_the_key_from_the_record_key():
    p = plan()
    assert p is not None
    assert "after STRUCT<`name`: string, `rating`: double>" in p.value_schema
    assert p.value_schema.endswith(f"{CORRUPT_FIELD} STRING") and "op STRING" in p.value_schema
    assert p.key_schema == f"`id` decimal(38,0), {CORRUPT_FIELD} STRING"
    assert p.keys == [("ID", "_c1")]
    by_column = {c: v for c, _s, v in p.columns}
    assert by_column["ID"] == "k.`id`" and by_column["NAME"] == "j.after.`name`"
    assert by_column["RECORD_METADATA"] == "_meta"  # made after the dedupe, with the change's op and ts_ms


def test_record_metadata_gets_the_changes_op_always_and_its_ts_ms_when_it_has_one():
    from floeline.config import MetadataFlags
    from floeline.records.metadata import kafka_metadata_sql
    sql = kafka_metadata_sql(MetadataFlags(), "0", extra=onepass_merge.CHANGE_FIELDS)
    branches = sql.split(" WHEN ")[1:]
    assert branches and all("'op', _op" in b for b in branches)
    assert sum("'ts_ms', _ts_ms" in b for b in branches) * 2 == len(branches)
    assert all(("'ts_ms', _ts_ms" in b) == ("_ts_ms IS NOT NULL" in b) for b in branches)


def test_the_check_sends_every_unusual_record_to_the_general_path():
    p = plan()
    # Debezium's envelope fields only, valid UTF-8 (the JVM check), a known op ...
    assert f"{jvm.known_keys_function(onepass_merge.ENVELOPE_FIELDS)}(value)" in p.unusual
    assert "j.op NOT IN ('c', 'u', 'r', 'd')" in p.unusual
    # ... an after image with exactly the fields the table's images had, a key with the key's fields
    after, key = p.exact_fields
    assert after == ("after", IMAGES) and key == (None, frozenset({"id"}))
    assert f"NOT {jvm.exact_fields_function(*after)}(value)" in p.unusual
    assert f"NOT {jvm.exact_fields_function(*key)}(key)" in p.unusual
    assert "k.`id` IS NULL" in p.unusual
    # a tombstone is a delete only with delete.enabled=true
    assert "CASE WHEN _tombstone THEN false" in p.unusual
    assert "CASE WHEN _tombstone THEN true" in plan(delete_enabled=False).unusual


def test_tables_one_pass_cannot_write_take_the_general_path():
    assert plan(key=()) is None  # no key known yet
    assert plan(images=IMAGES | {"email"}) is None  # a field without a column: evolution
    assert plan(images=frozenset({"name", "rating"})) is None  # the images lack the key
    timestamped = TableSchema(CUSTOMERS.columns + (Column("SEEN", "timestamp"),), True)
    assert plan(timestamped, images=IMAGES | {"seen"}) is None  # a type from_json does not read alike
    variant_key = TableSchema((Column("ID", "variant", nullable=False), Column("NAME", "string")), True)
    assert plan(variant_key, images=frozenset({"id", "name"})) is None
    required = TableSchema(CUSTOMERS.columns + (Column("CODE", "string", nullable=False),), True)
    assert plan(required) is None  # a NOT NULL column the changes never fill
