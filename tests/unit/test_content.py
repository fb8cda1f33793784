"""The default pipe's pure rules: variant schema parsing, column types, paths."""

from floeline.records.content import (
    column_type_for, parse_object_schema, quote_column, sql_string, variant_path)


def test_parse_object_schema_reads_first_level_fields():
    s = "OBJECT<` @&$#* has Łułósżź`: BIGINT, a: BIGINT, arr: ARRAY<BIGINT>, `has cat`: BOOLEAN, " \
        "`it's`: BIGINT, nested: OBJECT<x: DECIMAL(3,1), y: ARRAY<OBJECT<z: STRING>>>, x: STRING>"
    assert parse_object_schema(s) == [
        (" @&$#* has Łułósżź", "BIGINT"), ("a", "BIGINT"), ("arr", "ARRAY<BIGINT>"),
        ("has cat", "BOOLEAN"), ("it's", "BIGINT"),
        ("nested", "OBJECT<x: DECIMAL(3,1), y: ARRAY<OBJECT<z: STRING>>>"), ("x", "STRING")]


def test_parse_object_schema_backtick_in_key_and_non_objects():
    assert parse_object_schema("OBJECT<`a``b`: STRING>") == [("a`b", "STRING")]
    assert parse_object_schema("ARRAY<BIGINT>") == []
    assert parse_object_schema("OBJECT<>") == []


def test_column_types_follow_the_spec():
    assert column_type_for("BIGINT") == "decimal(38,0)"
    assert column_type_for("DECIMAL(5,0)") == "decimal(38,0)"
    assert column_type_for("DECIMAL(5,2)") == "double"
    assert column_type_for("DOUBLE") == "double"
    assert column_type_for("STRING") == "string"
    assert column_type_for("BOOLEAN") == "boolean"
    assert column_type_for("ARRAY<BIGINT>") == "variant"
    assert column_type_for("OBJECT<a: BIGINT>") == "variant"
    assert column_type_for("VARIANT") == "variant"
    assert column_type_for("VOID") == "variant"


def test_paths_and_quoting():
    assert variant_path("has cat") == "'$[\\'has cat\\']'"
    assert variant_path("it's") == "'$[\"it\\'s\"]'"
    assert quote_column("a`b") == "`a``b`"
    assert sql_string("a\\b'") == "'a\\\\b\\''"


def test_parse_object_schema_quoted_nested_names_with_brackets():
    s = "OBJECT<attrs: OBJECT<`a>b`: BIGINT, `c(``d`: STRING>, id: BIGINT>"
    assert parse_object_schema(s) == [("attrs", "OBJECT<`a>b`: BIGINT, `c(``d`: STRING>"),
                                      ("id", "BIGINT")]


def test_keys_with_both_quotes_are_addressed_through_a_map():
    from floeline.records.content import key_value_sql

    assert variant_path("a'b\"c") is None
    assert "map<string,variant>" in key_value_sql("a'b\"c")
