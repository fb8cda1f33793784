"""Where the Kinesis reader stands, as Spark's offset log holds it, and the shard rules
(pure functions, no Kinesis): where each shard starts, which shards may be read now,
and what a logged batch read when Spark replays it.

The offset holds, per channel (`stream/shardId`), the last sequence number read (`p`;
null with `from` saying where reading starts), and `done` once a closed shard has been
read to its end:

    {"shards": {"orders/shardId-000000000000": {"done": false, "p": "4959..."},
                "orders/shardId-000000000001": {"done": false, "from": "TRIM_HORIZON", "p": null}},
     "v": 1}

A child shard is read only once all its listed parents are done (per partition key,
records keep their order across splits and merges)."""

from __future__ import annotations

import json
import logging
from typing import NamedTuple

from floeline.errors import FloelineError
from floeline.sources.base import position_after
from floeline.sources.kinesis.spec import FORMAT, TRIM_HORIZON, Spec

log = logging.getLogger("floeline")

OFFSET_VERSION = 1


class ShardState(NamedTuple):
    """A shard's place in an offset: the last sequence number read (None: nothing yet,
    then `start` says where reading starts), and whether it is read to its end."""

    p: str | None
    start: str | None = TRIM_HORIZON
    done: bool = False


class Shard(NamedTuple):
    """A shard as ListShards shows it: its channel id and its parents' channel ids."""

    channel: str
    parents: tuple[str, ...] = ()


def channel_id(stream: str, shard_id: str) -> str:
    return f"{stream}/{shard_id}"


def split_channel(channel: str) -> tuple[str, str]:
    """(stream, shardId) of a channel id (stream names cannot hold '/')."""
    stream, _, shard_id = channel.partition("/")
    return stream, shard_id


def encode_offset(states: dict[str, ShardState]) -> dict:
    """The offset dict: sorted keys (Spark's wrapper compares offsets as JSON text) and
    `from` only while nothing is read."""
    shards = {}
    for channel in sorted(states):
        p, start, done = states[channel]
        shards[channel] = {"done": done, "p": p} if p is not None else \
            {"done": done, "from": start or TRIM_HORIZON, "p": None}
    return {"shards": shards, "v": OFFSET_VERSION}


def decode_offset(offset: dict | str) -> dict[str, ShardState]:
    """The shard states of an offset (dict or its JSON)."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    if not isinstance(offset, dict) or offset.get("v") != OFFSET_VERSION:
        raise FloelineError(f"not a {FORMAT} offset of version {OFFSET_VERSION}: {str(offset)[:200]}")
    states = {}
    for channel, entry in offset["shards"].items():
        p = entry.get("p")
        states[channel] = ShardState(p, None if p is not None else entry.get("from", TRIM_HORIZON),
                                     bool(entry.get("done", False)))
    return states


def ancestors(channel: str, parents: dict[str, tuple[str, ...]]) -> set[str]:
    """Every shard `channel` descends from, as far as the listing knows."""
    seen: set[str] = set()
    todo = list(parents.get(channel, ()))
    while todo:
        parent = todo.pop()
        if parent not in seen:
            seen.add(parent)
            todo.extend(parents.get(parent, ()))
    return seen


def start_states(shards: list[Shard], committed: dict[str, str], finished: frozenset[str] | set[str],
                 initial: str, earliest: frozenset[str] | set[str] = frozenset()
                 ) -> dict[str, ShardState]:
    """Where each shard starts when the query starts without a Spark checkpoint.

    A committed shard goes on right after its position; a finished one is done. A
    shard descending from a committed or finished one, or one an offsets change reset
    to its earliest record (`earliest`), starts at TRIM_HORIZON (we were reading its
    lineage, so all of it is new to us); any other at the initial position. A shard that a committed or finished shard descends from was read
    before it, so it is done."""
    parents = {s.channel: s.parents for s in shards}
    consumed = set(committed) | set(finished)
    read_before = set().union(*(ancestors(c, parents) for c in consumed)) if consumed else set()
    states = {}
    for shard in shards:
        ch = shard.channel
        if ch in finished:
            states[ch] = ShardState(committed.get(ch), None if ch in committed else TRIM_HORIZON, True)
        elif ch in committed:
            states[ch] = ShardState(committed[ch], None, False)
        elif ch in read_before:
            states[ch] = ShardState(None, TRIM_HORIZON, True)
        elif ch in earliest or ancestors(ch, parents) & consumed:
            states[ch] = ShardState(None, TRIM_HORIZON, False)
        else:
            states[ch] = ShardState(None, initial, False)
    return states


def merge_listing(states: dict[str, ShardState], shards: list[Shard], spec: Spec
                  ) -> dict[str, ShardState]:
    """The offset's shards after a fresh listing: shards that appeared while running
    start at TRIM_HORIZON (a stream new to the offset starts as initialOffset would);
    shards no longer listed (expired) are dropped."""
    merged = {ch: s for ch, s in states.items() if ch in {sh.channel for sh in shards}}
    for ch in sorted(set(states) - set(merged)):
        if not states[ch].done and split_channel(ch)[0] in spec.streams:
            log.warning("Kinesis shard %s is no longer listed (expired after the stream's "
                        "retention period) before it was read to its end", ch)
    known_streams = {split_channel(ch)[0] for ch in states}
    new_streams = [s for s in shards if split_channel(s.channel)[0] not in known_streams]
    fresh = start_states(new_streams, spec.committed, spec.finished, spec.initial, spec.earliest)
    for shard in shards:
        if shard.channel not in merged:
            merged[shard.channel] = fresh.get(shard.channel, ShardState(None, TRIM_HORIZON, False))
    return merged


def readable(states: dict[str, ShardState], shards: list[Shard]) -> list[str]:
    """The channels that may be read now: not done, and every parent that is still
    listed is done (a parent no longer listed has expired: it counts as done)."""
    listed = {s.channel for s in shards}
    out = []
    for shard in shards:
        state = states.get(shard.channel)
        if state is None or state.done:
            continue
        if all(states.get(p, ShardState(None)).done for p in shard.parents if p in listed):
            out.append(shard.channel)
    return sorted(out)


def replay_ranges(start: dict[str, ShardState], end: dict[str, ShardState]
                  ) -> list[tuple[str, ShardState, str]]:
    """(channel, where it starts, last sequence number) for each shard a batch read
    records from: those whose position moved between `start` and `end`."""
    ranges = []
    for channel in sorted(end):
        last = end[channel].p
        first = start.get(channel, ShardState(None, TRIM_HORIZON, False))
        if last is None or last == first.p:
            continue
        if first.p is not None and not position_after(last, first.p):
            raise FloelineError(f"offsets of {channel} go backwards: {first.p} -> {last}")
        ranges.append((channel, first, last))
    return ranges


def resume_point(state: ShardState) -> tuple[str, str | None]:
    """(ShardIteratorType, its argument) to read what follows `state`."""
    if state.p is not None:
        return "AFTER_SEQUENCE_NUMBER", state.p
    start = state.start or TRIM_HORIZON
    if start.startswith("AT_TIMESTAMP:"):
        return "AT_TIMESTAMP", start.partition(":")[2]
    if start != TRIM_HORIZON:
        raise FloelineError(f"unknown start {start!r} in a {FORMAT} offset")
    return TRIM_HORIZON, None
