"""The Kinesis connector's DynamoDB lease table, in the Kinesis Client Library's layout.

The table is named after the application (`kinesis.application.name`) and holds one
item per shard, with KCL 2.x's attribute names and types, so that KCL-aware tooling
reads the connector's progress and so that two connector processes with the same
application name never read the same shards at the same time:

  leaseKey                      S   the table's HASH key: a shard id, or KCL's multi-stream
                                    `account:stream:creationEpoch:shardId` (opaque here)
  leaseOwner                    S   the worker holding the lease (absent: free)
  leaseCounter                  N   +1 on every take and heartbeat; a counter that does not
                                    move for `failover_s` means the owner is dead
  ownerSwitchesSinceCheckpoint  N
  checkpoint                    S   a sequence number (digits, past 64 bits: always text) or
                                    TRIM_HORIZON / LATEST / AT_TIMESTAMP / SHARD_END
  checkpointSubSequenceNumber   N   KPL aggregation's sub-sequence number, else 0
  parentShardId                 SS  only when the shard has parents (sets cannot be empty)

The checkpoints are a mirror advanced after each commit; the Delta tables hold the true
positions. They only serve as a start when a table holds no position for a shard.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError, RetriesExhausted
from floeline.sources import aws as aws_calls

log = logging.getLogger("floeline")

SHARD_END = "SHARD_END"
# KCL's ExtendedSequenceNumber sentinels: a checkpoint that is not a sequence number.
SENTINELS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", SHARD_END)
TABLE_READY_BOUND_S = 120.0

_CONDITION_FAILED = "ConditionalCheckFailedException"
_NO_TABLE = "ResourceNotFoundException"


class LeaseHeldError(FloelineError):
    """Another live worker holds leases this worker needs (another connector with the
    same kinesis.application.name is reading the same shards)."""


class LeaseLostError(FloelineError):
    """A lease this worker held was taken by another worker (or its item or table was
    deleted): this worker must stop reading the shard."""


@dataclass(frozen=True)
class ShardLease:
    """A lease the caller wants: its key and its parents' lease keys."""

    key: str  # leaseKey
    parents: tuple[str, ...] = ()  # parentShardId


@dataclass(frozen=True)
class Checkpoint:
    """What a lease item says about its shard's progress."""

    sequence: str | None  # the checkpointed sequence number (digits); None for a sentinel
    sub_sequence: int  # checkpointSubSequenceNumber
    finished: bool  # checkpoint == SHARD_END: the shard is closed and fully processed
    sentinel: str | None  # TRIM_HORIZON / LATEST / AT_TIMESTAMP / SHARD_END, when not a sequence


def default_worker_id() -> str:
    """A worker id unique to this process (host, pid, random part), like KCL's."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# -- item <-> values (pure) -----------------------------------------------------------

def new_lease_item(lease: ShardLease, initial_sentinel: str) -> dict[str, Any]:
    """The item of a lease nobody holds yet, starting at `initial_sentinel`."""
    item: dict[str, Any] = {
        "leaseKey": {"S": lease.key},
        "leaseCounter": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": initial_sentinel},
        "checkpointSubSequenceNumber": {"N": "0"},
    }
    if lease.parents:
        item["parentShardId"] = {"SS": sorted(set(lease.parents))}
    return item


def checkpoint_from_item(item: dict[str, Any]) -> Checkpoint:
    """The Checkpoint of a lease item (DynamoDB's typed JSON). Any checkpoint text that is
    not digits is a sentinel; an item without one reads as no checkpoint at all."""
    text = item.get("checkpoint", {}).get("S")
    sub = int(item.get("checkpointSubSequenceNumber", {}).get("N", "0"))
    if text is not None and text.isdigit():
        return Checkpoint(sequence=text, sub_sequence=sub, finished=False, sentinel=None)
    return Checkpoint(sequence=None, sub_sequence=sub, finished=text == SHARD_END, sentinel=text)


def checkpoint_values(sequence: str, sub_sequence: int = 0) -> dict[str, Any]:
    """The attribute values that record `sequence` (digits or a sentinel) as a checkpoint."""
    if not isinstance(sequence, str) or not (sequence.isdigit() or sequence in SENTINELS):
        raise ValueError(f"a checkpoint is a sequence number as a digit string or one of "
                         f"{', '.join(SENTINELS)}, not {sequence!r}")
    return {":checkpoint": {"S": sequence}, ":sub": {"N": str(int(sub_sequence))}}


def _owner(item: dict[str, Any] | None) -> str | None:
    return (item or {}).get("leaseOwner", {}).get("S")


def _counter(item: dict[str, Any]) -> int:
    return int(item.get("leaseCounter", {}).get("N", "0"))


# -- the table ------------------------------------------------------------------------

class LeaseTable:
    """One worker's view of the lease table `application_name`: creates it and the lease
    items, takes leases (waiting for other workers' leases to expire), heartbeats them,
    mirrors checkpoints into them, and releases them on a clean stop."""

    def __init__(self, application_name: str, aws: AwsSettings, worker_id: str,
                 failover_s: float = 10.0, initial_sentinel: str = "TRIM_HORIZON"):
        if initial_sentinel not in SENTINELS or initial_sentinel == SHARD_END:
            raise ValueError(f"initial_sentinel must be TRIM_HORIZON, LATEST or AT_TIMESTAMP, "
                             f"not {initial_sentinel!r}")
        self.name = application_name
        self.worker_id = worker_id
        self.failover_s = failover_s
        self.initial_sentinel = initial_sentinel
        self._aws = aws
        self._client = aws_calls.client("dynamodb", aws)
        self._owned: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._error: BaseException | None = None

    @property
    def owned(self) -> frozenset[str]:
        """The lease keys this worker holds (as far as it knows)."""
        with self._lock:
            return frozenset(self._owned)

    def _call(self, what: str, method: str, passthrough: frozenset[str] = frozenset(), **kwargs):
        return aws_calls.call(f"DynamoDB {what} on lease table {self.name}",
                              getattr(self._client, method), endpoint=self._aws.dynamodb_endpoint,
                              passthrough=passthrough, **kwargs)

    # -- table ------------------------------------------------------------------------

    def ensure_table(self) -> None:
        """Create the table if missing (on-demand billing) and wait until it is ACTIVE.
        A concurrent creator (ResourceInUseException) is fine: we wait for its table."""
        deadline = time.monotonic() + TABLE_READY_BOUND_S
        created = False
        while True:
            try:
                table = self._call("DescribeTable", "describe_table", frozenset({_NO_TABLE}),
                                   TableName=self.name)["Table"]
            except Exception as exc:  # noqa: BLE001 - only the passthrough code gets here
                if aws_calls.error_code(exc) != _NO_TABLE:
                    raise
                table = None
            if table is None:
                created = self._create_table() or created
            elif table.get("TableStatus") == "ACTIVE":
                self._check_key_schema(table)
                if created:
                    log.info("lease table %s: created", self.name)
                return
            if time.monotonic() > deadline:
                raise RetriesExhausted(
                    f"lease table {self.name} is not ACTIVE after {TABLE_READY_BOUND_S:.0f} s "
                    f"(status {table and table.get('TableStatus')}); check DynamoDB in the AWS console")
            time.sleep(0.2)

    def _create_table(self) -> bool:
        """CreateTable; False when another worker is creating it already."""
        try:
            self._call("CreateTable", "create_table", frozenset({"ResourceInUseException"}),
                       TableName=self.name, BillingMode="PAY_PER_REQUEST",
                       AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                       KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}])
            return True
        except Exception as exc:  # noqa: BLE001 - only the passthrough code gets here
            if aws_calls.error_code(exc) != "ResourceInUseException":
                raise
            return False

    def _check_key_schema(self, table: dict[str, Any]) -> None:
        """An existing table of another layout would fail every call; say so at once."""
        keys = [(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])]
        if keys != [("leaseKey", "HASH")]:
            raise ConfigError(
                f"DynamoDB table {self.name} exists but is not a KCL lease table (its key is "
                f"{keys}, not leaseKey): set kinesis.application.name to another name")

    # -- taking -----------------------------------------------------------------------

    def take(self, leases: list[ShardLease], wait_s: float | None = None) -> None:
        """Create missing lease items and take every lease: free ones, ours, and ones
        whose leaseCounter did not move for failover_s while we watched (a dead owner).
        Leases held by a live worker are waited for, up to `wait_s` seconds (None:
        forever), renewing the ones already taken meanwhile; then the ones this call
        took are released and LeaseHeldError is raised."""
        by_key = {lease.key: lease for lease in leases}
        for lease in leases:
            self._create_lease(lease)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        watched: dict[str, tuple[str, int, float]] = {}  # key -> (owner, counter, since)
        taken: set[str] = set()
        logged: dict[str, str] = {}
        poll_s = min(1.0, max(0.05, self.failover_s / 4))
        while True:
            held: dict[str, str] = {}  # key -> the live worker holding it
            look_again = False  # an item changed under us: read it again at once
            for key, lease in by_key.items():
                if key in self.owned:
                    continue
                item = self._get(key)
                if item is None:  # deleted since we created it
                    self._create_lease(lease)
                    look_again = True
                    continue
                owner, counter, now = _owner(item), _counter(item), time.monotonic()
                if owner is not None and owner != self.worker_id:
                    seen = watched.get(key)
                    if seen is None or seen[:2] != (owner, counter):
                        watched[key] = (owner, counter, now)
                        held[key] = owner
                        continue
                    if now - seen[2] < self.failover_s:
                        held[key] = owner
                        continue
                    log.warning("lease table %s: lease %s of worker %s expired (no heartbeat for "
                                "%.1f s); taking it", self.name, key, owner, now - seen[2])
                if self._take_one(key, owner, counter):
                    taken.add(key)
                else:
                    look_again = True
            if not held and not look_again:
                return
            if held and held != logged:
                logged = held
                log.warning("lease table %s: waiting for leases held by other workers: %s "
                            "(they can be taken once their owner stops renewing for %g s)",
                            self.name, _describe(held), self.failover_s)
            if held and deadline is not None and time.monotonic() >= deadline:
                self._release(taken)
                raise LeaseHeldError(
                    f"lease table {self.name}: {_describe(held)}, still renewed after waiting "
                    f"{wait_s:g} s. Another connector with kinesis.application.name={self.name} "
                    f"is reading these shards: stop it, or give this connector another "
                    f"kinesis.application.name")
            if held:
                self.renew()  # keep what we took alive while we wait
                time.sleep(poll_s)

    def _create_lease(self, lease: ShardLease) -> None:
        """Put a new lease item unless one exists (a conditional put: never overwrite)."""
        try:
            self._call("PutItem", "put_item", frozenset({_CONDITION_FAILED}), TableName=self.name,
                       Item=new_lease_item(lease, self.initial_sentinel),
                       ConditionExpression="attribute_not_exists(leaseKey)")
            log.info("lease table %s: created lease %s at %s", self.name, lease.key,
                     self.initial_sentinel)
        except Exception as exc:  # noqa: BLE001 - only the passthrough code gets here
            if aws_calls.error_code(exc) != _CONDITION_FAILED:
                raise

    def _take_one(self, key: str, owner: str | None, counter: int) -> bool:
        """Take `key` if it still has the owner and counter we read; False if not."""
        values: dict[str, Any] = {":me": {"S": self.worker_id}, ":one": {"N": "1"},
                                  ":counter": {"N": str(counter)}}
        update = "SET leaseOwner = :me ADD leaseCounter :one"
        if owner is None:
            condition = "attribute_not_exists(leaseOwner)"
        else:
            condition = "leaseOwner = :owner"
            values[":owner"] = {"S": owner}
        # an item without leaseCounter (not written by KCL or us) reads as counter 0
        condition += (" AND leaseCounter = :counter" if counter
                      else " AND (leaseCounter = :counter OR attribute_not_exists(leaseCounter))")
        if owner is not None and owner != self.worker_id:  # KCL counts switches between owners
            update += ", ownerSwitchesSinceCheckpoint :one"
        try:
            self._call("UpdateItem (take)", "update_item", frozenset({_CONDITION_FAILED}),
                       TableName=self.name, Key={"leaseKey": {"S": key}}, UpdateExpression=update,
                       ConditionExpression=condition, ExpressionAttributeValues=values)
        except Exception as exc:  # noqa: BLE001 - only the passthrough code gets here
            if aws_calls.error_code(exc) != _CONDITION_FAILED:
                raise
            return False
        with self._lock:
            self._owned.add(key)
        log.info("lease table %s: worker %s took lease %s", self.name, self.worker_id, key)
        return True

    def _get(self, key: str) -> dict[str, Any] | None:
        return self._call("GetItem", "get_item", TableName=self.name, ConsistentRead=True,
                          Key={"leaseKey": {"S": key}}).get("Item")

    # -- holding ----------------------------------------------------------------------

    def renew(self) -> None:
        """Heartbeat: leaseCounter + 1 on each lease we hold, conditional on holding it.
        A lease another worker took (or that was deleted) raises LeaseLostError."""
        lost = []
        for key in sorted(self.owned):
            try:
                self._call("UpdateItem (renew)", "update_item",
                           frozenset({_CONDITION_FAILED, _NO_TABLE}), TableName=self.name,
                           Key={"leaseKey": {"S": key}}, UpdateExpression="ADD leaseCounter :one",
                           ConditionExpression="leaseOwner = :me",
                           ExpressionAttributeValues={":me": {"S": self.worker_id},
                                                      ":one": {"N": "1"}})
            except Exception as exc:  # noqa: BLE001 - only the passthrough codes get here
                lost.append(self._lost(key, exc))
        if lost:
            raise LeaseLostError(self._lost_message(lost, "renewing"))

    def start_renewing(self, interval_s: float | None = None) -> None:
        """Renew in a daemon thread every `interval_s` (default failover_s / 3) until
        stop(); its first failure ends it and is raised by check()."""
        self.stop()
        interval = self.failover_s / 3 if interval_s is None else interval_s
        self._stopping = stopping = threading.Event()
        self._error = None

        def loop() -> None:
            while not stopping.wait(interval):
                try:
                    self.renew()
                except BaseException as exc:  # noqa: BLE001 - handed to check()
                    log.error("lease table %s: renewal stopped: %s", self.name, exc)
                    self._error = exc
                    return

        self._thread = threading.Thread(target=loop, name=f"lease-renewer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the renewal thread (the leases stay ours until they expire or release())."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def check(self) -> None:
        """Raise the renewal thread's error, if any: call before each commit."""
        if self._error is not None:
            raise self._error

    # -- checkpoints ------------------------------------------------------------------

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every lease item's checkpoint, by lease key."""
        result: dict[str, Checkpoint] = {}
        kwargs: dict[str, Any] = {"TableName": self.name, "ConsistentRead": True}
        while True:
            page = self._call("Scan", "scan", **kwargs)
            for item in page.get("Items", []):
                result[item["leaseKey"]["S"]] = checkpoint_from_item(item)
            if "LastEvaluatedKey" not in page:
                return result
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def checkpoint(self, positions: dict[str, tuple[str, int]],
                   finished: set[str] | frozenset[str] = frozenset()) -> None:
        """After a commit: mirror each lease's (sequence, sub-sequence) into its item, and
        SHARD_END for the `finished` ones; each conditional on our holding the lease.
        All are attempted; any lease not ours then raises LeaseLostError."""
        updates = {key: checkpoint_values(*position) for key, position in positions.items()}
        updates.update({key: checkpoint_values(SHARD_END) for key in finished})
        lost = []
        for key, values in sorted(updates.items()):
            try:
                self._call("UpdateItem (checkpoint)", "update_item",
                           frozenset({_CONDITION_FAILED, _NO_TABLE}), TableName=self.name,
                           Key={"leaseKey": {"S": key}},
                           UpdateExpression="SET checkpoint = :checkpoint, "
                                            "checkpointSubSequenceNumber = :sub, "
                                            "ownerSwitchesSinceCheckpoint = :zero",
                           ConditionExpression="leaseOwner = :me",
                           ExpressionAttributeValues={**values, ":me": {"S": self.worker_id},
                                                      ":zero": {"N": "0"}})
            except Exception as exc:  # noqa: BLE001 - only the passthrough codes get here
                lost.append(self._lost(key, exc))
        if lost:
            raise LeaseLostError(self._lost_message(lost, "checkpointing"))

    def release(self) -> None:
        """On a clean stop: stop renewing and give our leases up (remove leaseOwner, as
        KCL's evict does) so another worker can take them without waiting for failover."""
        self.stop()
        self._release(self.owned)
        log.info("lease table %s: worker %s released its leases", self.name, self.worker_id)

    def _release(self, keys: set[str] | frozenset[str]) -> None:
        for key in sorted(keys):
            try:
                self._call("UpdateItem (release)", "update_item",
                           frozenset({_CONDITION_FAILED, _NO_TABLE}), TableName=self.name,
                           Key={"leaseKey": {"S": key}},
                           UpdateExpression="REMOVE leaseOwner ADD leaseCounter :one",
                           ConditionExpression="leaseOwner = :me",
                           ExpressionAttributeValues={":me": {"S": self.worker_id},
                                                      ":one": {"N": "1"}})
            except Exception as exc:  # noqa: BLE001 - only the passthrough codes get here
                if aws_calls.error_code(exc) not in (_CONDITION_FAILED, _NO_TABLE):
                    raise
                log.info("lease table %s: lease %s was no longer ours to release", self.name, key)
            with self._lock:
                self._owned.discard(key)

    # -- losing -----------------------------------------------------------------------

    def _lost(self, key: str, exc: BaseException) -> tuple[str, str]:
        """(key, who has it now) for a conditional update that failed; forgets the lease."""
        code = aws_calls.error_code(exc)
        if code not in (_CONDITION_FAILED, _NO_TABLE):
            raise exc
        with self._lock:
            self._owned.discard(key)
        if code == _NO_TABLE:
            return key, "nobody (the lease table was deleted)"
        item = self._get(key)
        if item is None:
            return key, "nobody (its lease item was deleted)"
        return key, f"worker {_owner(item)}" if _owner(item) else "nobody (it was released)"

    def _lost_message(self, lost: list[tuple[str, str]], doing: str) -> str:
        leases = "; ".join(f"lease {key} now held by {who}" for key, who in lost)
        return (f"lease table {self.name}: worker {self.worker_id} lost leases while {doing}: "
                f"{leases}. This worker must stop reading those shards; it happens when it "
                f"missed heartbeats for {self.failover_s:g} s, when another connector uses "
                f"kinesis.application.name={self.name}, or when the table was changed by hand")


def _describe(held: dict[str, str]) -> str:
    """'worker A holds k1, k2; worker B holds k3'."""
    by_owner: dict[str, list[str]] = {}
    for key, owner in sorted(held.items()):
        by_owner.setdefault(owner, []).append(key)
    return "; ".join(f"worker {owner} holds {', '.join(keys)}" for owner, keys in by_owner.items())
