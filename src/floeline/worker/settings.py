"""The worker's own settings (worker.properties, Java properties as a Kafka Connect
worker's): where it listens, which warehouse and Spark it uses, and the defaults every
connector it runs inherits unless the connector sets its own.

    listeners=http://127.0.0.1:8083         the REST listener (Connect's port; never 0.0.0.0 unless given)
    floeline.warehouse=./warehouse          (default $FLOELINE_WAREHOUSE, else ./warehouse)
    floeline.checkpoint.dir=ROOT            each connector checkpoints in ROOT/<name> unless it sets its own
    floeline.spark.master=local[2]
    floeline.pipes=false                    true: run the warehouse's auto-ingest pipes in the worker
    floeline.worker.lease.timeout.ms=30000  a worker whose lease is older is gone (store.py)
    floeline.worker.batch.slots=N           how many connectors' micro-batches run at once; the others
                                            wait for a slot (default: twice Spark's default parallelism,
                                            4 on local[2]; 0: no limit)
    floeline.worker.rest.max.connections=64 connections the REST listener serves at once; more get
                                            503 at once, not a thread each (Connect has no such key)
    floeline.streaming.buffer.flush.time=1, floeline.streaming.buffer.count.records=10000,
    floeline.streaming.buffer.size.bytes=20000000   when the rows of a table's Snowpipe
                                            Streaming channels are committed (channels.py)
    rest.* / listeners.https.*              the REST server's keys (rest.py reads them)

Inherited by connectors, as a Connect worker's are (a connector's own value wins):
bootstrap.servers; key.converter / value.converter with their `.schemas.enable` and
other `key.converter.*` / `value.converter.*` keys (a family is inherited only while the
connector does not name its own converter class, as Connect does); `consumer.X`, which
becomes the connector's `consumer.override.X`; the Kafka security keys; the S3
warehouse keys (floeline.warehouse.s3.*); floeline.metrics.ready.max.lag.
A connector without floeline.warehouse writes into the worker's warehouse.

Keys of a Connect worker that mean nothing here (group.id, the storage topics,
plugin.path, ...) are accepted and listed as ignored; any other key is an error naming
it and the closest known key, as in a connector config."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from floeline.config import DEFAULT_SPARK_MASTER, DEFAULT_WAREHOUSE, kafka_security, locations
from floeline.config.files import parse_properties
from floeline.config.locations import S3Settings
from floeline.errors import ConfigError

DEFAULT_LISTENER = "http://127.0.0.1:8083"
DEFAULT_LEASE_TIMEOUT_MS = 30000
MAX_CONNECTIONS_KEY = "floeline.worker.rest.max.connections"
DEFAULT_MAX_CONNECTIONS = 64

# The worker's own keys.
OWN_KEYS = frozenset({
    "listeners", "floeline.warehouse", "floeline.checkpoint.dir", "floeline.spark.master",
    "floeline.pipes", "floeline.worker.lease.timeout.ms", "floeline.worker.batch.slots",
    MAX_CONNECTIONS_KEY,
    # Snowpipe Streaming channels' buffers (channels.py)
    "floeline.streaming.buffer.flush.time", "floeline.streaming.buffer.count.records",
    "floeline.streaming.buffer.size.bytes",
})
# The channels' buffer keys (Snowpipe Streaming, worker/channels.py) and their minimums,
# those of the connector keys of the same meaning.
STREAMING_BUFFER_MINIMUMS = {"floeline.streaming.buffer.flush.time": 0,
                             "floeline.streaming.buffer.count.records": 1,
                             "floeline.streaming.buffer.size.bytes": 1}
# Keys the REST server reads (rest.py): handed over as they are.
REST_PREFIXES = ("rest.", "listeners.https.")
# Inherited by every connector unless it sets its own (see the module doc).
INHERITED_KEYS = frozenset({
    "bootstrap.servers", "key.converter", "value.converter", "header.converter",
    "floeline.metrics.ready.max.lag", *locations.SETTING_KEYS,
}) | kafka_security.KEYS
CONVERTER_FAMILIES = ("key.converter", "value.converter", "header.converter")
CONSUMER_PREFIX = "consumer."
# A Kafka Connect worker's keys that mean nothing to floeline's worker: accepted, listed.
IGNORED_KEYS = frozenset({
    "group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic",
    "config.storage.replication.factor", "offset.storage.replication.factor",
    "status.storage.replication.factor", "offset.storage.partitions", "status.storage.partitions",
    "offset.storage.file.filename", "offset.flush.interval.ms", "offset.flush.timeout.ms",
    "plugin.path", "plugin.discovery", "task.shutdown.graceful.timeout.ms",
    "connector.client.config.override.policy", "config.providers", "exactly.once.source.support",
    "scheduled.rebalance.max.delay.ms", "session.timeout.ms", "heartbeat.interval.ms",
    "metric.reporters", "auto.include.jmx.reporter",
})
IGNORED_PREFIXES = ("metrics.", "producer.", "admin.", "config.providers.")


@dataclass(frozen=True)
class Listener:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class WorkerSettings:
    """A worker's settings, validated. `properties` keeps every key as given (the REST
    server reads its own from there)."""

    listener: Listener
    warehouse: str
    checkpoint_root: str | None
    spark_master: str
    pipes: bool
    lease_timeout_ms: int
    batch_slots: int | None  # None: twice Spark's default parallelism; 0: no limit
    connector_defaults: Mapping[str, str]  # what connectors inherit, as given
    rest_settings: Mapping[str, str]  # rest.* and listeners.https.*
    ignored_keys: tuple[str, ...]
    properties: Mapping[str, str] = field(repr=False)
    warehouse_s3: S3Settings | None = field(default=None, repr=False)

    def connector_settings(self, config: Mapping[str, str]) -> dict[str, str]:
        """The settings a connector runs with: its own, over the worker's defaults."""
        merged = dict(config)
        own_classes = {family for family in CONVERTER_FAMILIES if _given(config, family)}
        for key, value in self.connector_defaults.items():
            family = next((f for f in CONVERTER_FAMILIES if key == f or key.startswith(f + ".")), None)
            if family in own_classes:
                continue  # the connector's own converter: the worker's options are for another
            if key.startswith(CONSUMER_PREFIX):
                key = "consumer.override." + key[len(CONSUMER_PREFIX):]
            if not _given(merged, key):
                merged[key] = value
        if not _given(merged, "floeline.warehouse"):
            merged["floeline.warehouse"] = self.warehouse
        name = (config.get("name") or "").strip()
        if self.checkpoint_root and name and not _given(merged, "floeline.checkpoint.dir"):
            merged["floeline.checkpoint.dir"] = locations.join(self.checkpoint_root, name)
        if not _given(merged, "floeline.spark.master"):
            merged["floeline.spark.master"] = self.spark_master
        return merged


def _given(settings: Mapping[str, str], key: str) -> bool:
    value = settings.get(key)
    return value is not None and bool(str(value).strip())


def default_warehouse() -> str:
    """The warehouse a worker without floeline.warehouse uses, as the other commands do."""
    return os.environ.get("FLOELINE_WAREHOUSE") or DEFAULT_WAREHOUSE


def load_worker_settings(path: str | os.PathLike | None) -> WorkerSettings:
    """Read worker.properties (None: every default). Errors name the file."""
    if path is None:
        return worker_settings_from_dict({})
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8").lstrip("\ufeff")
    except OSError as exc:
        raise ConfigError(f"cannot read worker config {p}: {exc.strerror or exc}") from None
    try:
        return worker_settings_from_dict(parse_properties(text))
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def worker_settings_from_dict(props: Mapping[str, str]) -> WorkerSettings:
    """Validate the worker's keys; one ConfigError listing every problem."""
    problems: list[str] = []
    props = {k: v for k, v in props.items()}
    for key in props:
        if _known(key):
            continue
        close = _closest(key)
        problems.append(f"unknown worker setting {key!r}" + (f" (did you mean {close!r}?)" if close else "")
                        + "; connector settings go in each connector's config")

    def text(key: str, default: str | None = None) -> str | None:
        value = props.get(key)
        return value.strip() if value is not None and value.strip() else default

    listener = _listener(text("listeners", DEFAULT_LISTENER), problems)
    warehouse = _location("floeline.warehouse", text("floeline.warehouse", default_warehouse()), problems)
    checkpoint = text("floeline.checkpoint.dir")
    if checkpoint is not None:
        checkpoint = _location("floeline.checkpoint.dir", checkpoint, problems)
    pipes = (text("floeline.pipes", "false") or "").lower()
    if pipes not in ("true", "false"):
        problems.append(f"floeline.pipes={pipes!r} is not a boolean; accepted values: true, false")
    lease = text("floeline.worker.lease.timeout.ms", str(DEFAULT_LEASE_TIMEOUT_MS))
    if not re.fullmatch(r"[0-9]+", lease) or int(lease) < 3000:
        problems.append(f"floeline.worker.lease.timeout.ms={lease!r}: accepted values: a whole "
                        f"number of milliseconds >= 3000")
        lease = str(DEFAULT_LEASE_TIMEOUT_MS)
    slots = text("floeline.worker.batch.slots")
    if slots is not None and not re.fullmatch(r"[0-9]+", slots):
        problems.append(f"floeline.worker.batch.slots={slots!r}: accepted values: a whole number of "
                        f"micro-batches that run at once (0: no limit)")
        slots = None
    try:
        max_connections(props)
    except ConfigError as exc:
        problems.append(str(exc))
    for key, minimum in STREAMING_BUFFER_MINIMUMS.items():
        value = text(key)
        if value is not None and (not re.fullmatch(r"[0-9]+", value) or int(value) < minimum):
            problems.append(f"{key}={value!r}: accepted values: a whole number >= {minimum} (as the "
                            f"connector key {key.removeprefix('floeline.streaming.')} of the same meaning)")
    s3 = None
    if locations.is_s3(warehouse) or locations.is_s3(checkpoint or ""):
        try:
            s3 = S3Settings.from_settings(props)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        count = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid worker config ({count} problem{'s' * (count > 1)}):\n{lines}")
    return WorkerSettings(
        listener=listener, warehouse=warehouse, checkpoint_root=checkpoint,
        spark_master=text("floeline.spark.master", DEFAULT_SPARK_MASTER), pipes=pipes == "true",
        lease_timeout_ms=int(lease), batch_slots=int(slots) if slots is not None else None,
        connector_defaults=MappingProxyType({k: v for k, v in props.items() if _inherited(k)}),
        rest_settings=MappingProxyType({k: v for k, v in props.items() if k.startswith(REST_PREFIXES)}),
        ignored_keys=tuple(sorted(k for k in props if _ignored(k))),
        properties=MappingProxyType(props), warehouse_s3=s3)


def max_connections(props: Mapping[str, str]) -> int:
    """floeline.worker.rest.max.connections: how many connections the REST listener
    serves at once (rest.py)."""
    value = (props.get(MAX_CONNECTIONS_KEY) or "").strip() or str(DEFAULT_MAX_CONNECTIONS)
    if not re.fullmatch(r"[0-9]{1,6}", value) or int(value) < 1:
        raise ConfigError(f"{MAX_CONNECTIONS_KEY}={value!r}: accepted values: a whole number of "
                          f"connections >= 1 (default {DEFAULT_MAX_CONNECTIONS})")
    return int(value)


def _inherited(key: str) -> bool:
    return (key in INHERITED_KEYS or key.startswith(CONSUMER_PREFIX)
            or any(key.startswith(f + ".") for f in CONVERTER_FAMILIES))


def _ignored(key: str) -> bool:
    return key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES)


def _known(key: str) -> bool:
    return key in OWN_KEYS or key.startswith(REST_PREFIXES) or _inherited(key) or _ignored(key)


def _closest(key: str) -> str | None:
    known = sorted(OWN_KEYS | INHERITED_KEYS | {"rest.auth.users.file", "consumer.max.poll.records",
                                                "value.converter.schemas.enable",
                                                "key.converter.schemas.enable"})
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
    return by_lower[close[0]] if close else None


_LISTENER = re.compile(r"(https?)://(\[[0-9a-fA-F:]+\]|[^:/\s\[\]]*):(\d{1,5})/?")


def _listener(value: str, problems: list[str]) -> Listener:
    """One http(s)://HOST:PORT; a blank host is 127.0.0.1 (all interfaces only when
    asked for by name: 0.0.0.0)."""
    default = Listener("http", "127.0.0.1", 8083)
    if "," in value:
        problems.append(f"listeners={value}: the worker serves one listener; keep one of them")
        return default
    match = _LISTENER.fullmatch(value)
    if not match or int(match[3]) > 65535:
        problems.append(f"listeners={value!r} is not a listener; write it as http://HOST:PORT or "
                        f"https://HOST:PORT (default {DEFAULT_LISTENER}; port 0: any free port)")
        return default
    return Listener(match[1], match[2].strip("[]") or "127.0.0.1", int(match[3]))


def _location(key: str, value: str, problems: list[str]) -> str:
    """An absolute path or s3a://bucket/prefix: connectors started from anywhere agree."""
    try:
        return locations.normalize(value)
    except ConfigError as exc:
        problems.append(f"{key}: {exc}")
        return value
