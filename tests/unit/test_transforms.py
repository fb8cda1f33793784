"""Kafka Connect SMTs and predicates (records/transforms/): semantics of Kafka 3.9's
schemaless transforms, the error messages, and config validation."""

import pickle
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from floeline.config.decoding import SUPPORTED_PREDICATES, SUPPORTED_TRANSFORMS
from floeline.errors import ConfigError, RecordError, TransformError
from floeline.records.record import Record
from floeline.records.transforms.chain import TransformChain, transform_chain

T = "org.apache.kafka.connect.transforms."
P = T + "predicates."
UTC = timezone.utc


def rec(value=None, key=None, topic="orders", headers=(), ts=1_700_000_000_123, offset=42):
    return Record(topic=topic, partition=3, offset=offset, timestamp_ms=ts, timestamp_type=0,
                  key=key, value=value, headers=list(headers))


def chain(type_, **options):
    """A one-transform chain; option names use _ for dots (static_field -> static.field)."""
    settings = {"transforms": "t", "transforms.t.type": type_ if "." in type_ else T + type_}
    settings.update({f"transforms.t.{k.replace('__', '$').replace('_', '.')}": v for k, v in options.items()})
    return transform_chain(settings)


def apply(type_, record, **options):
    return chain(type_, **options).apply(record)


def config_problems(settings) -> str:
    with pytest.raises(ConfigError) as info:
        transform_chain(settings)
    return str(info.value)


# --- chain basics --------------------------------------------------------------------


def test_no_transforms_is_an_empty_chain_that_returns_the_record():
    c = transform_chain({"name": "x", "topics": "a"})
    assert c.empty and c.describe() == []
    r = rec({"a": 1})
    assert c.apply(r) is r


def test_chain_of_several_transforms_runs_in_order():
    c = transform_chain({
        "transforms": "flat, rename ,cast,insert,route",
        "transforms.flat.type": T + "Flatten$Value", "transforms.flat.delimiter": "_",
        "transforms.rename.type": T + "ReplaceField$Value", "transforms.rename.renames": "user_id:uid",
        "transforms.rename.exclude": "secret",
        "transforms.cast.type": T + "Cast$Value", "transforms.cast.spec": "uid:int64,amount:float64",
        "transforms.insert.type": T + "InsertField$Value", "transforms.insert.topic.field": "src!",
        "transforms.route.type": T + "RegexRouter", "transforms.route.regex": "(.*)s",
        "transforms.route.replacement": "$1_v2",
    })
    assert not c.empty
    assert c.describe() == ["flat: Flatten$Value", "rename: ReplaceField$Value", "cast: Cast$Value",
                            "insert: InsertField$Value", "route: RegexRouter"]
    out = c.apply(rec({"user": {"id": "7"}, "amount": "9.5", "secret": "x"}))
    assert out.value == {"uid": 7, "amount": 9.5, "src": "orders"}
    assert out.topic == "order_v2"


def test_chain_never_mutates_the_input_record():
    value = {"a": {"b": 1}, "c": "1"}
    r = rec(value)
    transform_chain({"transforms": "f,c", "transforms.f.type": T + "Flatten$Value",
                     "transforms.c.type": T + "Cast$Value", "transforms.c.spec": "c:int32"}).apply(r)
    assert r.value == {"a": {"b": 1}, "c": "1"} and r.value is value


def test_chain_is_picklable_and_still_works_after():
    c = transform_chain({
        "transforms": "ts,route,drop", "predicates": "isTomb,isOrders",
        "transforms.ts.type": T + "TimestampConverter$Value", "transforms.ts.field": "at",
        "transforms.ts.target.type": "string", "transforms.ts.format": "yyyy-MM-dd",
        "transforms.route.type": T + "RegexRouter", "transforms.route.regex": "(?<name>o.*)",
        "transforms.route.replacement": "x_${name}", "transforms.route.predicate": "isOrders",
        "transforms.drop.type": T + "Filter", "transforms.drop.predicate": "isTomb",
        "predicates.isTomb.type": P + "RecordIsTombstone",
        "predicates.isOrders.type": P + "TopicNameMatches", "predicates.isOrders.pattern": "orders",
    })
    copy = pickle.loads(pickle.dumps(c))
    out = copy.apply(rec({"at": 0}))
    assert out.value == {"at": "1970-01-01"} and out.topic == "x_orders"
    assert copy.apply(rec(None)) is None


def test_filter_stops_the_chain():
    c = transform_chain({"transforms": "drop,hoist", "transforms.drop.type": "Filter",
                         "transforms.hoist.type": T + "HoistField$Value", "transforms.hoist.field": "f"})
    assert c.apply(rec({"a": 1})) is None


# --- HoistField ----------------------------------------------------------------------


def test_hoist_field_wraps_value_and_key_and_null():
    assert apply("HoistField$Value", rec("text"), field="content").value == {"content": "text"}
    assert apply("HoistField$Value", rec([1, 2]), field="c").value == {"c": [1, 2]}
    assert apply("HoistField$Value", rec(None), field="c").value == {"c": None}  # Kafka wraps nulls too
    out = apply("HoistField$Key", rec({"v": 1}, key="k1"), field="id")
    assert out.key == {"id": "k1"} and out.value == {"v": 1}


# --- ExtractField --------------------------------------------------------------------


def test_extract_field():
    assert apply("ExtractField$Value", rec({"a": {"b": 1}, "c": 2}), field="a").value == {"b": 1}
    assert apply("ExtractField$Value", rec({"c": 2}), field="a").value is None
    assert apply("ExtractField$Value", rec(None), field="a").value is None
    assert apply("ExtractField$Key", rec(1, key={"id": 5}), field="id").key == 5
    assert apply("ExtractField$Value", rec({"a.b": 3, "a": {"b": 4}}), field="a.b").value == 3  # V1


def test_extract_field_v2_paths():
    value = {"a": {"b": {"c": 1}}, "x.y": {"z": 2}, "k": 5}
    assert apply("ExtractField$Value", rec(value), field="a.b.c", field_syntax_version="V2").value == 1
    assert apply("ExtractField$Value", rec(value), field="`x.y`.z", field_syntax_version="v2").value == 2
    assert apply("ExtractField$Value", rec(value), field="a.q.c", field_syntax_version="V2").value is None
    with pytest.raises(TransformError, match=r"nested field access\], found: int"):
        apply("ExtractField$Value", rec(value), field="k.c", field_syntax_version="V2")


def test_extract_field_on_non_map_names_alias_class_and_record():
    with pytest.raises(TransformError) as info:
        apply("ExtractField$Value", rec("plain text"), field="a")
    err = info.value
    assert isinstance(err, RecordError)
    assert str(err) == ("record topic=orders partition=3 offset=42 stage=transform: transform 't' "
                        "(ExtractField$Value): Only Map objects supported in absence of schema for "
                        "[field extraction], found: str")
    assert (err.alias, err.transform, err.topic, err.offset) == ("t", "ExtractField$Value", "orders", 42)
    assert err.reason.startswith("transform 't' (ExtractField$Value): Only Map")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.alias == "t"


# --- InsertField ---------------------------------------------------------------------


def test_insert_field_all_sources():
    out = apply("InsertField$Value", rec({"a": 1}), topic_field="t!", partition_field="p?",
                offset_field="o", timestamp_field="ts", static_field="src", static_value="kafka")
    assert out.value == {"a": 1, "t": "orders", "p": 3, "o": 42, "ts": 1_700_000_000_123, "src": "kafka"}


def test_insert_field_skips_missing_timestamp_and_keeps_tombstones():
    assert apply("InsertField$Value", rec({}, ts=None), timestamp_field="ts").value == {}
    assert apply("InsertField$Value", rec(None), topic_field="t").value is None
    assert apply("InsertField$Key", rec(1, key={"k": 1}), offset_field="o").key == {"k": 1, "o": 42}
    with pytest.raises(TransformError, match=r"\[field insertion\], found: list"):
        apply("InsertField$Value", rec([1]), topic_field="t")


# --- ReplaceField --------------------------------------------------------------------


def test_replace_field_include_exclude_renames():
    v = {"a": 1, "b": 2, "c": 3}
    assert apply("ReplaceField$Value", rec(v), include="a, b").value == {"a": 1, "b": 2}
    assert apply("ReplaceField$Value", rec(v), exclude="b").value == {"a": 1, "c": 3}
    assert apply("ReplaceField$Value", rec(v), include="a,b", exclude="b").value == {"a": 1}
    assert apply("ReplaceField$Value", rec(v), renames="a:x,c:y").value == {"x": 1, "b": 2, "y": 3}
    assert apply("ReplaceField$Value", rec(None), include="a").value is None
    assert apply("ReplaceField$Key", rec(1, key={"a": 1, "b": 2}), exclude="a").key == {"b": 2}


def test_replace_field_deprecated_whitelist_blacklist():
    v = {"a": 1, "b": 2, "c": 3}
    assert apply("ReplaceField$Value", rec(v), whitelist="a,c").value == {"a": 1, "c": 3}
    assert apply("ReplaceField$Value", rec(v), blacklist="a").value == {"b": 2, "c": 3}
    assert apply("ReplaceField$Value", rec(v), whitelist="a", include="b").value == {"b": 2}


# --- MaskField -----------------------------------------------------------------------


def test_mask_field_empty_values_per_type():
    v = {"i": 5, "f": 1.5, "s": "secret", "b": True, "l": [1], "m": {"x": 1}, "d": Decimal("3.2"),
         "t": datetime(2024, 1, 1, tzinfo=UTC), "day": date(2024, 1, 1), "n": None, "keep": 1}
    out = apply("MaskField$Value", rec(v), fields="i,f,s,b,l,m,d,t,day,n,missing").value
    assert out == {"i": 0, "f": 0.0, "s": "", "b": False, "l": [], "m": {}, "d": Decimal(0),
                   "t": datetime(1970, 1, 1, tzinfo=UTC), "day": date(1970, 1, 1), "n": None,
                   "keep": 1, "missing": None}  # Kafka sets a missing masked field to null
    assert type(out["f"]) is float and type(out["i"]) is int


def test_mask_field_replacement():
    v = {"i": 5, "f": 1.5, "s": "secret", "d": Decimal("1.1")}
    out = apply("MaskField$Value", rec(v), fields="i,f,s,d", replacement="9").value
    assert out == {"i": 9, "f": 9.0, "s": "9", "d": Decimal(9)}
    assert apply("MaskField$Value", rec({"s": "x"}), fields="s", replacement="***").value == {"s": "***"}
    with pytest.raises(TransformError, match=r"cannot mask field 'i': replacement '\*\*\*' is not a number"):
        apply("MaskField$Value", rec({"i": 1}), fields="i", replacement="***")
    with pytest.raises(TransformError, match="cannot mask field 'b' of type bool with a custom replacement"):
        apply("MaskField$Value", rec({"b": True}), fields="b", replacement="x")


def test_mask_field_refuses_tombstones_like_kafka():
    with pytest.raises(TransformError, match="found: null .*RecordIsTombstone"):
        apply("MaskField$Value", rec(None), fields="a")
    assert apply("MaskField$Key", rec(None, key={"a": "k"}), fields="a").key == {"a": ""}


# --- Cast ----------------------------------------------------------------------------


@pytest.mark.parametrize("value,target,expected", [
    ("42", "int32", 42), ("-7", "int8", -7), (300, "int8", 44), (70000, "int16", 4464),
    (2**40 + 5, "int32", 5), (3.99, "int32", 3), (-3.99, "int64", -3), (1e20, "int32", 2**31 - 1),
    (float("nan"), "int64", 0), (True, "int32", 1), (Decimal("12.7"), "int64", 12),
    ("1.5", "float64", 1.5), (" 2.5e1d ", "float64", 25.0), (0.1, "float32", 0.1),
    (1 / 3, "float32", 0.33333334), (7, "float64", 7.0), (False, "float32", 0.0),
    ("TRUE", "boolean", True), ("yes", "boolean", False), (0.5, "boolean", False), (2, "boolean", True),
    (True, "string", "true"), (12, "string", "12"), (1.0, "string", "1.0"), (1e20, "string", "1.0E20"),
    (0.0001, "string", "1.0E-4"), (1234567.5, "string", "1234567.5"), (b"\x00\xff", "string", "AP8="),
    (Decimal("1.50"), "string", "1.50"), (datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), "string",
                                          "2024-05-06T07:08:09.123Z"),
    (date(2024, 5, 6), "string", "2024-05-06"), (datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), "int64", 1000),
    (date(1970, 1, 11), "int32", 10),
])
def test_cast_whole_value(value, target, expected):
    out = apply("Cast$Value", rec(value), spec=target).value
    assert out == expected and type(out) is type(expected)


def test_cast_fields_and_nulls():
    out = apply("Cast$Value", rec({"age": "31", "ok": 1, "n": None, "x": "keep"}),
                spec="age:int32, ok:boolean,n:string,gone:int8").value
    assert out == {"age": 31, "ok": True, "n": None, "x": "keep", "gone": None}
    assert apply("Cast$Value", rec(None), spec="a:int8").value is None
    assert apply("Cast$Key", rec(1, key="5"), spec="int64").key == 5


@pytest.mark.parametrize("value,spec,reason", [
    ({"age": "abc"}, "age:int32", "cannot cast field 'age' value 'abc' to int32: not a whole number"),
    ({"age": "300"}, "age:int8", "cannot cast field 'age' value '300' to int8: out of range for int8"),
    ({"age": "1.5"}, "age:int32", "not a whole number"),
    ({"f": "x1"}, "f:float64", "cannot cast field 'f' value 'x1' to float64: not a number"),
    ({"m": {"a": 1}}, "m:string", "Cast does not support casting from a map"),
    ({"l": [1]}, "l:int8", "Cast does not support casting from an array"),
    ({"b": b"1"}, "b:int32", "binary values can only be cast to string"),
    ("abc", "int64", "cannot cast value 'abc' to int64"),
])
def test_cast_errors_name_the_field_and_value(value, spec, reason):
    with pytest.raises(TransformError) as info:
        apply("Cast$Value", rec(value), spec=spec)
    assert "transform 't' (Cast$Value): " in str(info.value) and reason in str(info.value)


def test_cast_needs_a_map_for_field_casts():
    with pytest.raises(TransformError, match=r"\[cast types\], found: int"):
        apply("Cast$Value", rec(5), spec="a:int8")


# --- Flatten -------------------------------------------------------------------------


def test_flatten():
    v = {"a": {"b": 1, "c": {"d": [1, {"e": 2}]}, "empty": {}}, "f": None, "g": "x"}
    assert apply("Flatten$Value", rec(v)).value == {"a.b": 1, "a.c.d": [1, {"e": 2}], "f": None, "g": "x"}
    assert apply("Flatten$Value", rec(v), delimiter="_").value["a_c_d"] == [1, {"e": 2}]
    assert apply("Flatten$Value", rec(None)).value is None
    assert apply("Flatten$Key", rec(1, key={"k": {"id": 1}})).key == {"k.id": 1}
    with pytest.raises(TransformError, match=r"\[flattening\], found: str"):
        apply("Flatten$Value", rec("x"))


# --- TimestampConverter --------------------------------------------------------------

MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z
DT = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


@pytest.mark.parametrize("target,options,expected", [
    ("unix", {}, MS),
    ("unix", {"unix_precision": "seconds"}, MS // 1000),
    ("unix", {"unix_precision": "microseconds"}, MS * 1000),
    ("unix", {"unix_precision": "nanoseconds"}, MS * 1_000_000),
    ("Timestamp", {}, DT),
    ("Date", {}, date(2023, 11, 14)),
    ("Time", {}, datetime(1970, 1, 1, 22, 13, 20, 123000, tzinfo=UTC)),
    ("string", {"format": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"}, "2023-11-14T22:13:20.123Z"),
    ("string", {"format": "EEE, d MMM yy hh:mm a z"}, "Tue, 14 Nov 23 10:13 PM UTC"),
    ("string", {"format": "EEEE MMMM dd'th' ''yyyy HHmmssSSS Z D u k K"},
     "Tuesday November 14th '2023 221320123 +0000 318 2 22 10"),
])
def test_timestamp_converter_targets_from_a_datetime(target, options, expected):
    out = apply("TimestampConverter$Value", rec({"at": DT, "x": 1}), field="at", target_type=target,
                **options).value
    assert out == {"at": expected, "x": 1} and type(out["at"]) is type(expected)


@pytest.mark.parametrize("value,options,expected_ms", [
    (MS, {}, MS),
    (MS // 1000, {"unix_precision": "seconds"}, MS // 1000 * 1000),
    (MS * 1000 + 999, {"unix_precision": "microseconds"}, MS),
    (-1_500_000, {"unix_precision": "microseconds"}, -1500),
    ("2023-11-14 22:13:20.123", {"format": "yyyy-MM-dd HH:mm:ss.SSS"}, MS),
    ("2023-11-14T23:13:20.123+01:00", {"format": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"}, MS),
    ("14/Nov/2023:10:13:20.123 PM GMT", {"format": "dd/MMM/yyyy:hh:mm:ss.SSS a z"}, MS),
    ("20231114221320123", {"format": "yyyyMMddHHmmssSSS"}, MS),
    ("2023-11-14trailing", {"format": "yyyy-MM-dd"}, 1_699_920_000_000),  # Java ignores trailing text
    ("2023-13-01", {"format": "yyyy-MM-dd"}, 1_704_067_200_000),  # lenient: month 13 = next January
    (DT, {}, MS),
    (date(2023, 11, 14), {}, 1_699_920_000_000),
])
def test_timestamp_converter_inputs(value, options, expected_ms):
    out = apply("TimestampConverter$Value", rec(value), target_type="Timestamp", **options).value
    assert out == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=expected_ms)


def test_timestamp_converter_nulls_and_missing_fields():
    assert apply("TimestampConverter$Value", rec(None), target_type="unix").value is None
    out = apply("TimestampConverter$Value", rec({"a": 1}), field="at", target_type="Timestamp").value
    assert out == {"a": 1, "at": None}
    assert apply("TimestampConverter$Key", rec(1, key=0), target_type="Date").key == date(1970, 1, 1)


def test_timestamp_converter_two_digit_years_are_near_today():
    out = apply("TimestampConverter$Value", rec("01-02-24"), target_type="Date", format="dd-MM-yy").value
    assert out == date(2024, 2, 1)


@pytest.mark.parametrize("value,options,reason", [
    ("14.11.2023", {"format": "yyyy-MM-dd"},
     "field 'at': Could not parse timestamp: value (14.11.2023) does not match pattern (yyyy-MM-dd)"),
    ("2023-11-14", {}, "set format to its SimpleDateFormat pattern"),
    (1.5, {}, "TimestampConverter does not support float values as timestamps"),
    (True, {}, "does not support bool values"),
])
def test_timestamp_converter_errors(value, options, reason):
    with pytest.raises(TransformError) as info:
        apply("TimestampConverter$Value", rec({"at": value}), field="at", target_type="unix", **options)
    assert "transform 't' (TimestampConverter$Value): " in str(info.value) and reason in str(info.value)


# --- ValueToKey, RegexRouter, TimestampRouter, headers ----------------------------------


def test_value_to_key():
    out = apply("ValueToKey", rec({"id": 1, "org": "a", "x": 2}, key="old"), fields="id,org,nope")
    assert out.key == {"id": 1, "org": "a", "nope": None} and out.value == {"id": 1, "org": "a", "x": 2}
    with pytest.raises(TransformError, match=r"copying fields from value to key\], found: null"):
        apply(T + "ValueToKey", rec(None), fields="id")


def test_regex_router_full_match_and_groups():
    assert apply("RegexRouter", rec(topic="db.inventory.orders"), regex=r"db\.(\w+)\.(\w+)",
                 replacement="$2_from_$1").topic == "orders_from_inventory"
    assert apply("RegexRouter", rec(topic="xorders"), regex="orders", replacement="o").topic == "xorders"
    assert apply("RegexRouter", rec(topic="a1"), regex="a(\\d)", replacement="\\$$1").topic == "$1"
    assert apply("RegexRouter", rec(topic="ab"), regex="a|ab", replacement="X").topic == "Xb"  # replaceFirst


def test_timestamp_router_and_headers():
    assert apply("TimestampRouter", rec()).topic == "orders-20231114"
    assert apply("TimestampRouter", rec(), topic_format="${topic}_${timestamp}",
                 timestamp_format="yyyy_MM").topic == "orders_2023_11"
    with pytest.raises(TransformError, match="has no timestamp"):
        apply("TimestampRouter", rec(ts=None))
    hs = [("a", b"1"), ("b", None), ("a", b"2")]
    assert apply("DropHeaders", rec(headers=hs), headers="a").headers == [("b", None)]
    assert apply("InsertHeader", rec(headers=hs), header="c", value_literal="v").headers[-1] == ("c", "v")


# --- predicates ----------------------------------------------------------------------


def gated(predicate_type, negate=None, **predicate_options):
    settings = {"transforms": "drop", "transforms.drop.type": T + "Filter",
                "transforms.drop.predicate": "p", "predicates": "p", "predicates.p.type": predicate_type}
    if negate is not None:
        settings["transforms.drop.negate"] = negate
    settings.update({f"predicates.p.{k}": v for k, v in predicate_options.items()})
    return transform_chain(settings)


def test_topic_name_matches_full_match():
    c = gated(P + "TopicNameMatches", pattern="ord.*")
    assert c.apply(rec(topic="orders")) is None
    assert c.apply(rec(topic="x_orders")) is not None
    assert c.describe() == ["drop: Filter (when p)"]


def test_has_header_key_and_negate():
    c = gated("HasHeaderKey", name="skip")
    assert c.apply(rec(headers=[("skip", None)])) is None
    assert c.apply(rec(headers=[("other", b"")])) is not None
    keep_only_marked = gated(P + "HasHeaderKey", negate=" TRUE", name="keep")
    assert keep_only_marked.apply(rec(headers=[("keep", b"1")])) is not None
    assert keep_only_marked.apply(rec()) is None
    assert keep_only_marked.describe() == ["drop: Filter (when not p)"]


def test_record_is_tombstone_gates_a_value_transform():
    c = transform_chain({
        "transforms": "mask", "predicates": "tomb",
        "transforms.mask.type": T + "MaskField$Value", "transforms.mask.fields": "pw",
        "transforms.mask.predicate": "tomb", "transforms.mask.negate": "true",
        "predicates.tomb.type": P + "RecordIsTombstone"})
    assert c.apply(rec(None)).value is None
    assert c.apply(rec({"pw": "x"})).value == {"pw": ""}


# --- config validation ---------------------------------------------------------------


def test_every_listed_class_is_supported():
    for name in ("HoistField$Value", "HoistField$Key", "ExtractField$Value", "InsertField$Key",
                 "ReplaceField$Value", "MaskField$Value", "Cast$Key", "Flatten$Value",
                 "TimestampConverter$Value", "ValueToKey", "RegexRouter", "Filter"):
        assert T + name in SUPPORTED_TRANSFORMS
    assert set(SUPPORTED_PREDICATES) == {P + "TopicNameMatches", P + "HasHeaderKey", P + "RecordIsTombstone"}


def test_config_errors_are_reported_together():
    text = config_problems({
        "transforms": "hoist,cast,bad,nokey,abstract,ts,route,mask,gate,neg",
        "transforms.hoist.type": T + "HoistField$Value",
        "transforms.cast.type": T + "Cast$Value", "transforms.cast.spec": "age:int33",
        "transforms.bad.type": T + "HoistFeld$Value",
        "transforms.abstract.type": T + "ExtractField",
        "transforms.ts.type": T + "TimestampConverter$Value", "transforms.ts.target.type": "timestamp",
        "transforms.route.type": T + "RegexRouter", "transforms.route.regex": "(a",
        "transforms.route.replacement": "x",
        "transforms.mask.type": T + "MaskField$Value", "transforms.mask.feilds": "a",
        "transforms.gate.type": T + "Filter", "transforms.gate.predicate": "nope",
        "transforms.neg.type": T + "Filter", "transforms.neg.negate": "true",
    })
    assert text.startswith("invalid transforms config (11 problems):")
    for expected in [
        "missing required setting 'transforms.hoist.field' for transform 'hoist' (HoistField$Value)",
        "transforms.cast.spec='age:int33' names an unknown type 'int33'; supported types: int8, int16",
        "transforms.bad.type=org.apache.kafka.connect.transforms.HoistFeld$Value: unknown transform class "
        "for alias 'bad' (did you mean org.apache.kafka.connect.transforms.HoistField$Value?); floeline "
        "supports org.apache.kafka.connect.transforms.{Cast$Key/$Value",
        "missing setting 'transforms.nokey.type' for the transform alias 'nokey' listed in transforms",
        "transforms.abstract.type=org.apache.kafka.connect.transforms.ExtractField: transform 'abstract' "
        "must name the $Key or $Value variant, e.g. org.apache.kafka.connect.transforms.ExtractField$Value",
        "transforms.ts.target.type='timestamp' is not valid; accepted values: string, unix, Date, Time, "
        "Timestamp (transform 'ts' (TimestampConverter$Value))",
        "transforms.route.regex='(a' is not a valid regular expression",
        "unknown setting 'transforms.mask.feilds' for transform 'mask' (MaskField$Value); did you mean "
        "'transforms.mask.fields'?",
        "missing required setting 'transforms.mask.fields'",
        "transforms.gate.predicate='nope' names a predicate that is not listed in predicates (it lists: "
        "nothing)",
        "transforms.neg.negate is set but there is no transforms.neg.predicate",
    ]:
        assert expected in text, expected


@pytest.mark.parametrize("options,expected", [
    ({"transforms.t.type": T + "Cast$Value", "transforms.t.spec": "int8,a:int16"},
     "mixes a whole-value type with other casts"),
    ({"transforms.t.type": T + "Cast$Value", "transforms.t.spec": ""}, "must name at least one field"),
    ({"transforms.t.type": T + "Cast$Value", "transforms.t.spec": "a:b:int8"}, "is not a valid cast"),
    ({"transforms.t.type": T + "ReplaceField$Value", "transforms.t.renames": "a:b,c"},
     "transforms.t.renames='c' is not a valid rename"),
    ({"transforms.t.type": T + "InsertField$Value"}, "inserts nothing"),
    ({"transforms.t.type": T + "InsertField$Value", "transforms.t.static.field": "s"},
     "missing setting 'transforms.t.static.value'"),
    ({"transforms.t.type": T + "MaskField$Value", "transforms.t.fields": "a",
      "transforms.t.replacement": " "}, "transforms.t.replacement='' must not be empty"),
    ({"transforms.t.type": T + "ExtractField$Value", "transforms.t.field": "`a.b",
      "transforms.t.field.syntax.version": "V2"}, "incomplete backtick pair"),
    ({"transforms.t.type": T + "ExtractField$Value", "transforms.t.field": "a",
      "transforms.t.field.syntax.version": "V3"}, "accepted values: V1, V2"),
    ({"transforms.t.type": T + "TimestampConverter$Value", "transforms.t.target.type": "string"},
     "target.type=string needs a SimpleDateFormat pattern"),
    ({"transforms.t.type": T + "TimestampConverter$Value", "transforms.t.target.type": "unix",
      "transforms.t.format": "YYYY-MM-dd"}, "pattern letter 'Y' (week year (did you mean y, the year?))"),
    ({"transforms.t.type": T + "TimestampConverter$Value", "transforms.t.target.type": "unix",
      "transforms.t.format": "yyyy-'MM"}, "unterminated quote"),
    ({"transforms.t.type": T + "TimestampConverter$Value", "transforms.t.target.type": "unix",
      "transforms.t.format": "yyyy-bb"}, "illegal pattern character 'b'"),
    ({"transforms.t.type": T + "TimestampConverter$Value", "transforms.t.target.type": "unix",
      "transforms.t.unix.precision": "ms"}, "accepted values: seconds, milliseconds"),
    ({"transforms.t.type": T + "RegexRouter", "transforms.t.regex": "(a)", "transforms.t.replacement": "$2"},
     "refers to group $2 but the regex has 1 group(s)"),
    ({"transforms.t.type": T + "RegexRouter", "transforms.t.regex": "a", "transforms.t.replacement": "$x"},
     "has a $ that is not a group reference"),
    ({"transforms.t.type": T + "ValueToKey", "transforms.t.fields": ""}, "must list at least one entry"),
    ({"transforms.t.type": T + "Filter", "transforms.t.predicate": "p", "transforms.t.negate": "yes"},
     "transforms.t.negate='yes' is not a boolean"),
    ({"transforms.t.type": "com.example.MyTransform"}, "unknown transform class for alias 't'"),
])
def test_bad_transform_options(options, expected):
    assert expected in config_problems({"transforms": "t", **options})


def test_predicate_config_errors():
    text = config_problems({
        "transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "a",
        "predicates": "a,b,c,a",
        "predicates.a.type": P + "TopicNameMatches", "predicates.a.pattern": "[",
        "predicates.b.type": P + "HasHeaderKey",
        "predicates.c.type": T + "Filter",
    })
    for expected in [
        "predicates lists the alias 'a' more than once",
        "predicates.a.pattern='[' is not a valid regular expression",
        "missing required setting 'predicates.b.name' for predicate 'b' (HasHeaderKey)",
        "predicates.c.type=org.apache.kafka.connect.transforms.Filter: unknown predicate class for alias "
        "'c' (it is a transform); floeline supports org.apache.kafka.connect.transforms.predicates.{HasHeaderKey, "
        "RecordIsTombstone, TopicNameMatches}",
    ]:
        assert expected in text, expected


def test_short_names_and_kafka_aliases_are_accepted():
    c = transform_chain({"transforms": "a,b", "transforms.a.type": "HoistField$Value",
                         "transforms.a.field": "f", "transforms.b.type": "RegexRouter",
                         "transforms.b.regex": ".*", "transforms.b.replacement": "all",
                         "transforms.b.predicate": "p", "predicates": "p",
                         "predicates.p.type": "RecordIsTombstone"})
    assert c.describe() == ["a: HoistField$Value", "b: RegexRouter (when p)"]
    assert isinstance(c, TransformChain)


def test_replace_null_with_default_is_accepted_and_ignored():
    out = apply("Cast$Value", rec({"a": "1"}), spec="a:int8", replace_null_with_default="false")
    assert out.value == {"a": 1}
