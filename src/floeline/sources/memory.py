"""A source without a broker, for testing the shared pipeline: channels are append-only
logs in a local directory (one JSON-lines file per channel), read by a small Spark
data source. It behaves like the real sources where the pipeline can tell: channels,
routes, positions (any number of digits: a log can start at any position, e.g. past
64 bits), per-channel batch limits, finished channels, Trigger.AvailableNow and
exact replays of a logged batch.

    log = MemoryLog(tmp_path)
    log.append("orders/0", "orders", [b'{"id": 1}', b'{"id": 2}'])
    Connector(config, spark, source=MemorySource(config, log)).run(until_caught_up=True)

Routes map to tables by the Kafka connector's topic rule (and topic2table.map)."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from floeline.naming import table_for_topic
from floeline.records.metadata import null_metadata_sql, object_sql
from floeline.sources.base import BatchEnd, Channel, Committed, InProcessSource, position_after

FORMAT = "floeline_memory"
SCHEMA = ("channel STRING, position STRING, route STRING, key BINARY, value BINARY, "
          "timestamp TIMESTAMP")
NORMALIZED_MEMORY = (
    "channel", "position", "route", "key", "value",
    "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers", "timestamp",
    "named_struct('channel', channel, 'position', position) AS source",
)


class MemoryLog:
    """The channels' records on disk: `<dir>/<n>.jsonl` per channel, and
    `channels.json` naming each channel's file, route, first position and whether
    it is finished (closed: nothing more will be appended)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _manifest(self) -> dict:
        path = self.dir / "channels.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _save(self, manifest: dict) -> None:
        tmp = self.dir / "channels.json.tmp"
        tmp.write_text(json.dumps(manifest, sort_keys=True))
        tmp.replace(self.dir / "channels.json")

    def append(self, channel: str, route: str, values, keys=None, first_position: int = 0) -> None:
        """Append records (bytes, str, or None for a tombstone) to `channel`."""
        manifest = self._manifest()
        self._write(manifest, channel, route, values, keys, first_position)
        self._save(manifest)

    def add_channels(self, channels) -> None:
        """Add new channels with their first records, (channel, route, values) each, in
        one save of the manifest: a micro-batch sees all of them or none. (Records
        appended to a channel the log has are read as soon as they are written.)"""
        manifest = self._manifest()
        existing = [c for c, _route, _values in channels if c in manifest]
        if existing:
            raise ValueError(f"channel {existing[0]} exists")
        for channel, route, values in channels:
            self._write(manifest, channel, route, values)
        self._save(manifest)

    def _write(self, manifest: dict, channel: str, route: str, values, keys=None, first_position: int = 0) -> None:
        entry = manifest.setdefault(channel, {"file": f"{len(manifest)}.jsonl", "route": route,
                                              "first": str(first_position), "finished": False})
        if entry["finished"]:
            raise ValueError(f"channel {channel} is finished")
        now = int(time.time() * 1000)
        with open(self.dir / entry["file"], "a", encoding="utf-8") as f:
            for i, value in enumerate(values):
                key = keys[i] if keys else None
                f.write(json.dumps({"k": _b64(key), "v": _b64(value), "t": now}) + "\n")

    def finish(self, channel: str) -> None:
        manifest = self._manifest()
        manifest[channel]["finished"] = True
        self._save(manifest)

    def channels(self) -> dict:
        return self._manifest()

    def records(self, channel: str) -> list[tuple[str, dict]]:
        """(position, record) of every record of `channel`, in order."""
        entry = self._manifest()[channel]
        path = self.dir / entry["file"]
        if not path.exists():
            return []
        first = int(entry["first"])
        with open(path, encoding="utf-8") as f:
            return [(str(first + i), json.loads(line)) for i, line in enumerate(f)]


def _b64(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).decode("ascii")


class MemorySource(InProcessSource):
    kind = "memory"
    has_headers = False
    has_standby = False
    bounded_read_tasks = False

    def __init__(self, config, log: MemoryLog):
        self.config, self.log = config, log
        self._first: BatchEnd | None = None

    def channels(self) -> list[Channel]:
        return [Channel(c, e["route"]) for c, e in sorted(self.log.channels().items())]

    def table_name(self, route: str) -> str:
        return table_for_topic(route, self.config.topic_map, self.config.table_name_sanitization)

    def route_of(self, channel: str) -> str:
        return self.log.channels()[channel]["route"]

    def open(self, spark, committed: Committed, has_checkpoint: bool):
        self._first = BatchEnd(dict(committed.positions), frozenset(committed.finished))
        spec = {"dir": str(self.log.dir), "committed": committed.positions,
                "finished": sorted(committed.finished), "limit": self.config.count_records}
        spark.dataSource.register(MemoryDataSource)
        return spark.readStream.format(FORMAT).option("spec", json.dumps(spec)).load()

    def normalize(self, batch):
        return batch.selectExpr(*NORMALIZED_MEMORY)

    def batch_end(self, offset_json: str) -> BatchEnd | None:
        try:
            channels = json.loads(offset_json)["channels"]
        except (ValueError, KeyError, TypeError):
            return None
        return BatchEnd({c: s["p"] for c, s in channels.items() if s["p"] is not None},
                        frozenset(c for c, s in channels.items() if s["done"]))

    def start_of_first_batch(self) -> BatchEnd | None:
        return self._first

    def metadata_sql(self, flags, push_time_sql, key_json=None, headers_json=None, extra=(),
                     function=None, as_json=False) -> str:
        if not flags.all_:
            return null_metadata_sql(as_json)
        return object_sql([[("'channel', channel, 'position', position", "true")], *extra], as_json)

    def describe(self, fields: dict) -> str:
        return f"channel={fields.get('channel')} position={fields.get('position')}"


class MemoryDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema):
        return MemoryStreamReader(json.loads(self.options["spec"]))


class MemoryStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: {"channels": {channel: {"p": last position read or null, "done": bool}}}."""

    def __init__(self, spec: dict):
        self.log = MemoryLog(spec["dir"])
        self.committed, self.finished = spec["committed"], set(spec["finished"])
        self.limit = int(spec["limit"])
        self.target: dict[str, int] | None = None  # AvailableNow: records per channel then

    def initialOffset(self) -> dict:
        return {"channels": {c: {"p": self.committed.get(c), "done": c in self.finished}
                             for c in sorted(self.log.channels())}}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {c: len(self.log.records(c)) for c in self.log.channels()}

    def read(self, start: dict):
        channels = dict(start["channels"])
        rows = []
        for channel, entry in sorted(self.log.channels().items()):
            state = channels.get(channel, {"p": None, "done": False})
            if state["done"]:
                continue
            records = self.log.records(channel)
            if self.target is not None:
                records = records[:self.target.get(channel, 0)]
            new = [(p, r) for p, r in records if state["p"] is None or position_after(p, state["p"])]
            taken = new[:self.limit]
            rows += [_row(channel, entry["route"], p, r) for p, r in taken]
            last = taken[-1][0] if taken else state["p"]
            done = entry["finished"] and len(taken) == len(new) and (
                self.target is None or self.target.get(channel, 0) == len(self.log.records(channel)))
            channels[channel] = {"p": last, "done": done}
        return iter(rows), {"channels": dict(sorted(channels.items()))}

    def readBetweenOffsets(self, start: dict, end: dict):
        rows = []
        for channel, last in end["channels"].items():
            before = start["channels"].get(channel, {"p": None})["p"]
            if last["p"] is None or last["p"] == before:
                continue
            route = self.log.channels()[channel]["route"]
            rows += [_row(channel, route, p, r) for p, r in self.log.records(channel)
                     if (before is None or position_after(p, before)) and not position_after(p, last["p"])]
        return iter(rows)

    def commit(self, end: dict) -> None:
        pass


def _row(channel: str, route: str, position: str, record: dict) -> tuple:
    from datetime import datetime, timezone

    def raw(text):
        return None if text is None else base64.b64decode(text)
    return (channel, position, route, raw(record["k"]), raw(record["v"]),
            datetime.fromtimestamp(record["t"] / 1000, tz=timezone.utc))
