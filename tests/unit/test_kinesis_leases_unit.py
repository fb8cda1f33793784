"""The lease table's pure parts: lease items <-> Checkpoint, in KCL's layout."""

import os
import re

import pytest

from floeline.config.kinesis import AwsSettings
from floeline.sources.kinesis.leases import (
    Checkpoint,
    LeaseTable,
    ShardLease,
    checkpoint_from_item,
    checkpoint_values,
    default_worker_id,
    new_lease_item,
)

SEQ56 = "49590338271490256608559692538361571095921575989136588898"


def test_new_lease_item_without_parents_has_no_parent_set():
    item = new_lease_item(ShardLease("shardId-000000000001"), "TRIM_HORIZON")
    assert item == {
        "leaseKey": {"S": "shardId-000000000001"},
        "leaseCounter": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": "TRIM_HORIZON"},
        "checkpointSubSequenceNumber": {"N": "0"},
    }
    assert "leaseOwner" not in item  # a new lease is free


def test_new_lease_item_parents_are_a_string_set():
    lease = ShardLease("shardId-000000000003", parents=("shardId-000000000002", "shardId-000000000001"))
    item = new_lease_item(lease, "LATEST")
    assert item["parentShardId"] == {"SS": ["shardId-000000000001", "shardId-000000000002"]}
    assert item["checkpoint"] == {"S": "LATEST"}


def test_checkpoint_from_item_sequence_stays_text():
    item = {"leaseKey": {"S": "k"}, "checkpoint": {"S": SEQ56},
            "checkpointSubSequenceNumber": {"N": "7"}}
    cp = checkpoint_from_item(item)
    assert cp == Checkpoint(sequence=SEQ56, sub_sequence=7, finished=False, sentinel=None)
    assert isinstance(cp.sequence, str)


@pytest.mark.parametrize("sentinel", ["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"])
def test_checkpoint_from_item_start_sentinels(sentinel):
    cp = checkpoint_from_item({"checkpoint": {"S": sentinel}, "checkpointSubSequenceNumber": {"N": "0"}})
    assert cp == Checkpoint(sequence=None, sub_sequence=0, finished=False, sentinel=sentinel)


def test_checkpoint_from_item_shard_end_is_finished():
    cp = checkpoint_from_item({"checkpoint": {"S": "SHARD_END"}, "checkpointSubSequenceNumber": {"N": "0"}})
    assert cp == Checkpoint(sequence=None, sub_sequence=0, finished=True, sentinel="SHARD_END")


def test_checkpoint_from_item_without_checkpoint():
    assert checkpoint_from_item({"leaseKey": {"S": "k"}}) == Checkpoint(None, 0, False, None)


def test_checkpoint_values_round_trip_through_item():
    values = checkpoint_values(SEQ56, 2)
    assert values == {":checkpoint": {"S": SEQ56}, ":sub": {"N": "2"}}
    item = {"checkpoint": values[":checkpoint"], "checkpointSubSequenceNumber": values[":sub"]}
    assert checkpoint_from_item(item) == Checkpoint(SEQ56, 2, False, None)
    assert checkpoint_from_item({"checkpoint": checkpoint_values("SHARD_END")[":checkpoint"]}).finished


@pytest.mark.parametrize("bad", [12345, "12a", "", "shard_end"])
def test_checkpoint_values_rejects_non_sequences(bad):
    with pytest.raises(ValueError, match="digit string"):
        checkpoint_values(bad)


def test_default_worker_id_is_host_pid_random():
    a, b = default_worker_id(), default_worker_id()
    assert re.fullmatch(rf".+:{os.getpid()}:[0-9a-f]{{8}}", a)
    assert a != b


def test_initial_sentinel_must_be_a_start_position():
    with pytest.raises(ValueError, match="initial_sentinel"):
        LeaseTable("app", AwsSettings(region="us-east-1"), "w", initial_sentinel="SHARD_END")
