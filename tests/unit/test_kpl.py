"""The KPL aggregated record format: decoding a vector built by hand from the format's
definition, round trips, unknown fields, and corrupted input (an ordinary record)."""

from __future__ import annotations

import hashlib

from floeline.sources.kinesis.kpl import MAGIC, UserRecord, aggregate, deaggregate


def framed(body: bytes) -> bytes:
    """magic + protobuf + MD5 of the protobuf, as the KPL frames an aggregate."""
    return MAGIC + body + hashlib.md5(body).digest()


# AggregatedRecord {
#   partition_key_table: "a", "bc"            field 1, length-delimited -> key byte 0x0A
#   explicit_hash_key_table: "123"            field 2 -> 0x12
#   records: { partition_key_index: 0, data: "x" }                      field 3 -> 0x1A
#   records: { partition_key_index: 1, explicit_hash_key_index: 0, data: "yz",
#              tags: { key: "t", value: "v" } }
# }
RECORD_1 = bytes([0x08, 0x00,              # partition_key_index = 0 (field 1, varint)
                  0x1A, 0x01]) + b"x"       # data = "x" (field 3, length 1)
TAG = bytes([0x0A, 0x01]) + b"t" + bytes([0x12, 0x01]) + b"v"
RECORD_2 = (bytes([0x08, 0x01,             # partition_key_index = 1
                   0x10, 0x00,             # explicit_hash_key_index = 0 (field 2, varint)
                   0x1A, 0x02]) + b"yz"     # data = "yz"
            + bytes([0x22, len(TAG)]) + TAG)  # tags (field 4, length-delimited)
HAND_BODY = (bytes([0x0A, 0x01]) + b"a" + bytes([0x0A, 0x02]) + b"bc"
             + bytes([0x12, 0x03]) + b"123"
             + bytes([0x1A, len(RECORD_1)]) + RECORD_1
             + bytes([0x1A, len(RECORD_2)]) + RECORD_2)


def test_hand_built_vector():
    assert len(RECORD_2) == 16  # lengths above fit one varint byte
    assert deaggregate(framed(HAND_BODY)) == [
        UserRecord("a", None, b"x"),
        UserRecord("bc", "123", b"yz"),
    ]


def test_aggregate_writes_the_format_by_hand():
    body = (bytes([0x0A, 0x01]) + b"a" + bytes([0x0A, 0x02]) + b"bc"
            + bytes([0x1A, len(RECORD_1)]) + RECORD_1
            + bytes([0x1A, 0x06, 0x08, 0x01, 0x1A, 0x02]) + b"yz"
            + bytes([0x1A, len(RECORD_1)]) + RECORD_1)
    assert aggregate([("a", b"x"), ("bc", b"yz"), ("a", b"x")]) == framed(body)


def test_round_trip_with_multibyte_varints():
    records = [(f"key-{i}", bytes([i % 256]) * (i * 3)) for i in range(400)]  # index 399, data 1197 B
    records.append(("é-ü", b""))
    out = deaggregate(aggregate(records))
    assert out == [UserRecord(k, None, d) for k, d in records]


def test_empty_aggregate_has_no_user_records():
    assert deaggregate(aggregate([])) == []
    assert deaggregate(framed(b"")) == []


def test_unknown_fields_are_skipped():
    unknown = (bytes([0x78, 0x96, 0x01])               # field 15, varint 150
               + bytes([0x39]) + b"\x01" * 8            # field 7, fixed64
               + bytes([0x4D]) + b"\x02" * 4            # field 9, fixed32
               + bytes([0xA2, 0x01, 0x03]) + b"abc")    # field 20, length-delimited
    record = bytes([0x08, 0x00]) + unknown + bytes([0x1A, 0x01]) + b"x"
    body = (unknown + bytes([0x0A, 0x01]) + b"a" + unknown
            + bytes([0x1A, len(record)]) + record + unknown)
    assert deaggregate(framed(body)) == [UserRecord("a", None, b"x")]


def test_not_aggregated_or_corrupted_is_an_ordinary_record():
    good = framed(HAND_BODY)
    assert deaggregate(b"") is None
    assert deaggregate(b"plain json {\"a\": 1}") is None
    assert deaggregate(MAGIC) is None  # too short for a digest
    assert deaggregate(b"\x00" + good[1:]) is None  # wrong magic
    assert deaggregate(good[:-1] + bytes([good[-1] ^ 1])) is None  # wrong MD5
    assert deaggregate(good[:10] + bytes([good[10] ^ 0x40]) + good[11:]) is None  # body changed


def test_unparsable_protobuf_with_a_valid_md5_is_an_ordinary_record():
    cases = [
        bytes([0x0A, 0x05]) + b"ab",                         # length past the end
        bytes([0x08, 0x80]),                                 # truncated varint
        bytes([0x08]) + b"\xff" * 11 + b"\x01",              # overlong varint
        bytes([0x00, 0x01]),                                 # field number 0
        bytes([0x0B, 0x0C]),                                 # a group (wire type 3)
        bytes([0x0A, 0x01]) + b"a" + bytes([0x1A, 0x02, 0x08, 0x00]),          # record without data
        bytes([0x0A, 0x01]) + b"a" + bytes([0x1A, 0x05, 0x08, 0x01, 0x1A, 0x01]) + b"x",  # key index 1 of 1
        bytes([0x0A, 0x01]) + b"a" + bytes([0x1A, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1A, 0x01]) + b"x",  # no hash key table
    ]
    for body in cases:
        assert deaggregate(framed(body)) is None, body


def test_invalid_utf8_key_is_replaced_as_java_does():
    body = bytes([0x0A, 0x01, 0xFF, 0x1A, 0x05, 0x08, 0x00, 0x1A, 0x01]) + b"x"
    assert deaggregate(framed(body)) == [UserRecord("\ufffd", None, b"x")]
