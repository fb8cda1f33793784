"""Positions as Delta txn actions (warehouse/position_txns.py) and their reading from a
log that a clean-up left with a checkpoint and no old commits (positions.committed_in_log)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floeline.sources.base import Committed
from floeline.warehouse.position_txns import held_in_txns, txn_entries
from floeline.warehouse.positions import commit_metadata, committed_in_log

KINESIS = "49590338271490256608559692538361571095921575989136588898"  # 56 digits
TOPIC_ID = "6b1d9c2e4f0a4e7d8b3c2a1f0e9d8c7b"
CHANGE = "f" * 32  # halves with the top bit set: negative 64-bit values


def roundtrip(committed: Committed, connector: str = "c", stamp: int = 7) -> Committed:
    held = held_in_txns(connector, txn_entries(connector, committed, stamp))
    assert held is not None and held.stamp == stamp
    return held.committed


def test_every_part_of_the_positions_comes_back():
    committed = Committed(
        positions={"orders/0": "0", "orders/1": "9223372036854775806", "s/shard-1": KINESIS,
                   "s/shard-0": "12", "s/shard-2": "123456789012345678901"},
        finished={"s/shard-0", "s/shard-2", "s/shard-9"},
        earliest={"orders/2"},
        change=CHANGE,
        epochs={"orders": TOPIC_ID, "other": "0" * 32})
    assert roundtrip(committed) == committed


def test_every_value_is_a_signed_64_bit_integer():
    entries = txn_entries("c", Committed({"s/1": KINESIS}, change=CHANGE, epochs={"t": CHANGE}), 3)
    assert all(-(1 << 63) <= v < (1 << 63) for v in entries.values())
    assert all(a.startswith("floeline:") for a in entries)


def test_other_connectors_and_other_writers_are_ignored():
    entries = {**txn_entries("a", Committed({"t/0": "5"}), 1),
               **txn_entries("b", Committed({"t/0": "99"}), 2),
               "streaming-query-id": 12, "floeline:not json": 3}
    assert roundtrip(Committed({"t/0": "5"}), "a") == Committed({"t/0": "5"})
    assert held_in_txns("a", entries).committed == Committed({"t/0": "5"})
    assert held_in_txns("b", entries).stamp == 2
    assert held_in_txns("nobody", entries) is None


def test_a_later_commit_overwrites_every_entry_it_matters_for():
    """The snapshot keeps the latest version per appId: a long position followed by a
    short one leaves stale parts, which are not read."""
    snapshot = txn_entries("c", Committed({"s/1": KINESIS}), 1)
    snapshot.update(txn_entries("c", Committed({"s/1": "42"}, change=CHANGE), 2))
    assert held_in_txns("c", snapshot).committed == Committed({"s/1": "42"}, change=CHANGE)
    snapshot.update(txn_entries("c", Committed({}, earliest={"s/1"}, change="0" * 32), 3))
    assert held_in_txns("c", snapshot).committed == Committed({}, earliest={"s/1"}, change="0" * 32)


def test_connector_names_and_channels_of_any_text_stay_apart():
    odd = Committed({'we"ird:[name]/0': "1", "ünï/3": "2"})
    assert roundtrip(odd, connector='x", "y') == odd
    assert held_in_txns("x", txn_entries('x", "y', odd, 1)) is None


@pytest.mark.parametrize("bad", ["-1", "01", "1.5", "١٢"])
def test_a_position_that_is_not_canonical_digits_is_refused(bad):
    with pytest.raises(ValueError, match="canonical digit string"):
        txn_entries("c", Committed({"t/0": bad}), 1)


def test_a_missing_part_is_an_error_not_a_wrong_position():
    entries = txn_entries("c", Committed({"s/1": KINESIS}), 1)
    del entries['floeline:["c","s/1",1]']
    with pytest.raises(ValueError, match="lack part"):
        held_in_txns("c", entries)


# ---- reading a cleaned-up log without Spark ------------------------------------------

def _commit(log, version, *actions, metadata=None):
    info = {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE",
                           **({"userMetadata": metadata} if metadata else {})}}
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in [info, *actions]) + "\n")


def _txns(entries, at=1_700_000_000_500):
    return [{"txn": {"appId": a, "version": v, "lastUpdated": at}} for a, v in entries.items()]


TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])


def test_positions_outlive_the_commits_that_wrote_them(tmp_path):
    """A checkpoint at version 5 and the commits after it are all that is left; the
    checkpoint keeps the txn actions, no commit holds userMetadata of ours."""
    log = tmp_path / "T" / "_delta_log"
    log.mkdir(parents=True)
    held = Committed({"orders/0": "2999", "orders/1": "1499"}, epochs={"orders": TOPIC_ID})
    rows = _txns(txn_entries("c", held, 4))
    pq.write_table(pa.table({"txn": pa.array([r["txn"] for r in rows], TXN_TYPE),
                             "add": pa.array([None] * len(rows), pa.struct([("path", pa.string())]))}),
                   log / f"{5:020d}.checkpoint.parquet")
    _commit(log, 5)
    _commit(log, 6, {"add": {"path": "optimized", "size": 1, "dataChange": False}})  # OPTIMIZE elsewhere
    committed, commit = committed_in_log(str(tmp_path / "T"), "c")
    assert committed == held
    assert commit.version == 4 and commit.timestamp_ms == 1_700_000_000_500


def test_a_newer_commit_with_user_metadata_wins_over_older_txns(tmp_path):
    """A table of an older floeline (no txns), and a MERGE statement's commit whose
    txns did not follow (commits.merge): the userMetadata is newer than the stamp."""
    log = tmp_path / "T" / "_delta_log"
    log.mkdir(parents=True)
    _commit(log, 0, *_txns(txn_entries("c", Committed({"t/0": "5"}), 0)),
            metadata=commit_metadata("c", Committed({"t/0": "5"})))
    _commit(log, 1, metadata=commit_metadata("c", Committed({"t/0": "9"})))
    assert committed_in_log(str(tmp_path / "T"), "c")[0] == Committed({"t/0": "9"})
    _commit(log, 2, *_txns(txn_entries("c", Committed({"t/0": "9"}), 2)),
            metadata=commit_metadata("c", Committed({"t/0": "9"})))
    _commit(log, 3, metadata=commit_metadata("other", Committed({"t/0": "1"})))
    committed, commit = committed_in_log(str(tmp_path / "T"), "c")
    assert committed == Committed({"t/0": "9"}) and commit.version == 2
