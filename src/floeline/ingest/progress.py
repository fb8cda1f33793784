"""The one line printed per micro-batch, and the figures behind it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from floeline.sources.base import Lag


@dataclass
class BatchReport:
    batch_id: int
    records_read: int = 0
    rows_written: dict[str, int] = field(default_factory=dict)  # table -> rows
    errors: int = 0
    errors_by_table: dict[str, int] = field(default_factory=dict)  # rowsErrorCount per table
    skipped: int = 0  # tombstones ignored, records already committed (replays)
    behind: Lag | None = None  # how far the source's head is ahead of what is committed
    latency_p50_ms: int | None = None
    latency_max_ms: int | None = None
    duration_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase (profiling)
    # SNOWPIPE method: staged files that failed to load, moved to their table stage
    failed_files: list[str] = field(default_factory=list)  # TABLE:path in the stage

    def _errors_detail(self) -> str:
        if not self.errors_by_table:
            return ""
        return "[" + ", ".join(f"{t}={n}" for t, n in sorted(self.errors_by_table.items())) + "]"

    def line(self) -> str:
        tables = ", ".join(f"{t}={n}" for t, n in sorted(self.rows_written.items())) or "-"
        behind = "?" if self.behind is None else str(self.behind)
        if self.latency_p50_ms is None:
            latency = "-"
        else:
            latency = f"p50={self.latency_p50_ms / 1000:.2f}s max={self.latency_max_ms / 1000:.2f}s"
        line = (f"batch {self.batch_id}: read={self.records_read} written[{tables}] "
                f"errors={self.errors}{self._errors_detail()} skipped={self.skipped} behind={behind} "
                f"latency[{latency}] took={self.duration_s:.2f}s")
        if self.failed_files:
            line += f" failed_files[{', '.join(self.failed_files)}]"
        if os.environ.get("FLOELINE_PROFILE") == "1":
            line += " phases[" + " ".join(f"{k}={v:.2f}" for k, v in self.phases.items()) + "]"
        return line
