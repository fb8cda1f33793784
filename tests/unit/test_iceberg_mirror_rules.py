"""The Iceberg mirror's pure rules (warehouse/iceberg_mirror.py): a Delta schema's types
as the Arrow types its Iceberg schema is made from, and what it refuses, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from floeline.warehouse.iceberg_mirror import IcebergMirrorError, _file_path, _refusals, arrow_schema


def delta_schema(*fields) -> dict:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}


def test_delta_types_become_the_arrow_types_iceberg_takes():
    schema = arrow_schema(delta_schema(
        ("ID", "long"), ("I", "integer"), ("SMALL", "short"), ("TINY", "byte"), ("NAME", "string"),
        ("AMOUNT", "decimal(10,2)"), ("BIG", "decimal(38, 0)"), ("F", "double"), ("R", "float"),
        ("OK", "boolean"), ("B", "binary"), ("D", "date"), ("TS", "timestamp"), ("LOCAL", "timestamp_ntz"),
        ("S", {"type": "struct", "fields": [{"name": "a", "type": "integer", "nullable": False}]}),
        ("L", {"type": "array", "elementType": "string", "containsNull": True}),
        ("M", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True})), "T")
    assert schema.field("ID").type == pa.int64() and schema.field("TINY").type == pa.int32()
    assert schema.field("AMOUNT").type == pa.decimal128(10, 2) and schema.field("BIG").type == pa.decimal128(38, 0)
    assert schema.field("TS").type == pa.timestamp("us", tz="UTC") and schema.field("LOCAL").type == pa.timestamp("us")
    assert schema.field("OK").type == pa.bool_() and schema.field("D").type == pa.date32()
    assert schema.field("S").type == pa.struct([pa.field("a", pa.int32(), False)])
    assert schema.field("L").type == pa.list_(pa.field("element", pa.string()))
    assert schema.field("M").type == pa.map_(pa.string(), pa.int64())


@pytest.mark.parametrize("kind", ["variant", "void", "interval day to second"])
def test_a_type_iceberg_cannot_hold_names_the_column_and_the_fix(kind):
    nested = delta_schema(("D", {"type": "struct", "fields": [{"name": "v", "type": kind, "nullable": True}]}))
    with pytest.raises(IcebergMirrorError, match=rf"table DB.S.T: column D.v is {kind.upper()}.*JSON text"):
        arrow_schema(nested, "DB.S.T")


def test_partitions_column_mapping_and_deletion_vectors_are_refused():
    with pytest.raises(IcebergMirrorError, match=r"partitioned by \['DAY'\]"):
        _refusals("T", {"partitionColumns": ["DAY"]}, [])
    with pytest.raises(IcebergMirrorError, match=r"column mapping \(id\)"):
        _refusals("T", {"configuration": {"delta.columnMapping.mode": "id"}}, [])
    with pytest.raises(IcebergMirrorError, match="deletion vectors"):
        _refusals("T", {}, [{"path": "a.parquet", "deletionVector": {"storageType": "u"}}])
    _refusals("T", {"partitionColumns": [], "configuration": {"delta.columnMapping.mode": "none"}},
              [{"path": "a.parquet", "deletionVector": None}])


def test_a_delta_add_path_is_the_files_local_path():
    assert _file_path("/w/T", "part-0%3Da.parquet") == "/w/T/part-0=a.parquet"
    assert _file_path("/w/T", "file:///other/x.parquet") == "/other/x.parquet"
