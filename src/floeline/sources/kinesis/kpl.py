"""The Kinesis Producer Library's aggregated record format, read and written by hand.

A KPL producer packs many user records into one Kinesis record:

    F3 89 9A C2 | protobuf AggregatedRecord | MD5 of the protobuf bytes (16 bytes)

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;
    }
    message Tag { required string key = 1; optional string value = 2; }

Decoding follows the Kinesis Client Library: data without the magic, with a wrong
MD5 or whose protobuf cannot be parsed is an ordinary record (`deaggregate` returns
None). The protobuf wire format is small enough to code here (varints and
length-delimited fields); unknown fields are skipped as protobuf requires. Strings
are decoded as UTF-8 with replacement, as Java's protobuf (and so the KCL) does."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST_SIZE = 16

# Wire types of the protobuf encoding.
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class UserRecord(NamedTuple):
    """One record as the producer wrote it, out of an aggregated Kinesis record."""

    partition_key: str
    explicit_hash_key: str | None
    data: bytes


class _Malformed(Exception):
    """The protobuf bytes do not parse (internal: deaggregate turns it into None)."""


def deaggregate(data: bytes) -> list[UserRecord] | None:
    """The user records packed in `data`, or None when `data` is not a KPL aggregated
    record (no magic, wrong MD5, unparsable protobuf): then it is an ordinary record."""
    if len(data) < len(MAGIC) + _DIGEST_SIZE or not data.startswith(MAGIC):
        return None
    body = data[len(MAGIC):-_DIGEST_SIZE]
    if hashlib.md5(body).digest() != data[-_DIGEST_SIZE:]:
        return None
    try:
        return _decode_aggregated(body)
    except (_Malformed, IndexError):
        return None


def aggregate(records: list[tuple[str, bytes]]) -> bytes:
    """One aggregated Kinesis record holding `records` ((partition key, data) pairs),
    as the KPL writes it. Its Kinesis partition key should be the first record's."""
    keys: dict[str, int] = {}
    table = bytearray()
    body = bytearray()
    for key, data in records:
        if key not in keys:
            keys[key] = len(keys)
            _put_bytes(table, 1, key.encode("utf-8"))
        record = bytearray()
        _put_key(record, 1, _VARINT)
        _put_varint(record, keys[key])
        _put_bytes(record, 3, bytes(data))
        _put_bytes(body, 3, record)
    message = bytes(table + body)
    return MAGIC + message + hashlib.md5(message).digest()


# --- decoding -------------------------------------------------------------------------

def _decode_aggregated(buf: bytes) -> list[UserRecord]:
    # The loops read one-byte varints inline (keys and lengths almost always are):
    # deaggregation runs on the driver for every user record, so it is kept tight.
    keys: list[str] = []
    hash_keys: list[str] = []
    raw: list[tuple[int, int | None, bytes]] = []
    pos, end = 0, len(buf)
    while pos < end:
        key = buf[pos]
        if key < 0x80 and key >= 8:
            pos += 1
        else:
            key, pos = _read_tag(buf, pos, end)
        if key & 7 != _LENGTH:
            pos = _skip(buf, pos, end, key & 7)
            continue
        length = buf[pos] if pos < end else 0x80
        if length < 0x80:
            pos += 1
        else:
            length, pos = _read_varint(buf, pos, end)
        stop = pos + length
        if stop > end:
            raise _Malformed("length past the end")
        field = key >> 3
        if field == 3:
            # The KPL writes a Record as 08 <index> 1A <length> <data>: read that shape
            # straight away, anything else field by field.
            if length >= 4 and buf[pos] == 0x08 and buf[pos + 1] < 0x80 and buf[pos + 2] == 0x1A:
                size = buf[pos + 3]
                start = pos + 4
                if size >= 0x80:
                    size, start = _read_varint(buf, pos + 3, stop)
                if start + size == stop:
                    raw.append((buf[pos + 1], None, buf[start:stop]))
                    pos = stop
                    continue
            raw.append(_decode_record(buf, pos, stop))
        elif field == 1:
            keys.append(buf[pos:stop].decode("utf-8", "replace"))
        elif field == 2:
            hash_keys.append(buf[pos:stop].decode("utf-8", "replace"))
        pos = stop
    n_keys, n_hash = len(keys), len(hash_keys)
    records = []
    for key_index, hash_index, data in raw:
        if key_index >= n_keys or (hash_index is not None and hash_index >= n_hash):
            raise _Malformed("table index out of range")
        records.append(UserRecord(keys[key_index],
                                  None if hash_index is None else hash_keys[hash_index], data))
    return records


def _decode_record(buf: bytes, pos: int, end: int) -> tuple[int, int | None, bytes]:
    """(partition_key_index, explicit_hash_key_index, data) of one Record; its tags
    are skipped (the KCL does not hand them out either)."""
    key_index = hash_index = data = None
    while pos < end:
        key = buf[pos]
        if key < 0x80 and key >= 8:
            pos += 1
        else:
            key, pos = _read_tag(buf, pos, end)
        wire = key & 7
        if wire == _VARINT and key >> 3 in (1, 2):
            value = buf[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = _read_varint(buf, pos, end)
            if key >> 3 == 1:
                key_index = value
            else:
                hash_index = value
        elif wire == _LENGTH and key >> 3 == 3:
            length = buf[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = _read_varint(buf, pos, end)
            if pos + length > end:
                raise _Malformed("length past the end")
            data = buf[pos:pos + length]
            pos += length
        else:
            pos = _skip(buf, pos, end, wire)
    if key_index is None or data is None:
        raise _Malformed("Record without its required fields")
    return key_index, hash_index, data


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise _Malformed("truncated varint")
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift = byte & 0x7F, 7
    pos += 1
    while True:
        if pos >= end or shift > 63:
            raise _Malformed("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _read_tag(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A field's key (field number << 3 | wire type), checked."""
    key, pos = _read_varint(buf, pos, end)
    if key >> 3 == 0:
        raise _Malformed("field number 0")
    return key, pos


def _read_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, end) of a length-delimited field's bytes."""
    length, pos = _read_varint(buf, pos, end)
    if pos + length > end:
        raise _Malformed("length past the end")
    return pos, pos + length


def _skip(buf: bytes, pos: int, end: int, wire: int) -> int:
    """The position after an unknown field's value."""
    if wire == _VARINT:
        return _read_varint(buf, pos, end)[1]
    if wire == _LENGTH:
        return _read_length(buf, pos, end)[1]
    size = {_FIXED64: 8, _FIXED32: 4}.get(wire)
    if size is None or pos + size > end:  # groups (3, 4) are not used by this format
        raise _Malformed(f"wire type {wire}")
    return pos + size


# --- encoding -------------------------------------------------------------------------

def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_key(out: bytearray, field: int, wire: int) -> None:
    _put_varint(out, field << 3 | wire)


def _put_bytes(out: bytearray, field: int, value: bytes | bytearray) -> None:
    _put_key(out, field, _LENGTH)
    _put_varint(out, len(value))
    out += value
