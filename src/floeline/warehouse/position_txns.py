"""A connector's positions as Delta `txn` (SetTransaction) actions: the form Delta's
checkpoints keep.

A commit's userMetadata (positions.py) lives only in its JSON commit file, which Delta
deletes once it is older than delta.logRetentionDuration (30 days) and a later
checkpoint exists; checkpoints keep no commitInfo. A table's snapshot keeps, for every
txn appId ever committed, the latest version, and every checkpoint writer (Spark,
delta-rs, ...) carries them over, as kafka-delta-ingest relies on for its offsets. So
each commit floeline makes also writes this connector's positions as txn actions, and
a start reads them from the snapshot (delta_log.transactions without Spark).

A txn is an (appId, version: a signed 64-bit integer) pair and an appId is never
removed, so the encoding keeps one fixed set of appIds per connector and channel and
overwrites their versions. Each appId is `floeline:` and a JSON array:

    ["<connector>"]                      the Delta version the commit expected (its stamp)
    ["<connector>", "<channel>"]         the channel's state:
                                           >= 0      its position (up to 18 digits)
                                           -1        nothing (no position)
                                           -2        reset to its earliest record
                                           -3        finished, no position
                                           -10 - k   its position, in k parts
                                           -100 - k  finished, its position in k parts
    ["<connector>", "<channel>", i]      part i of a longer position (Kinesis sequence
                                         numbers run to 56 digits): 18 digits each, the
                                         first part the leading digits
    ["<connector>", null, "change", h]   the latest offsets change's id (32 hex digits)
                                         as two halves, h = 0, 1
    ["<connector>", null, "epoch", "<route>", h]   a route's epoch (a Kafka topic id,
                                         32 hex digits) as two halves

Parts and halves are signed 64-bit two's complement of the hex digits. Every commit
writes every entry of the connector's positions for the table, so whatever a commit
leaves out no longer matters (a stale part beyond k is never read)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from floeline.sources.base import Committed

PREFIX = "floeline:"
NO_POSITION, EARLIEST, FINISHED = -1, -2, -3
_PARTS, _FINISHED_PARTS = -10, -100
_PART_DIGITS = 18  # the most decimal digits that always fit a signed 64-bit integer


@dataclass(frozen=True)
class HeldInTxns:
    """What a table's txn actions say of one connector: its positions, and the
    version of the commit that wrote them last (its stamp: -1 when unknown)."""

    committed: Committed
    stamp: int


def txn_entries(connector: str, committed: Committed, stamp: int) -> dict[str, int]:
    """The txn actions (appId -> version) of `connector`'s positions `committed`, for a
    commit expected to be the table's version `stamp`."""
    entries = {_app_id(connector): stamp}
    channels = set(committed.positions) | committed.finished | committed.earliest
    for channel in sorted(channels):
        position = committed.positions.get(channel)
        finished = channel in committed.finished
        if position is None:
            entries[_app_id(connector, channel)] = FINISHED if finished else EARLIEST
            continue
        _check_digits(position, f"channel {channel}'s position")
        if len(position) <= _PART_DIGITS:
            if not finished:
                entries[_app_id(connector, channel)] = int(position)
                continue
            parts = [position]
        else:
            parts = _digit_parts(position)
        base = _FINISHED_PARTS if finished else _PARTS
        entries[_app_id(connector, channel)] = base - len(parts)
        for i, part in enumerate(parts):
            entries[_app_id(connector, channel, i)] = int(part)
    if committed.change is not None:
        for half, value in enumerate(_hex_halves(committed.change, "offsets change id")):
            entries[_app_id(connector, None, "change", half)] = value
    for route, epoch in sorted(committed.epochs.items()):
        for half, value in enumerate(_hex_halves(epoch, f"route {route}'s epoch")):
            entries[_app_id(connector, None, "epoch", route, half)] = value
    return entries


def held_in_txns(connector: str, txns: dict[str, int]) -> HeldInTxns | None:
    """`connector`'s positions in a snapshot's txns (appId -> version); None when it
    has none there (a table written before positions were kept as txns)."""
    mine: dict[tuple, int] = {}
    for app_id, version in txns.items():
        key = _key_of(app_id)
        if key and key[0] == connector:
            mine[tuple(key[1:])] = version
    if () not in mine:
        return None
    committed = Committed()
    for key, state in mine.items():
        if len(key) != 1 or key[0] is None:
            continue
        channel = key[0]
        if state >= 0:
            committed.positions[channel] = str(state)
        elif state == EARLIEST:
            committed.earliest.add(channel)
        elif state == FINISHED:
            committed.finished.add(channel)
        elif state <= _PARTS:
            finished = state <= _FINISHED_PARTS
            count = (_FINISHED_PARTS if finished else _PARTS) - state
            parts = [mine.get((channel, i)) for i in range(count)]
            if any(p is None or p < 0 for p in parts):
                raise ValueError(f"the txn actions of connector {connector} lack part of "
                                 f"channel {channel}'s position")
            committed.positions[channel] = _join_parts(parts)
            if finished:
                committed.finished.add(channel)
    change = _halves_to_hex(mine.get((None, "change", 0)), mine.get((None, "change", 1)))
    committed.change = change
    routes = {key[2] for key in mine if len(key) == 4 and key[:2] == (None, "epoch")}
    for route in routes:
        epoch = _halves_to_hex(mine.get((None, "epoch", route, 0)), mine.get((None, "epoch", route, 1)))
        if epoch is not None:
            committed.epochs[route] = epoch
    return HeldInTxns(committed, mine[()])


def stamp_app_id(connector: str) -> str:
    """The appId of the connector's stamp (the version of its last commit)."""
    return _app_id(connector)


def _app_id(connector: str, *rest) -> str:
    return PREFIX + json.dumps([connector, *rest], separators=(",", ":"), ensure_ascii=False)


def _key_of(app_id: str) -> list | None:
    """The JSON array of one of floeline's appIds; None for anyone else's."""
    if not app_id.startswith(PREFIX):
        return None
    try:
        key = json.loads(app_id[len(PREFIX):])
    except ValueError:
        return None
    return key if isinstance(key, list) and key and isinstance(key[0], str) else None


def _check_digits(position: str, what: str) -> None:
    if not position.isdigit() or not position.isascii() or (len(position) > 1 and position[0] == "0"):
        raise ValueError(f"{what} {position!r} is not a canonical digit string")


def _digit_parts(position: str) -> list[str]:
    """A long position's parts: the leading digits, then 18 digits each."""
    head = len(position) % _PART_DIGITS or _PART_DIGITS
    return [position[:head]] + [position[i:i + _PART_DIGITS]
                                for i in range(head, len(position), _PART_DIGITS)]


def _join_parts(parts: list[int]) -> str:
    return str(parts[0]) + "".join(f"{p:0{_PART_DIGITS}d}" for p in parts[1:])


def _hex_halves(value: str, what: str) -> tuple[int, int]:
    """32 hex digits as two signed 64-bit integers."""
    if len(value) != 32:
        raise ValueError(f"{what} {value!r} is not 32 hex digits")
    try:
        high, low = int(value[:16], 16), int(value[16:], 16)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not 32 hex digits") from None
    return _signed(high), _signed(low)


def _halves_to_hex(high: int | None, low: int | None) -> str | None:
    if high is None or low is None:
        return None
    return f"{high & 0xFFFFFFFFFFFFFFFF:016x}{low & 0xFFFFFFFFFFFFFFFF:016x}"


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
