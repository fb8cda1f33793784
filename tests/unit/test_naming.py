"""Topic -> table naming, identifiers and snowflake.topic2table.map."""

import pytest

from floeline.errors import NamingError
from floeline.naming import (
    MAP_FORMAT,
    TopicTableMap,
    column_name_for_key,
    derive_table_name,
    is_valid_identifier,
    java_string_hashcode,
    normalize_identifier,
    table_for_topic,
)

# Expected values below came from Java 17's String.hashCode and Math.abs, printed by a
# throwaway `java Main.java` run over the same strings.
JAVA_HASHCODES = {
    "my-topic.data": 679517130,
    "123topic": -1800462787,
    "prod.*.events": -1511259116,
    "\u00e9v\u00e9nements-\U0001F389": 2012574296,  # "événements-🎉"
    "orders\U0001F680": 1236093832,  # "orders🚀"
    "t-21001ykk": -2147483648,  # Integer.MIN_VALUE
    "polygenelubricants": -2147483648,
    "a.b": 94741,
    "a-b": 94710,
    "": 0,
}


@pytest.mark.parametrize("name", ["orders", "_x", "ab", "a$b", "Orders_2024", "__"])
def test_valid_identifiers(name):
    assert is_valid_identifier(name)


@pytest.mark.parametrize("name", ["a", "_", "1abc", "$ab", "a-b", "a.b", "my topic", "ab\n", "", "caf\u00e9"])
def test_invalid_identifiers(name):
    assert not is_valid_identifier(name)


@pytest.mark.parametrize("text,expected", JAVA_HASHCODES.items())
def test_java_string_hashcode_matches_java(text, expected):
    assert java_string_hashcode(text) == expected


def test_hashcode_counts_a_non_bmp_character_as_two_utf16_units():
    # 🚀 is U+1F680 = surrogates D83D DE80; hashCode = h("orders") * 31^2 + 0xD83D * 31 + 0xDE80.
    by_hand = (java_string_hashcode("orders") * 31 * 31 + 0xD83D * 31 + 0xDE80) & 0xFFFFFFFF
    by_hand = by_hand - 2**32 if by_hand >= 2**31 else by_hand
    assert by_hand == java_string_hashcode("orders\U0001F680") == 1236093832


@pytest.mark.parametrize("topic,table", [
    ("orders", "ORDERS"),
    ("Orders_V2", "ORDERS_V2"),
    ("a$b", "A$B"),
])
def test_valid_topic_becomes_uppercase_table(topic, table):
    assert derive_table_name(topic) == table


# Derived names checked against the connector's algorithm run under Java 17.
@pytest.mark.parametrize("topic,table", [
    ("my-topic.data", "MY_TOPIC_DATA_679517130"),  # the documentation's example
    ("123topic", "_123TOPIC_1800462787"),  # digit first: "_" prefixed, the digit kept
    ("prod.*.events", "PROD_EVENTS_1511259116"),  # ".*" removed, hash of the original name
    ("\u00e9v\u00e9nements-\U0001F389", "__V_NEMENTS____2012574296"),  # emoji -> "__"
    ("orders\U0001F680", "ORDERS___1236093832"),
    ("t-21001ykk", "T_21001YKK_-2147483648"),  # Math.abs(Integer.MIN_VALUE) stays negative
    ("a.b", "A_B_94741"),
    ("a-b", "A_B_94710"),
])
def test_invalid_topic_is_sanitized_like_the_java_connector(topic, table):
    assert derive_table_name(topic) == table


@pytest.mark.parametrize("topic", ["et_orders", "Orders_V2", "my-topic.data", "123topic"])
def test_without_sanitization_the_topic_names_its_table_as_it_is(topic):
    # The 4.x connector's default: the topic's name, case kept (the connector quotes it).
    assert derive_table_name(topic, sanitize=False) == topic
    assert table_for_topic(topic, None, sanitize=False) == topic
    mapped = TopicTableMap.parse(f"{topic}:MAPPED")
    assert table_for_topic(topic, mapped, sanitize=False) == "MAPPED"  # the map still wins


def test_topic_that_is_only_wildcards_cannot_name_a_table():
    with pytest.raises(NamingError, match="nothing is left"):
        derive_table_name(".*")
    with pytest.raises(NamingError, match="empty topic"):
        derive_table_name("")


@pytest.mark.parametrize("text,name", [
    ("my_db", "MY_DB"),
    ("  Sales  ", "SALES"),
    ("x", "X"),
    ('"My Db"', "My Db"),
    ('"a""b"', 'a"b'),
    ('"with.dots-and spaces"', "with.dots-and spaces"),
])
def test_normalize_identifier(text, name):
    assert normalize_identifier(text) == name


@pytest.mark.parametrize("text,fragment", [
    ("", "empty identifier"),
    ("my-db", "not a valid unquoted identifier"),
    ('"abc', "no closing double quote"),
    ('"a"b"', "text after its closing quote"),
    ('""', "empty quoted name"),
])
def test_normalize_identifier_errors(text, fragment):
    with pytest.raises(NamingError, match=fragment):
        normalize_identifier(text)


@pytest.mark.parametrize("key,column", [
    ("city", "CITY"),
    ("isPaid", "ISPAID"),
    ("_x$1", "_X$1"),
    ("a", "A"),
    ("has cat", "has cat"),
    (" @&$#* has \u0141u\u0142\u00f3s\u017c\u017a", " @&$#* has \u0141u\u0142\u00f3s\u017c\u017a"),
    ("1abc", "1abc"),
    ("my-key", "my-key"),
])
def test_column_name_for_key(key, column):
    assert column_name_for_key(key) == column


# Keys read as SQL identifiers (column identifier normalization, Snowflake's
# SqlIdentifierNormalizer): quoted -> exact, unquoted -> uppercase.
@pytest.mark.parametrize("key,column", [
    ('"c"', "c"),
    ('"City"', "City"),
    ('"a""b"', 'a"b'),
    ('"has cat"', "has cat"),
    ("city", "CITY"),
    ("CITY", "CITY"),
    ("has cat", "HAS CAT"),
    ("has\\ cat", "HAS CAT"),
    ('"a"b"', '"A"B"'),  # a lone quote inside: not a quoted identifier
    ('""', '""'),
    ('"c', '"C'),
])
def test_column_name_for_key_normalized(key, column):
    assert column_name_for_key(key, normalize=True) == column


# --- snowflake.topic2table.map ---------------------------------------------------------


def test_map_direct_topics():
    m = TopicTableMap.parse("orders:ORDER_TABLE,customers:CUSTOMER_TABLE")
    assert m.table_for("orders") == "ORDER_TABLE"
    assert m.table_for("customers") == "CUSTOMER_TABLE"
    assert m.table_for("other") is None


def test_map_regex_is_a_full_match():
    m = TopicTableMap.parse(".*_cat:CAT_TABLE,.*_dog:DOG_TABLE")
    assert m.table_for("orange_cat") == "CAT_TABLE"
    assert m.table_for("calico_cat") == "CAT_TABLE"
    assert m.table_for("big_dog") == "DOG_TABLE"
    assert m.table_for("orange_cat_food") is None  # a search would match; a full match does not
    assert TopicTableMap.parse("orders:ORDERS").table_for("orders2") is None


def test_map_exact_key_is_tried_before_regex_matching():
    # "a+b" as a regex matches "ab", "aab", ... but not the text "a+b" itself.
    m = TopicTableMap.parse("a+b:PLUS_T")
    assert m.table_for("a+b") == "PLUS_T"
    assert m.table_for("aab") == "PLUS_T"


def test_map_many_topics_to_one_table_and_tables():
    m = TopicTableMap.parse("topic1:shared_table, topic2:shared_table, topic3:other_table")
    assert m.table_for("topic1") == m.table_for("topic2") == "SHARED_TABLE"
    assert m.table_for("topic3") == "OTHER_TABLE"
    assert m.tables == ("SHARED_TABLE", "OTHER_TABLE")


def test_map_quoted_names_keep_case_and_may_hold_separators():
    m = TopicTableMap.parse('orders:"My Orders", "topic:one":"table,one", ev:"say ""hi"""')
    assert m.table_for("orders") == "My Orders"
    assert m.table_for("topic:one") == "table,one"
    assert m.table_for("ev") == 'say "hi"'


def test_map_quoted_topic_may_hold_regex_syntax():
    m = TopicTableMap.parse('"(?:eu|us)_orders":ORDERS, "x{1,3}":XS')
    assert m.table_for("eu_orders") == "ORDERS"
    assert m.table_for("xxx") == "XS"


def test_map_trims_whitespace_and_accepts_a_trailing_comma():
    m = TopicTableMap.parse("  orders :  orders_t ,\n  refunds:REFUNDS_T , ")
    assert [(e.topic, e.table, e.index) for e in m.entries] == [
        ("orders", "ORDERS_T", 1), ("refunds", "REFUNDS_T", 2)]


def test_blank_map_is_empty():
    assert TopicTableMap.parse("   ").entries == ()


def test_table_for_topic_uses_map_then_derivation():
    m = TopicTableMap.parse("kafka-orders-topic:ORDERS")
    assert table_for_topic("kafka-orders-topic", m) == "ORDERS"
    assert table_for_topic("my-topic.data", m) == "MY_TOPIC_DATA_679517130"
    assert table_for_topic("clicks", None) == "CLICKS"


@pytest.mark.parametrize("text,entry,char,fragment", [
    ("aa:BB,,cc:DD", 2, 7, "empty entry"),
    (",aa:BB", 1, 1, "empty entry"),
    ("orders ORDERS", 1, 1, "missing ':'"),
    ("aa:BB, cc DD", 2, 8, "missing ':'"),
    (":BB", 1, 1, "empty topic"),
    ('"":BB', 1, 1, "empty topic"),
    ("aa:", 1, 4, "empty table"),
    ("aa:BB,aa:CC", 2, 7, "duplicate topic 'aa' (also entry 1)"),
    ('x.y:AA, "x.y":BB', 2, 9, "duplicate topic"),
    ("a[:BB", 1, 1, "not a valid regular expression"),
    ("aa:1table", 1, 4, "invalid table name '1table'"),
    ("aa:B", 1, 4, "at least 2 characters"),
    ("aa:my table", 1, 4, "invalid table name"),
    ('aa:"open', 1, 4, "no closing double quote"),
    ('"open:BB', 1, 1, "no closing double quote"),
    ('aa:"T" x', 1, 4, "text after the quoted table name"),
    ("(?:a|b)_x:TT", 1, 4, "put a topic or table that holds ':' in double quotes"),
    (".*_cat:CAT_T,orange.*:ORANGE_T", 2, 14, "'orange_cat'"),  # found by probing
    (".*:ALL_T, .*foo:FOO_T", 2, 11, "cannot overlap"),  # the Java connector's own test case
    ("orders:ORD_T, ord.*:ALL_T", 2, 15, "both match the topic 'orders'"),  # a key matches a regex
    ("a.*b:AB, a\\d+b:NUM", 2, 10, "cannot overlap"),
    ("x(a|b)+:XA, xb.*a:XB", 2, 13, "'xba'"),
])
def test_map_errors_name_entry_position_and_format(text, entry, char, fragment):
    with pytest.raises(NamingError) as info:
        TopicTableMap.parse(text)
    message = str(info.value)
    assert f"entry {entry} (character {char})" in message
    assert fragment in message
    assert MAP_FORMAT in message
    assert "snowflake.topic2table.map" in message


@pytest.mark.parametrize("text", [
    ".*_cat:CAT_T,.*_dog:DOG_T",
    "prod\\..*:PROD, dev\\..*:DEV",
    "orders:ORD_T, refunds:REF_T",
    "[0-9]+_n:NUM_T, [a-z]+_n:ALPHA_T",
])
def test_disjoint_maps_are_accepted(text):
    assert len(TopicTableMap.parse(text).entries) == 2
