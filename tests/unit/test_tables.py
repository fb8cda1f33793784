"""Which column names need Delta's column mapping (pure logic, no Spark)."""

from floeline.warehouse.tables import needs_column_mapping


def test_plain_symbol_and_non_ascii_names_need_no_mapping():
    assert not needs_column_mapping(["CITY", "Łułósżź", "a.b", "@&$#*", "x-y", 'q"uote', "日本"])


def test_space_and_delta_reserved_characters_need_mapping():
    for name in ["has cat", "a,b", "a;b", "a{b", "a}b", "a(b", "a)b", "a=b", "a\tb", "a\nb"]:
        assert needs_column_mapping(["CITY", name]), name


def test_no_names_need_no_mapping():
    assert not needs_column_mapping([])
