"""insert.mode=upsert over the memory source (issue 27): recorded Debezium PostgreSQL
output (tests/fixtures/debezium/, see its README for the history) MERGEd by primary
key into Delta tables that end up equal to the source tables, exactly once. Real Spark
and Delta, no broker."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from floeline.errors import RecordError
from floeline.warehouse.positions import parse_commit_metadata

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
PLAIN_TABLES = ("pg_plain.public.customers:CUSTOMERS,pg_plain.public.order_lines:ORDER_LINES")
# The source tables at the end of the recorded history (the fixtures' README).
FINAL_CUSTOMERS = {1, 4, 5, 6, 7, 20}
FINAL_ORDER_LINES = {(100, 1), (101, 1), (101, 2)}


def recorded(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())


def append_recorded(memory_log, records: list[dict], route_prefix: str = "") -> None:
    """Each recorded topic partition becomes a channel of the memory log, in offset order."""
    by_channel: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        by_channel.setdefault((r["topic"], r["partition"]), []).append(r)
    for (topic, partition), rs in sorted(by_channel.items()):
        rs.sort(key=lambda r: r["offset"])
        memory_log.append(f"{route_prefix}{topic}/{partition}", f"{route_prefix}{topic}",
                          [r["value"] for r in rs], keys=[r["key"] for r in rs],
                          first_position=rs[0]["offset"])


def upsert_config(make_config, **settings):
    base = {"topics": "pg_plain.public.customers,pg_plain.public.order_lines",
            "snowflake.topic2table.map": PLAIN_TABLES, "insert.mode": "upsert",
            "primary.key.mode": "record_key", "delete.enabled": "true"}
    base.update({k.replace("__", "."): str(v) for k, v in settings.items()})
    return make_config(**{k.replace(".", "__"): v for k, v in base.items()})


def history(spark, warehouse: str, table: str):
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, os.path.join(warehouse, "FLOELINE", "PUBLIC", table)).history()


def merge_commits(spark, warehouse: str, table: str) -> list:
    return history(spark, warehouse, table).where("operation = 'MERGE'").orderBy("version").collect()


# 6 a batch: customers' 21 changes in 4 batches, a key's changes spread over them (id 1 over
# three, id 7's delete and insert after its first insert), order_lines' tombstone in a
# batch after its delete.
@pytest.mark.parametrize("per_batch", [10000, 6], ids=["one-batch", "many-batches"])
def test_the_recorded_history_lands_as_the_source_tables(per_batch, memory_log, make_config, run_memory,
                                                          read_table, spark, warehouse):
    """Snapshot, inserts, updates, a key change (delete + tombstone + insert), deletes,
    three updates of one row in one transaction, a column added, a row deleted and
    inserted again: the tables equal PostgreSQL's, whether the changes of a key meet in
    one batch (last change wins) or across batches."""
    append_recorded(memory_log, recorded("postgres_json_plain.json"))
    config = upsert_config(make_config, buffer__count__records=per_batch)
    run_memory(config)

    customers_table = read_table("CUSTOMERS")
    customer_rows = customers_table.collect()
    customers = {int(r["ID"]): r for r in customer_rows}
    assert set(customers) == FINAL_CUSTOMERS
    assert customers[4]["RATING"] == 3.0  # the last of three updates in one transaction
    assert customers[1]["NAME"] == "Ada L." and customers[1]["EMAIL"] is not None  # a new after field
    assert customers[7]["NAME"] == "Tony H."  # deleted and inserted again
    assert customers[20]["NAME"] == "Grace"  # the key change: 2 is gone, 20 is there
    order_lines = read_table("ORDER_LINES")
    lines = {(int(r["ORDER_ID"]), int(r["LINE"])): r for r in order_lines.collect()}
    assert set(lines) == FINAL_ORDER_LINES and int(lines[(100, 1)]["QTY"]) == 3

    # Key columns NOT NULL; RECORD_METADATA says where the row's last change came from.
    nullable = {f.name: f.nullable for f in order_lines.schema.fields}
    assert not nullable["ORDER_ID"] and not nullable["LINE"] and nullable["SKU"]
    assert not {f.name: f.nullable for f in customers_table.schema.fields}["ID"]
    meta = json.loads(customers[4]["RECORD_METADATA"].toJson())
    assert (meta["channel"], meta["position"], meta["op"]) == ("pg_plain.public.customers/0", "14", "u")
    assert isinstance(meta["ts_ms"], int)

    # The positions are in the MERGE's own commit.
    merges = merge_commits(spark, warehouse, "CUSTOMERS")
    assert merges
    last = parse_commit_metadata(merges[-1]["userMetadata"], config.name)
    assert last is not None and last.positions == {"pg_plain.public.customers/0": "20"}

    # A replayed batch (its commit file lost) and a lost checkpoint change nothing.
    before = sorted(json.dumps(r.asDict(), default=str) for r in customer_rows)
    commits = os.path.join(config.checkpoint_dir, "commits")
    last_batch = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last_batch), f".{last_batch}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    replay = run_memory(config)
    assert replay.reports[0].batch_id == last_batch
    if last_batch > 0:  # (a query's first batch replays from the positions the table holds)
        assert replay.reports[0].skipped > 0
    shutil.rmtree(config.checkpoint_dir)
    run_memory(config)
    after = sorted(json.dumps(r.asDict(), default=str) for r in read_table("CUSTOMERS").collect())
    assert after == before
    for commit in merge_commits(spark, warehouse, "CUSTOMERS")[len(merges):]:
        metrics = commit["operationMetrics"]
        assert all(metrics.get(m, "0") == "0" for m in (
            "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")), metrics


def test_one_pass_merge_leaves_the_table_the_general_path_leaves(memory_log, make_config, run_memory,
                                                                   spark, tmp_path):
    """Once a clean batch has shown the table's key and after images, batches of plain
    envelopes take one pass (onepass_merge.py); the recorded history (a key change, a
    delete and its tombstone, a column added mid-way: that batch falls back to the
    general path) leaves the same rows, RECORD_METADATA included, as the general path
    alone (which floeline.cdc.changes.table keeps to)."""
    topic = "pg_plain.public.customers"
    append_recorded(memory_log, [r for r in recorded("postgres_json_plain.json") if r["topic"] == topic])
    tables = {}
    # (the general path in one batch: the last change per key is the same whatever the batches)
    # (one pass: 4 batches of 6, the first general, the third falling back at the added column)
    for case, settings in (("one pass", {"buffer.count.records": "6"}),
                           ("general", {"floeline.cdc.changes.table": "true"})):
        warehouse = str(tmp_path / case.replace(" ", "_"))
        config = upsert_config(make_config, topics=topic, **{"floeline.warehouse": warehouse, **settings})
        connector = run_memory(config)
        taken = [r for r in connector.reports if "one pass merge" in r.phases]
        assert bool(taken) == (case == "one pass"), [r.phases for r in connector.reports]
        table = spark.read.format("delta").load(os.path.join(warehouse, "FLOELINE", "PUBLIC", "CUSTOMERS"))
        tables[case] = sorted(json.dumps(r.asDict(recursive=True), default=str, sort_keys=True)
                              for r in table.collect())
        if case == "one pass":
            print([sorted(r.phases) for r in connector.reports])
            assert len(taken) >= 2 and len(taken) < len(connector.reports)  # the added column fell back
            assert sum(r.records_read for r in connector.reports) == len(
                [r for r in recorded("postgres_json_plain.json") if r["topic"] == topic])
            schema = table.schema
    assert tables["one pass"] == tables["general"]
    assert {int(json.loads(r)["ID"]) for r in tables["one pass"]} == FINAL_CUSTOMERS
    assert not {f.name: f.nullable for f in schema.fields}["ID"]


def test_deletes_and_tombstones_are_skipped_and_counted_without_delete_enabled(
        memory_log, make_config, run_memory, read_table):
    append_recorded(memory_log, recorded("postgres_json_plain.json"))
    connector = run_memory(upsert_config(make_config, delete__enabled="false"))
    # Every delete and tombstone skipped: 3 deletes + 3 tombstones of customers, 1 + 1 of order_lines.
    assert sum(r.skipped for r in connector.reports) == 8
    customers = {int(r["ID"]): r for r in read_table("CUSTOMERS").collect()}
    assert set(customers) == FINAL_CUSTOMERS | {2, 3}
    assert customers[7]["NAME"] == "Tony H."  # the insert after the (skipped) delete updated it
    lines = {(int(r["ORDER_ID"]), int(r["LINE"])) for r in read_table("ORDER_LINES").collect()}
    assert lines == FINAL_ORDER_LINES | {(100, 2)}


def test_connect_json_with_schemas_and_the_changes_table(memory_log, make_config, run_memory,
                                                         read_table):
    """The {"schema", "payload"} encoding through the JsonConverter (key and value: the
    decode stage), and floeline.cdc.changes.table: every change as it came in
    <TABLE>_CHANGES, exactly once on its own. (order_lines: its columns' Connect types
    are the ones this branch's JsonConverter reads; customers' `double` is cdctypes'.)"""
    topic = "pg_schemas.public.order_lines"
    records = [r for r in recorded("postgres_json_schemas.json") if r["topic"] == topic]
    append_recorded(memory_log, records)
    json_converter = "org.apache.kafka.connect.json.JsonConverter"
    config = upsert_config(
        make_config, topics=topic,
        **{"snowflake.topic2table.map": f"{topic}:ORDER_LINES",
           "key.converter": json_converter, "key.converter.schemas.enable": "true",
           "value.converter": json_converter, "value.converter.schemas.enable": "true",
           "floeline.cdc.changes.table": "true"})
    run_memory(config)
    assert {(int(r["ORDER_ID"]), int(r["LINE"])) for r in read_table("ORDER_LINES").collect()} == FINAL_ORDER_LINES

    def change_log():
        return sorted((int(json.loads(r["RECORD_METADATA"].toJson())["position"]), r["OP"])
                      for r in read_table("ORDER_LINES_CHANGES").collect())
    ops = [json.loads(r["value"])["payload"]["op"] if r["value"] else None for r in records]
    assert ops == ["r", "r", "r", "c", "u", "d", None]
    assert change_log() == list(enumerate(ops))  # the tombstone too, as a row of metadata alone
    assert {"BEFORE", "AFTER", "SOURCE", "OP", "TS_MS"} <= set(read_table("ORDER_LINES_CHANGES").columns)

    shutil.rmtree(config.checkpoint_dir)  # a lost checkpoint: neither table changes
    run_memory(config)
    assert change_log() == list(enumerate(ops))
    assert {(int(r["ORDER_ID"]), int(r["LINE"])) for r in read_table("ORDER_LINES").collect()} == FINAL_ORDER_LINES


def customers_records() -> list[dict]:
    return [r for r in recorded("postgres_json_plain.json") if r["topic"] == "pg_plain.public.customers"]


def with_value(record: dict, edit) -> dict:
    """`record` with its value edited by `edit(value dict)` (which may return a new one)."""
    value = json.loads(record["value"])
    out = edit(value)
    return {**record, "value": json.dumps(value if out is None else out)}


def test_record_value_keys_and_an_update_that_moves_its_key(memory_log, make_config, run_memory,
                                                             read_table):
    """primary.key.mode=record_value: the key is the after image's `id`; an update whose
    before image (REPLICA IDENTITY FULL) holds another id deletes the old row; deletes
    are skipped (delete.enabled needs record_key)."""
    recs = customers_records()
    grace = json.loads(recs[1]["value"])["after"]

    def move(value):
        value["before"] = dict(grace)
        value["after"] = {**grace, "id": 22, "name": "Grace 22"}
    moved = with_value(recs[5], move)
    append_recorded(memory_log, recs[:3] + [{**moved, "offset": 3}] + [
        {**recs[10], "offset": 4}, {**recs[11], "offset": 5}])
    connector = run_memory(upsert_config(make_config, primary__key__mode="record_value",
                                         primary__key__fields="id", delete__enabled="false"))
    rows = {int(r["ID"]): r["NAME"] for r in read_table("CUSTOMERS").collect()}
    assert rows == {1: "Ada", 3: "Linus", 22: "Grace 22"}
    assert sum(r.skipped for r in connector.reports) == 2  # the delete of 3 and its tombstone


def bad_changes() -> list[dict]:
    """Good records around one of each bad input, positions 0..6."""
    recs = customers_records()

    def without_op(value):
        del value["op"]

    def op(name):
        def edit(value):
            value["op"] = name
        return edit

    def without_after(value):
        value["after"] = None
    return [recs[0],                                      # 0: snapshot of id 1
            {**recs[3], "key": None},                     # 1: no record key
            with_value(recs[4], without_op),              # 2: an envelope missing op
            with_value(recs[4], op("x")),                 # 3: an unknown op
            {**recs[4], "key": '{"id": null}'},           # 4: a null key field
            with_value(recs[4], without_after),           # 5: an insert without its after image
            recs[12]]                                     # 6: an update of id 4 (inserts it)


def test_bad_changes_are_row_errors_with_their_positions(memory_log, make_config, run_memory,
                                                         read_table):
    memory_log.append("pg_plain.public.customers/0", "pg_plain.public.customers",
                      [r["value"] for r in bad_changes()], keys=[r["key"] for r in bad_changes()])
    config = upsert_config(make_config, errors__tolerance="all")
    run_memory(config)
    assert {int(r["ID"]) for r in read_table("CUSTOMERS").collect()} == {1, 4}
    errors = {r["RECORD_POSITION"]: r for r in read_table("CUSTOMERS_ERRORS").collect()}
    assert sorted(errors) == ["1", "2", "3", "4", "5"]
    assert all(e["STAGE"] == "change event" for e in errors.values())
    assert "has no record key" in errors["1"]["ERROR"] and "primary.key.mode=record_value" in errors["1"]["ERROR"]
    assert "without op" in errors["2"]["ERROR"]
    assert "op x is not an op floeline applies" in errors["3"]["ERROR"]
    assert "primary key field id is missing or null in the record key" in errors["4"]["ERROR"]
    assert "change event op c has no after image" in errors["5"]["ERROR"], errors["5"]["ERROR"]

    # A key that changed type (text for the NUMBER key column) is a row error of the write.
    recs = customers_records()
    memory_log.append("pg_plain.public.customers/0", "pg_plain.public.customers",
                      [recs[13]["value"], recs[14]["value"]], keys=['{"id": "four"}', recs[14]["key"]])
    run_memory(config)
    errors = {r["RECORD_POSITION"]: r for r in read_table("CUSTOMERS_ERRORS").collect()}
    assert sorted(errors) == ["1", "2", "3", "4", "5", "7"]
    assert errors["7"]["STAGE"] == "table write" and "ID" in errors["7"]["ERROR"], errors["7"]["ERROR"]
    rows = {int(r["ID"]): r for r in read_table("CUSTOMERS").collect()}
    assert set(rows) == {1, 4} and rows[4]["RATING"] == 3.0  # the change after it applied


def truncate_event(like: dict) -> dict:
    """Debezium's TRUNCATE event for the table of recorded record `like`: no key, op t,
    no images, `like`'s source block (the shape Debezium's PostgreSQL connector writes
    with skipped.operations=none and schemas.enable=false)."""
    value = json.loads(like["value"])
    return {**like, "key": None, "value": json.dumps({
        "before": None, "after": None, "source": value["source"], "transaction": None,
        "op": "t", "ts_ms": value["ts_ms"]})}


def test_a_truncate_empties_the_table_with_truncate_enabled_and_is_skipped_without(
        memory_log, make_config, run_memory, read_table):
    """truncate.enabled=false (the default, as in Debezium's sink): a truncate event is
    skipped and counted. true: the table loses every row it held and the batch's changes
    before the truncate; those after it land, in this batch and the next."""
    recs = customers_records()
    channel, topic = "pg_plain.public.customers/0", "pg_plain.public.customers"

    def append(records):
        memory_log.append(channel, topic, [r["value"] for r in records], keys=[r["key"] for r in records])

    append([recs[0], recs[1], recs[2], truncate_event(recs[2]), recs[3]])  # ids 1, 2, 3, a truncate, 4
    connector = run_memory(upsert_config(make_config, name="truncating"))
    assert {int(r["ID"]) for r in read_table("CUSTOMERS").collect()} == {1, 2, 3, 4}
    assert sum(r.skipped for r in connector.reports) == 1

    # id 5, a change without a key (a row error), a truncate, an update of id 1
    append([recs[4], {**recs[3], "key": None}, truncate_event(recs[4]), recs[5]])
    # The same connector again, now applying truncates: it resumes after position 4.
    connector = run_memory(upsert_config(make_config, name="truncating", truncate__enabled="true",
                                         errors__tolerance="all"))
    assert sum(r.records_read for r in connector.reports) == 4
    rows = {int(r["ID"]): r for r in read_table("CUSTOMERS").collect()}
    assert set(rows) == {1} and rows[1]["NAME"] == "Ada L."  # the update after the truncate
    assert sum(r.skipped for r in connector.reports) == 0
    errors = read_table("CUSTOMERS_ERRORS").collect()
    assert [e["RECORD_POSITION"] for e in errors] == ["6"] and "has no record key" in errors[0]["ERROR"]

    append([truncate_event(recs[5]), recs[12]])  # a truncate in a batch of its own, then id 4
    run_memory(upsert_config(make_config, name="truncating", truncate__enabled="true",
                             buffer__count__records=1))
    assert {int(r["ID"]) for r in read_table("CUSTOMERS").collect()} == {4}


def test_bad_changes_after_one_pass_batches_fall_back_to_row_errors(memory_log, make_config, run_memory,
                                                                     read_table):
    """A batch of bad changes that follows a one-pass batch fails its one pass before
    anything is committed and goes the general path's way: row errors with their
    positions, nothing lost."""
    bad = bad_changes()
    records = [bad[0], bad[6], *bad[1:6]]  # two good changes (ids 1 and 4), then positions 2-6 bad
    memory_log.append("pg_plain.public.customers/0", "pg_plain.public.customers",
                      [r["value"] for r in records], keys=[r["key"] for r in records])
    connector = run_memory(upsert_config(make_config, errors__tolerance="all", buffer__count__records=2))
    assert "one pass merge" in connector.reports[0].phases
    assert not any("one pass merge" in r.phases for r in connector.reports[1:])
    assert {int(r["ID"]) for r in read_table("CUSTOMERS").collect()} == {1, 4}
    errors = {r["RECORD_POSITION"]: r["ERROR"] for r in read_table("CUSTOMERS_ERRORS").collect()}
    assert sorted(errors) == ["2", "3", "4", "5", "6"]
    assert "has no record key" in errors["2"] and "without op" in errors["3"]


def test_errors_tolerance_none_stops_at_the_first_bad_change(memory_log, make_config, run_memory,
                                                             read_table):
    memory_log.append("pg_plain.public.customers/0", "pg_plain.public.customers",
                      [r["value"] for r in bad_changes()], keys=[r["key"] for r in bad_changes()],
                      first_position=40)
    with pytest.raises(RecordError) as failure:
        run_memory(upsert_config(make_config))
    assert failure.value.position == "41" and "has no record key" in str(failure.value)
    assert "stage=change event" in str(failure.value)


def test_flattened_rows_tombstones_and_the_last_change_across_channels(memory_log, make_config,
                                                                      run_memory, read_table):
    """Rows flattened by ExtractNewRecordState (`__deleted`, `__op`) are upserted as they
    are; a tombstone deletes its key; changes of one key on two channels: the later
    ts_ms wins, whatever order the channels are read in."""
    recs = customers_records()

    def flattened(record):
        if record["value"] is None:
            return record
        value = json.loads(record["value"])
        image = value["before"] if value["op"] == "d" else value["after"]
        row = {**image, "__deleted": str(value["op"] == "d").lower(), "__op": value["op"],
               "__source_ts_ms": value["source"]["ts_ms"]}
        return {**record, "value": json.dumps(row)}
    flat = [flattened(r) for r in recs]
    append_recorded(memory_log, flat)

    def named(name, ts_ms):
        def edit(value):
            value["after"]["name"], value["ts_ms"] = name, ts_ms
        return edit
    newer, older = with_value(recs[5], named("newer", 2_000)), with_value(recs[5], named("older", 1_000))
    memory_log.append("other/0", "other", [newer["value"], recs[4]["value"], None],
                      keys=[newer["key"], recs[4]["key"], recs[4]["key"]])
    memory_log.append("other/1", "other", [older["value"]], keys=[older["key"]])

    config = upsert_config(make_config, topics="pg_plain.public.customers,other",
                           **{"snowflake.topic2table.map": "pg_plain.public.customers:FLAT,other:OTHER"})
    run_memory(config)
    flat_rows = {int(r["ID"]): r for r in read_table("FLAT").collect()}
    assert set(flat_rows) == FINAL_CUSTOMERS and flat_rows[4]["RATING"] == 3.0
    assert flat_rows[1]["__OP"] == "u" and flat_rows[1]["__DELETED"] == "false"
    other = {int(r["ID"]): r for r in read_table("OTHER").collect()}
    assert set(other) == {1}  # id 5 inserted, then its tombstone deleted it
    assert other[1]["NAME"] == "newer"
    assert json.loads(other[1]["RECORD_METADATA"].toJson())["ts_ms"] == 2000
