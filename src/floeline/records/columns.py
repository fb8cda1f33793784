"""A table's columns as the records layer sees them: the Column and TableSchema data types
and the RECORD_METADATA column's name. Plain data (no Spark, no Delta), so that shaping
records into columns does not depend on the warehouse that stores them
(warehouse/tables.py reads and writes them)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

METADATA_COLUMN = "RECORD_METADATA"
SEMI_STRUCTURED = ("VARIANT", "OBJECT", "ARRAY")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark DDL type, e.g. "decimal(38,0)", "string", "variant"
    nullable: bool = True
    default: str | None = None  # DEFAULT: a Spark SQL expression
    identity: tuple[int, int] | None = None  # AUTOINCREMENT / IDENTITY (start, step)
    declared: str = ""  # the Snowflake type when the Spark type loses it: "VARCHAR(10)", "TIME"


@dataclass(frozen=True)
class TableSchema:
    columns: tuple[Column, ...]
    evolution: bool

    def find(self, name: str) -> Column | None:
        """The column matching `name` case-insensitively (Snowflake's default pipe rule
        in every mode); the first such column."""
        return self._by_upper_name.get(name.upper())

    # Indexes for find: a record with 100,000 keys asks once per key (a scan per key
    # was quadratic, hours on such a table).
    @functools.cached_property
    def _by_upper_name(self) -> dict[str, Column]:
        return {c.name.upper(): c for c in reversed(self.columns)}


def stores_json(column: Column) -> bool:
    """True for a semi-structured column stored as JSON text (floeline.variant.storage=json)."""
    return column.type == "string" and column.declared.upper() in SEMI_STRUCTURED
