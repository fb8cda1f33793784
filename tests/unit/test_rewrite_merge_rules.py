"""Which tables warehouse/rewrite_merge.py rewrites itself and which it leaves to
Delta's MERGE statement (pure logic over a table's metaData action)."""

from __future__ import annotations

import json


def metadata(configuration=None, partitions=(), field_metadata=None):
    fields = [{"name": "ID", "type": "long", "nullable": False, "metadata": {}},
              {"name": "NAME", "type": "string", "nullable": True, "metadata": field_metadata or {}}]
    return {"schemaString": json.dumps({"type": "struct", "fields": fields}),
            "partitionColumns": list(partitions), "configuration": configuration or {}}


def test_a_table_floeline_creates_is_plain():
    from floeline.warehouse.rewrite_merge import usable

    assert usable(metadata({"floeline.enableSchemaEvolution": "true", "delta.checkpointInterval": "100",
                            "floeline.primaryKey": '["ID"]', "delta.enableDeletionVectors": "false",
                            "delta.columnMapping.mode": "none"}))


def test_features_a_file_rewrite_would_skip_take_deltas_merge():
    from floeline.warehouse.rewrite_merge import usable

    for configuration in ({"delta.enableChangeDataFeed": "true"}, {"delta.enableDeletionVectors": "true"},
                          {"delta.enableRowTracking": "true"}, {"delta.columnMapping.mode": "name"},
                          {"delta.constraints.positive": "ID > 0"}, {"delta.autoOptimize.autoCompact": "true"},
                          {"delta.appendOnly": "true"}, {"delta.some.future.setting": "x"}):
        assert not usable(metadata(configuration)), configuration
    assert not usable(metadata(partitions=["NAME"]))
    assert not usable(metadata(field_metadata={"CURRENT_DEFAULT": "'x'"}))
