"""The shared pipeline as every source sees it, over the memory source: positions of
any length, resume from the table, replays, lost checkpoints, bad records, finished
channels. No broker; real Spark and Delta."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from floeline.errors import RecordError
from floeline.warehouse.positions import committed_in_log

pytestmark = pytest.mark.integration

# Positions past 64 bits, and a channel that crosses from 24 to 25 digits: compared as
# text, "1000000000000000000000000" < "999999999999999999999999".
BIG = 2 ** 70
EDGE = 10 ** 24 - 3


def values(start: int, count: int) -> list[bytes]:
    return [json.dumps({"n": start + i, "name": f"r{start + i}"}).encode() for i in range(count)]


def coordinates(df) -> list[tuple[str, str]]:
    return [(r["c"], r["p"]) for r in df.selectExpr(
        "RECORD_METADATA:channel::string AS c", "RECORD_METADATA:position::string AS p").collect()]


def assert_exactly_once(df, expected: dict[str, tuple[int, int]]) -> None:
    """`expected`: channel -> (first position, count)."""
    coords = coordinates(df)
    assert len(coords) == len(set(coords)), "duplicate rows"
    wanted = {(c, str(first + i)) for c, (first, n) in expected.items() for i in range(n)}
    assert set(coords) == wanted, f"missing {sorted(wanted - set(coords))[:3]}, extra {sorted(set(coords) - wanted)[:3]}"


def test_positions_of_any_length_resume_replay_and_lost_checkpoint(memory_log, make_config, run_memory,
                                                                    read_table, spark, warehouse):
    memory_log.append("orders/0", "orders", values(0, 5), first_position=BIG)
    memory_log.append("orders/1", "orders", values(100, 5), first_position=EDGE)
    config = make_config(buffer__count__records=2)  # several batches per channel
    connector = run_memory(config)
    assert len(connector.reports) >= 3
    assert_exactly_once(read_table("ORDERS"), {"orders/0": (BIG, 5), "orders/1": (EDGE, 5)})
    # The table holds each channel's last position (a 25-digit one after a 24-digit one).
    committed = committed_in_log(_ref(warehouse, "ORDERS").path, config.name)[0]
    assert committed.positions == {"orders/0": str(BIG + 4), "orders/1": str(EDGE + 4)}
    assert len(str(EDGE + 4)) == len(str(EDGE)) + 1

    # Later batches take the one-pass path and keep the same guarantees.
    assert any("one pass" in r.phases for r in connector.reports)

    memory_log.append("orders/1", "orders", values(105, 3))
    run_memory(config)
    assert_exactly_once(read_table("ORDERS"), {"orders/0": (BIG, 5), "orders/1": (EDGE, 8)})

    # A replayed batch (its commit file lost) writes nothing twice.
    commits = os.path.join(config.checkpoint_dir, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    replay = run_memory(config)
    assert replay.reports[0].batch_id == last and replay.reports[0].skipped > 0

    # A lost Spark checkpoint resumes from the table's positions.
    shutil.rmtree(config.checkpoint_dir)
    memory_log.append("orders/0", "orders", values(5, 2))
    run_memory(config)
    assert_exactly_once(read_table("ORDERS"), {"orders/0": (BIG, 7), "orders/1": (EDGE, 8)})


def test_bad_records_go_to_the_error_table_with_their_coordinates(memory_log, make_config,
                                                                   run_memory, read_table):
    memory_log.append("orders/0", "orders", [b'{"n": 1}', b"{not json", b'{"n": 3}'],
                      first_position=BIG)
    run_memory(make_config(errors__tolerance="all"))
    assert sorted(int(r["N"]) for r in read_table("ORDERS").collect()) == [1, 3]
    (error,) = read_table("ORDERS_ERRORS").collect()
    assert (error["RECORD_CHANNEL"], error["RECORD_POSITION"]) == ("orders/0", str(BIG + 1))
    assert json.loads(error["RECORD_SOURCE"].toJson()) == {"channel": "orders/0", "position": str(BIG + 1)}
    assert error["RECORD_VALUE"] == b"{not json" and error["STAGE"] == "value converter"


def test_first_bad_record_stops_the_connector_and_names_it(memory_log, make_config, run_memory,
                                                            read_table):
    memory_log.append("orders/0", "orders", [b'{"n": 1}', b"[1, 2]", b"oops"], first_position=7)
    with pytest.raises(RecordError) as failure:
        run_memory(make_config())
    assert "record channel=orders/0 position=8 stage=value converter" in str(failure.value)
    assert failure.value.position == "8"


def test_finished_channel_is_recorded_once_with_the_rows(memory_log, make_config, run_memory,
                                                         spark, warehouse):
    memory_log.append("orders/0", "orders", values(0, 3))
    memory_log.finish("orders/0")
    memory_log.append("orders/1", "orders", values(10, 2))
    config = make_config()
    run_memory(config)
    committed = committed_in_log(_ref(warehouse, "ORDERS").path, config.name)[0]
    assert committed.finished == {"orders/0"}
    assert committed.positions == {"orders/0": "2", "orders/1": "1"}


def _ref(warehouse: str, table: str):
    from floeline.warehouse.catalog import Warehouse

    return Warehouse(warehouse).table("FLOELINE", "PUBLIC", table)


def test_a_metrics_port_without_endpoints_to_serve_it_is_a_clear_error(spark, memory_log, make_config):
    """The batch core serves nothing itself: a connector built in code with
    floeline.metrics.port but no endpoints says how to serve them (floeline run hands
    in ops/http.py's server) instead of silently serving nothing."""
    from floeline.errors import FloelineError
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    config = make_config(floeline__metrics__port="0")
    with pytest.raises(FloelineError, match=r"floeline.metrics.port=0 is set.*endpoints=floeline.ops.http.OpsServer"):
        Connector(config, spark, source=MemorySource(config, memory_log)).run(until_caught_up=True)


def test_a_commit_that_raised_is_read_back_from_the_table(memory_log, make_config, run_memory,
                                                          read_table, spark, warehouse):
    """A commit can land and still raise (Delta wrote its log entry, then failed; the
    batch failed after its commit): the connector's own idea of the table's positions is
    then stale. After commit_failed (what a failed commit and a query restart call), the
    positions are read again from the table, so the replay of that batch is dropped."""
    from floeline.ingest.table_state import Tables
    from floeline.sources.base import Committed
    from floeline.warehouse.catalog import Warehouse
    from floeline.warehouse.commits import commit

    memory_log.append("orders/0", "orders", values(0, 4))
    config = make_config()
    run_memory(config)
    ref = _ref(warehouse, "ORDERS")
    tables = Tables(spark, Warehouse(warehouse), config.name)
    state = tables.state(ref)
    assert state.committed.positions == {"orders/0": "3"}
    # The next batch's commit lands (its rows and positions), unknown to the connector.
    landed = spark.read.format("delta").load(ref.path).limit(0)  # as stored
    commit(landed, ref, config.name, Committed({"orders/0": "7"}))
    assert tables.state(ref).committed.positions == {"orders/0": "3"}  # stale
    state.commit_failed()
    assert tables.state(ref).committed.positions == {"orders/0": "7"}
    assert not tables.state(ref).committed_unsure  # read once, not at every batch
