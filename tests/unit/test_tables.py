"""Table rules with no Spark: column mapping, JSON storage, creation by the first commit."""

from floeline.warehouse.tables import needs_column_mapping


def test_plain_symbol_and_non_ascii_names_need_no_mapping():
    assert not needs_column_mapping(["CITY", "Łułósżź", "a.b", "@&$#*", "x-y", 'q"uote', "日本"])


def test_space_and_delta_reserved_characters_need_mapping():
    for name in ["has cat", "a,b", "a;b", "a{b", "a}b", "a(b", "a)b", "a=b", "a\tb", "a\nb"]:
        assert needs_column_mapping(["CITY", name]), name


def test_no_names_need_no_mapping():
    assert not needs_column_mapping([])


def test_json_storage_keeps_the_semi_structured_type_declared():
    from floeline.records.columns import Column, stores_json
    from floeline.warehouse.tables import in_storage

    variant, obj = Column("PAYLOAD", "variant"), Column("O", "variant", declared="OBJECT")
    assert in_storage(variant, "variant") == variant
    assert in_storage(variant, "json") == Column("PAYLOAD", "string", declared="VARIANT")
    assert in_storage(obj, "json").declared == "OBJECT" and stores_json(in_storage(obj, "json"))
    assert in_storage(Column("N", "decimal(38,0)"), "json") == Column("N", "decimal(38,0)")
    assert not stores_json(Column("V", "string", declared="VARCHAR(10)"))


def test_only_a_table_of_plain_columns_is_created_by_its_first_commit():
    from floeline.records.columns import Column
    from floeline.warehouse.tables import NewTable, created_by_first_commit

    plain = [Column("RECORD_METADATA", "variant"), Column("N", "decimal(38,0)")]
    assert created_by_first_commit(plain) == NewTable(tuple(plain))
    # What CREATE TABLE sets up itself (table features, checks) keeps CREATE TABLE.
    assert created_by_first_commit(plain, auto_compact=True) is None
    assert created_by_first_commit(plain, primary_key=("n",)) is None
    assert created_by_first_commit([*plain, Column("has cat", "string")]) is None
    assert created_by_first_commit([*plain, Column("ID", "bigint", identity=(1, 1))]) is None
    assert created_by_first_commit([*plain, Column("S", "string", default="'x'")]) is None
    assert created_by_first_commit([*plain, Column("K", "string", nullable=False)]) is None
