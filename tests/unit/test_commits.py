"""The userMetadata every Delta commit carries (warehouse/commits.py), and the batch
statistics' arithmetic (ingest/results.py). No Spark."""

from __future__ import annotations

from floeline.ingest.results import ChannelStats
from floeline.sources.base import Committed
from floeline.warehouse import load_history, positions
from floeline.warehouse.commits import user_metadata
from floeline.warehouse.load_history import LOADED, FileLoad


def test_a_commit_holds_the_positions_as_before():
    after = Committed({"orders/0": "41", "orders/1": "7"}, {"orders/2"})
    assert user_metadata("c1", after) == positions.commit_metadata("c1", after)
    assert positions.parse_commit_metadata(user_metadata("c1", after), "c1") == after


def test_a_load_holds_its_history_beside_the_positions_as_before():
    loads = [FileLoad(stage="DB.SC.ST", file="a.json", size=3, md5="x", modified_ms=1, status=LOADED,
                      rows_parsed=1, rows_loaded=1, errors_seen=0)]
    after = Committed({"t/0": "9"})
    assert user_metadata("c1", after, loads) == load_history.commit_metadata(
        loads, positions.commit_entry("c1", after))
    assert user_metadata(None, None, loads) == load_history.commit_metadata(loads)  # COPY INTO


def test_channel_stats_add_up_across_routes():
    a = ChannelStats("5", "9", records=5, bad=1, ts_min=100, keys={"k1"}, schema_ids={1})
    b = ChannelStats("10", "12", records=3, tombstones=1, ts_min=50, keys={"k2"}, schema_ids={2})
    a.add(b)
    assert (a.first, a.last, a.records, a.bad, a.tombstones, a.ts_min) == ("5", "12", 8, 1, 1, 50)
    assert a.keys == {"k1", "k2"} and a.schema_ids == {1, 2} and a.unusual
    assert not ChannelStats("1", "2", records=2).unusual


def test_a_delta_conflict_named_only_in_the_message_is_transient():
    from floeline.errors import ServiceUnavailable, TableError
    from floeline.warehouse.catalog import TableRef
    from floeline.warehouse.commits import commit_failure

    ref = TableRef("DB", "S", "T", "/tmp/T")
    lost = RuntimeError("[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata of "
                        "the Delta table has been changed by a concurrent update.")
    assert isinstance(commit_failure(lost, "writing to table DB.S.T", ref), ServiceUnavailable)
    assert isinstance(commit_failure(RuntimeError("[DELTA_CONCURRENT_APPEND] files were added"),
                                     "w", ref), ServiceUnavailable)
    # Delta 4 names a conflict's sub-condition too
    assert isinstance(commit_failure(RuntimeError(
        "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected."), "w", ref), ServiceUnavailable)
    other = commit_failure(RuntimeError("[DELTA_SCHEMA_CHANGED] no"), "w", ref)
    assert isinstance(other, TableError) and not isinstance(other, ServiceUnavailable)
