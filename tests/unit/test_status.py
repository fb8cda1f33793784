"""`floeline status` without Spark: reading positions and row counts from a Delta
log (JSON commits, classic, multi-part and V2 checkpoints, deletion vectors), and the
text and JSON it prints."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from floeline.ops.status import ChannelStatus, ConnectorStatus, TableStatus, format_json, format_text
from floeline.sources.base import Committed
from floeline.warehouse import delta_log
from floeline.warehouse.positions import commit_metadata, committed_in_log


def add(path, records, dv=None):
    action = {"path": path, "size": 1, "dataChange": True, "stats": json.dumps({"numRecords": records})}
    if dv:
        action["deletionVector"] = dv
    return {"add": action}


def remove(path, dv=None):
    return {"remove": {"path": path, "dataChange": True, **({"deletionVector": dv} if dv else {})}}


def commit(table, version, *actions, metadata=None, ts=1_700_000_000_000):
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    info = {"commitInfo": {"timestamp": ts + version, "operation": "WRITE",
                           **({"userMetadata": metadata} if metadata else {})}}
    (log / f"{version:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in [info, *actions]) + "\n")


ADD_TYPE = pa.struct([("path", pa.string()), ("size", pa.int64()), ("dataChange", pa.bool_()),
                      ("stats", pa.string()),
                      ("deletionVector", pa.struct([("storageType", pa.string()),
                                                    ("pathOrInlineDv", pa.string()),
                                                    ("offset", pa.int32()),
                                                    ("cardinality", pa.int64())]))])
REMOVE_TYPE = pa.struct([("path", pa.string()), ("dataChange", pa.bool_())])


def checkpoint_table(adds, removes=()):
    rows_add = [a["add"] | {"deletionVector": a["add"].get("deletionVector")} for a in adds]
    return pa.table({
        "add": pa.array(rows_add + [None] * len(removes), ADD_TYPE),
        "remove": pa.array([None] * len(adds) + [r["remove"] for r in removes], REMOVE_TYPE),
        "metaData": pa.array([None] * (len(adds) + len(removes)), pa.struct([("id", pa.string())])),
    })


def test_positions_come_from_the_newest_commit_of_this_connector(tmp_path):
    table = tmp_path / "T"
    commit(table, 0, add("a", 3), metadata=commit_metadata("c1", Committed({"t/0": "2"})))
    commit(table, 1, add("b", 2), metadata=commit_metadata("c1", Committed({"t/0": "4", "t/1": "9"})))
    commit(table, 2, add("c", 1), metadata=commit_metadata("other", Committed({"t/0": "99"})))
    commit(table, 3, remove("c"))  # e.g. a DELETE from SQL: no positions
    committed, found = committed_in_log(str(table), "c1")
    assert committed.positions == {"t/0": "4", "t/1": "9"}
    assert (found.version, found.timestamp_ms) == (1, 1_700_000_000_001)
    assert committed_in_log(str(table), "nobody") == (Committed(), None)
    assert committed_in_log(str(tmp_path / "missing"), "c1") == (Committed(), None)
    assert delta_log.row_count(str(table)) == 5


def test_snapshot_from_a_checkpoint_and_the_commits_after_it(tmp_path):
    table = tmp_path / "T"
    for version in range(3):
        commit(table, version, add(f"f{version}", 10))
    commit(table, 3, remove("f0"), add("f3", 4))
    log = table / "_delta_log"
    # The checkpoint at 3 is the truth up to 3: commits before it may be gone.
    pq.write_table(checkpoint_table([add("f1", 10), add("f2", 10), add("f3", 4)], [remove("f0")]),
                   log / f"{3:020d}.checkpoint.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 3, "size": 4}))
    for version in range(3):
        (log / f"{version:020d}.json").unlink()
    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "cardinality": 3}
    commit(table, 4, remove("f1"), add("f1", 10, dv))  # a DELETE through a deletion vector
    commit(table, 5, add("f5", 1))
    assert delta_log.row_count(str(table)) == 10 - 3 + 10 + 4 + 1
    assert sorted(a["path"] for a in delta_log.live_files(str(table))) == ["f1", "f2", "f3", "f5"]


def test_multi_part_and_v2_checkpoints(tmp_path):
    table = tmp_path / "T"
    commit(table, 0, add("x", 1))
    commit(table, 1, add("y", 2))
    commit(table, 2, add("z", 4))
    log = table / "_delta_log"
    # An incomplete multi-part checkpoint at 2 (one part of two) is skipped for the one at 1.
    pq.write_table(checkpoint_table([add("x", 1)]), log / f"{1:020d}.checkpoint.0000000001.0000000002.parquet")
    pq.write_table(checkpoint_table([add("y", 2)]), log / f"{1:020d}.checkpoint.0000000002.0000000002.parquet")
    pq.write_table(checkpoint_table([add("x", 1)]), log / f"{2:020d}.checkpoint.0000000001.0000000002.parquet")
    (log / f"{0:020d}.json").unlink()
    assert delta_log.row_count(str(table)) == 7
    # A V2 checkpoint at 2 whose file actions are in a sidecar.
    (log / "_sidecars").mkdir()
    pq.write_table(checkpoint_table([add("x", 1), add("y", 2), add("z", 4)]), log / "_sidecars" / "s1.parquet")
    (log / f"{2:020d}.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json").write_text(
        json.dumps({"checkpointMetadata": {"version": 2}}) + "\n"
        + json.dumps({"sidecar": {"path": "s1.parquet", "sizeInBytes": 1, "modificationTime": 0}}) + "\n")
    (log / f"{1:020d}.json").unlink()
    (log / f"{2:020d}.json").write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n")  # no adds
    assert delta_log.row_count(str(table)) == 7


STATUS = ConnectorStatus(
    "orders", "kafka",
    [TableStatus("FLOELINE.PUBLIC.ORDERS", True, rows=12, last_commit="2026-01-02T03:04:05.678Z",
                 version=7, error_table="FLOELINE.PUBLIC.ORDERS_ERRORS", error_rows=2, lag=3,
                 channels=[ChannelStatus("orders/0", "5", "5", 0),
                           ChannelStatus("orders/10", "4", "7", 3),
                           ChannelStatus("orders/2", None, None, None)]),
     TableStatus("FLOELINE.PUBLIC.NEW", False),
     TableStatus("FLOELINE.PUBLIC.EVENTS", True, rows=3, lag=1500, lag_unit="ms",
                 channels=[ChannelStatus("events/shardId-000000000000", "4960" + "0" * 52, None, 0,
                                         "ms", finished=True),
                           ChannelStatus("events/shardId-000000000001", "4961" + "0" * 52, None, 1500,
                                         "ms")])],
    dead_letter_topic="dlq", dead_letter_records=2, notes=["something to say"])


def test_text():
    assert format_text(STATUS).splitlines() == [
        "connector orders (kafka)",
        "FLOELINE.PUBLIC.ORDERS: rows=12 last_commit=2026-01-02T03:04:05.678Z version=7 "
        "error_rows=2 (FLOELINE.PUBLIC.ORDERS_ERRORS) lag=3",
        "  CHANNEL    COMMITTED  LATEST  LAG",
        "  orders/0   5          5       0",
        "  orders/10  4          7       3",
        "  orders/2   -          -       -",
        "FLOELINE.PUBLIC.NEW: no table yet",
        "FLOELINE.PUBLIC.EVENTS: rows=3 last_commit=- version=- error_rows=0 lag=1500ms",
        "  CHANNEL                      COMMITTED" + " " * 47 + "  LATEST  LAG",
        "  events/shardId-000000000000  4960" + "0" * 52 + "  -       finished",
        "  events/shardId-000000000001  4961" + "0" * 52 + "  -       1500ms",
        "dead-letter topic dlq: records=2",
        "note: something to say",
    ]


def test_json():
    data = json.loads(format_json(STATUS))
    assert data["connector"] == "orders" and data["dead_letter_records"] == 2
    orders = data["tables"][0]
    assert orders["channels"][1] == {"channel": "orders/10", "committed": "4", "latest": "7",
                                     "lag": 3, "lag_unit": "records", "finished": False}
    assert (orders["rows"], orders["error_rows"], orders["lag"]) == (12, 2, 3)
    assert data["tables"][1] == {"table": "FLOELINE.PUBLIC.NEW", "exists": False, "rows": None,
                                 "last_commit": None, "version": None, "error_table": None,
                                 "error_rows": None, "lag": None, "lag_unit": "records",
                                 "channels": [], "owner": None}
