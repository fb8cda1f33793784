"""The `spec` option of the Kinesis data source (reader.py): which streams to read, how
to reach them, the positions the tables hold, where a shard with none starts, and the
per-shard batch limits. The connector builds it; the reader parses it in each process."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError

FORMAT = "floeline_kinesis"  # the data source's short name: spark.readStream.format(FORMAT)
TRIM_HORIZON = "TRIM_HORIZON"


@dataclass
class Spec:
    """The `spec` option, built by the connector."""

    streams: tuple[str, ...]
    aws: AwsSettings
    committed: dict[str, str] = field(default_factory=dict)
    finished: frozenset[str] = frozenset()
    initial: str = TRIM_HORIZON  # a shard's `from`: TRIM_HORIZON or AT_TIMESTAMP:<ms>
    max_records: int = 10000
    max_bytes: int = 20_000_000
    prefetch: bool = True  # read a shard's next batch while Spark processes this one
    earliest: frozenset[str] = frozenset()  # reset to TRIM_HORIZON by an offsets change

    @classmethod
    def parse(cls, text: str) -> "Spec":
        try:
            raw = json.loads(text)
            streams = tuple(raw["streams"])
            settings = AwsSettings(**raw.get("aws", {}))
            committed = {str(k): str(v) for k, v in raw.get("committed", {}).items()}
            spec = cls(streams, settings, committed, frozenset(raw.get("finished", ())),
                       initial_from(raw.get("initial", {"type": TRIM_HORIZON})),
                       int(raw.get("max_records_per_shard", 10000)),
                       int(raw.get("max_bytes_per_shard", 20_000_000)),
                       bool(raw.get("prefetch", True)), frozenset(raw.get("earliest", ())))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"the {FORMAT} source's spec option is invalid ({exc}): {text[:200]}") from exc
        if not spec.streams or spec.max_records < 1 or spec.max_bytes < 1:
            raise ConfigError(f"the {FORMAT} source's spec needs streams and positive limits: {text[:200]}")
        bad = [p for p in spec.committed.values() if not p.isdigit()]
        if bad:
            raise ConfigError(f"the {FORMAT} source's spec has committed positions that are not "
                              f"sequence numbers: {bad[:3]}")
        return spec


def initial_from(initial: dict) -> str:
    """The `from` of a shard that starts at the spec's initial position."""
    kind = initial.get("type")
    if kind == TRIM_HORIZON:
        return TRIM_HORIZON
    if kind == "AT_TIMESTAMP":
        return f"AT_TIMESTAMP:{int(initial['timestamp_ms'])}"
    raise ValueError(f"initial position {kind!r}: the reader takes TRIM_HORIZON or AT_TIMESTAMP "
                     "(the connector turns LATEST into AT_TIMESTAMP)")
