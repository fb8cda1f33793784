"""What a micro-batch measures and returns, as typed values: each channel's statistics
(from the general path's statistics pass) and the batch's result (its report, the
channels' last positions, latency samples)."""

from __future__ import annotations

from dataclasses import dataclass, field

from floeline.ingest.progress import BatchReport
from floeline.sources.base import earlier_position, later_position


@dataclass
class ChannelStats:
    """One channel's share of a batch (for one table): its first and last positions,
    how many records it held and of which kind, its timestamps and record keys."""
    first: str | None
    last: str | None
    records: int = 0
    bad: int = 0
    tombstones: int = 0
    filtered: int = 0
    ts_min: int | None = None
    ts_mid: int | None = None
    keys: set = field(default_factory=set)  # merged variant schemas (schema_of_variant_agg)
    schema_ids: set = field(default_factory=set)  # schema registry ids of the values
    # the columns the values' schemas declare, each a JSON object {field: Spark type}
    declared_types: set = field(default_factory=set)

    @classmethod
    def from_group(cls, group) -> ChannelStats:
        """The statistics of one (channel, route) group of the statistics pass."""
        return cls(first=group["first"], last=group["last"], records=group["records"],
                   bad=group["bad"], tombstones=group["tombstones"], filtered=group["filtered"],
                   ts_min=group["ts_min"], ts_mid=group["ts_mid"], keys={group["keys"]},
                   schema_ids=set(group["schema_ids"] or ()),
                   declared_types=set(group["declared_types"] or ()))

    def add(self, other: ChannelStats) -> None:
        """Add another group of the same channel (another route to the same table)."""
        self.records += other.records
        self.bad += other.bad
        self.tombstones += other.tombstones
        self.filtered += other.filtered
        self.first = earlier_position(self.first, other.first)
        self.last = later_position(self.last, other.last)
        self.ts_min = min(self.ts_min, other.ts_min)
        self.keys |= other.keys
        self.schema_ids |= other.schema_ids
        self.declared_types |= other.declared_types

    @property
    def unusual(self) -> bool:
        """True when some records of the channel do not simply land (bad, tombstones,
        dropped by a Filter)."""
        return bool(self.bad or self.tombstones or self.filtered)


@dataclass
class BatchResult:
    """A committed batch: its report, each channel's last position read, and the
    (median timestamp, records) samples its latency is computed from."""
    report: BatchReport
    positions: dict[str, str]
    latency_samples: list[tuple[int | None, int]]
    ts_min: int | None
