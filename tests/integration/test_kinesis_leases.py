"""The Kinesis lease table against a real DynamoDB endpoint (moto's server): KCL's item
layout, taking, heartbeats, failover, checkpoints, release, a wiped table. Uses
conftest's `aws` fixture (its `settings()`)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from floeline.sources.aws import client
from floeline.sources.kinesis.leases import (
    Checkpoint,
    LeaseHeldError,
    LeaseLostError,
    LeaseTable,
    ShardLease,
)

SEQ56 = "49590338271490256608559692538361571095921575989136588898"
FAILOVER_S = 1.0
S0, S1, S2 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"


@pytest.fixture
def app():
    return f"app-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def dynamodb(aws):
    return client("dynamodb", aws.settings())


@pytest.fixture
def worker(aws, app):
    """LeaseTable(app, ...) for a named worker; stops every renewal thread at the end."""
    made = []

    def make(worker_id: str, **kwargs) -> LeaseTable:
        table = LeaseTable(app, aws.settings(), worker_id, failover_s=FAILOVER_S, **kwargs)
        made.append(table)
        return table
    yield make
    for table in made:
        table.stop()


def raw(dynamodb, app, key):
    return dynamodb.get_item(TableName=app, Key={"leaseKey": {"S": key}}, ConsistentRead=True)["Item"]


def test_two_workers_racing_create_one_table(worker, dynamodb, app):
    a, b = worker("a"), worker("b")
    start, errors = threading.Barrier(2), []

    def ensure(table):
        start.wait()
        try:
            table.ensure_table()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(t,)) for t in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    table = dynamodb.describe_table(TableName=app)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert table["KeySchema"] == [{"AttributeName": "leaseKey", "KeyType": "HASH"}]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert dynamodb.list_tables()["TableNames"].count(app) == 1
    a.ensure_table()  # again: nothing to do


def test_take_creates_leases_in_kcl_layout(worker, dynamodb, app):
    a = worker("worker-a", initial_sentinel="LATEST")
    a.ensure_table()
    a.take([ShardLease(S0), ShardLease(S2, parents=(S0, S1))])
    assert a.owned == {S0, S2}

    child = raw(dynamodb, app, S2)
    assert sorted(child.pop("parentShardId")["SS"]) == [S0, S1]  # SS: a set, in no set order
    assert child == {
        "leaseKey": {"S": S2},
        "leaseOwner": {"S": "worker-a"},
        "leaseCounter": {"N": "1"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": "LATEST"},
        "checkpointSubSequenceNumber": {"N": "0"},
    }
    assert "parentShardId" not in raw(dynamodb, app, S0)  # no parents: no (empty) set
    assert a.checkpoints() == {S0: Checkpoint(None, 0, False, "LATEST"),
                               S2: Checkpoint(None, 0, False, "LATEST")}

    # a second take of the same leases by the same worker changes nothing
    a.take([ShardLease(S0), ShardLease(S2, parents=(S0, S1))], wait_s=0)
    assert raw(dynamodb, app, S2)["leaseCounter"] == {"N": "1"}


def test_checkpoint_round_trip_keeps_long_sequence_numbers_as_text(worker, dynamodb, app):
    a = worker("worker-a")
    a.ensure_table()
    a.take([ShardLease(S0), ShardLease(S1), ShardLease(S2)])
    a.checkpoint({S0: (SEQ56, 3), S1: ("17", 0)}, finished={S2})

    assert a.checkpoints() == {
        S0: Checkpoint(sequence=SEQ56, sub_sequence=3, finished=False, sentinel=None),
        S1: Checkpoint(sequence="17", sub_sequence=0, finished=False, sentinel=None),
        S2: Checkpoint(sequence=None, sub_sequence=0, finished=True, sentinel="SHARD_END"),
    }
    item = raw(dynamodb, app, S0)
    assert item["checkpoint"] == {"S": SEQ56}
    assert item["checkpointSubSequenceNumber"] == {"N": "3"}
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "0"}
    assert raw(dynamodb, app, S2)["checkpoint"] == {"S": "SHARD_END"}


def test_checkpoints_reads_every_page(worker, dynamodb, app):
    a = worker("worker-a")
    a.ensure_table()
    pad = "x" * 350_000  # items of ~350 KB: a 1 MB Scan page holds two of them
    for i in range(5):  # items another KCL-aware tool wrote, with an attribute of its own
        dynamodb.put_item(TableName=app, Item={
            "leaseKey": {"S": f"shardId-{i:012d}"}, "leaseCounter": {"N": "0"},
            "checkpoint": {"S": str(10 ** 40 + i)}, "checkpointSubSequenceNumber": {"N": "0"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"}, "padding": {"S": pad}})
    assert "LastEvaluatedKey" in dynamodb.scan(TableName=app)  # more than one page
    assert a.checkpoints() == {f"shardId-{i:012d}": Checkpoint(str(10 ** 40 + i), 0, False, None)
                               for i in range(5)}


def test_live_owner_blocks_then_failover_and_the_old_owner_loses(worker, dynamodb, app):
    a, b = worker("worker-a"), worker("worker-b")
    a.ensure_table()
    a.take([ShardLease(S0)])
    a.start_renewing()

    started = time.monotonic()
    with pytest.raises(LeaseHeldError) as held:
        b.take([ShardLease(S0), ShardLease(S1)], wait_s=1)
    assert time.monotonic() - started >= 1
    message = str(held.value)
    assert app in message and S0 in message and "worker-a" in message
    assert "kinesis.application.name" in message
    assert "leaseOwner" not in raw(dynamodb, app, S1)
    assert b.owned == set()  # what b took in the failed call (S1) was given back
    a.check()  # a's heartbeats are fine

    a.stop()  # a hangs: no more heartbeats
    started = time.monotonic()
    b.take([ShardLease(S0)], wait_s=10)
    assert time.monotonic() - started >= FAILOVER_S
    item = raw(dynamodb, app, S0)
    assert item["leaseOwner"] == {"S": "worker-b"}
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "1"}

    with pytest.raises(LeaseLostError, match=f"{S0} now held by worker worker-b"):
        a.renew()
    assert a.owned == set()
    with pytest.raises(LeaseLostError, match=f"{S0} now held by worker worker-b"):
        a.checkpoint({S0: ("42", 0)})  # a commit racing the takeover: not mirrored
    assert b.checkpoints()[S0].sentinel == "TRIM_HORIZON"  # a's late checkpoint did not land


def test_renewal_thread_failure_is_raised_by_check(worker, dynamodb, app):
    a = worker("worker-a")
    a.ensure_table()
    a.take([ShardLease(S0)])
    a.start_renewing(interval_s=0.05)
    dynamodb.update_item(TableName=app, Key={"leaseKey": {"S": S0}},
                         UpdateExpression="SET leaseOwner = :o",
                         ExpressionAttributeValues={":o": {"S": "intruder"}})
    deadline = time.monotonic() + 5
    while True:
        try:
            a.check()
        except LeaseLostError as exc:
            assert "intruder" in str(exc) and S0 in str(exc)
            break
        assert time.monotonic() < deadline, "the renewal thread did not notice the lost lease"
        time.sleep(0.05)


def test_release_lets_another_worker_take_at_once(worker, dynamodb, app):
    a, b = worker("worker-a"), worker("worker-b")
    a.ensure_table()
    a.take([ShardLease(S0), ShardLease(S1)])
    a.start_renewing()
    a.checkpoint({S0: ("100", 0)})
    a.release()
    assert a.owned == set()
    assert "leaseOwner" not in raw(dynamodb, app, S0)

    started = time.monotonic()
    b.take([ShardLease(S0), ShardLease(S1)], wait_s=0)
    assert time.monotonic() - started < FAILOVER_S
    assert b.owned == {S0, S1}
    assert b.checkpoints()[S0] == Checkpoint("100", 0, False, None)


def test_wiped_table_is_recreated(worker, dynamodb, app):
    a = worker("worker-a")
    a.ensure_table()
    a.take([ShardLease(S0)])
    a.checkpoint({S0: ("5", 0)})

    dynamodb.delete_table(TableName=app)
    with pytest.raises(LeaseLostError, match="deleted"):
        a.renew()

    a.ensure_table()
    assert a.checkpoints() == {}
    a.take([ShardLease(S0), ShardLease(S1, parents=(S0,))])
    assert a.owned == {S0, S1}
    assert a.checkpoints() == {S0: Checkpoint(None, 0, False, "TRIM_HORIZON"),
                               S1: Checkpoint(None, 0, False, "TRIM_HORIZON")}
    assert raw(dynamodb, app, S1)["parentShardId"] == {"SS": [S0]}
