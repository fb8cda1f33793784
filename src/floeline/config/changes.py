"""Change data capture settings: how records become upserts and deletes (issue 27).

The keys are Debezium's JDBC sink's, so a config written for it reads the same here:

  insert.mode          insert (default: every record is appended, floeline's behaviour
                       without this key) or upsert (one row per primary key: a change
                       event updates, inserts or deletes it with Delta's MERGE)
  primary.key.mode     none (default), record_key (the key columns come from the record's
                       key) or record_value (from its value: the change's `after` image)
  primary.key.fields   comma-separated key fields; empty: every field of the record key
                       (record_key), required with record_value. A record key that is a
                       primitive (not a struct) needs exactly one name: its column's.
  delete.enabled       false (default: a delete or tombstone is skipped and counted) or
                       true (it deletes the row); needs primary.key.mode=record_key, as
                       in Debezium's sink
  truncate.enabled     false (default: a truncate event, Debezium's op t, is skipped and
                       counted, as Debezium's sink skips it) or true (it empties the
                       table: every row it held, and the batch's earlier changes of the
                       truncate's partition; later changes are applied after it)
  floeline.cdc.changes.table   true: also append every change as it came to
                       <TABLE>_CHANGES beside the table, for audit (default false)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KEYS = frozenset({"insert.mode", "primary.key.mode", "primary.key.fields", "delete.enabled",
                  "truncate.enabled", "floeline.cdc.changes.table"})
INSERT_MODES = ("insert", "upsert")
PRIMARY_KEY_MODES = ("none", "record_key", "record_value")


@dataclass(frozen=True)
class ChangeSettings:
    """How a connector writes records: appended (insert) or merged by key (upsert)."""

    insert_mode: Literal["insert", "upsert"] = "insert"  # insert.mode
    primary_key_mode: Literal["none", "record_key", "record_value"] = "none"  # primary.key.mode
    primary_key_fields: tuple[str, ...] = ()  # primary.key.fields, in the order given
    delete_enabled: bool = False  # delete.enabled
    truncate_enabled: bool = False  # truncate.enabled: op t empties the table
    changes_table: bool = False  # floeline.cdc.changes.table: also keep <TABLE>_CHANGES

    @property
    def upsert(self) -> bool:
        return self.insert_mode == "upsert"


def read_change_settings(reader, schematization: bool, method: str) -> ChangeSettings:
    """The settings from `reader` (config/reader.py's Reader: text/choice/boolean/problem), with a
    problem noted for each combination that cannot work, naming the fix."""
    if (reader.text("insert.mode") or "").lower() == "update":
        insert_mode = "insert"
        reader.problem("insert.mode", "insert.mode=update (Debezium's sink: update rows, never insert) "
                                      "is not supported; use insert.mode=upsert")
    else:
        insert_mode = reader.choice("insert.mode", "insert", INSERT_MODES)
    if (reader.text("primary.key.mode") or "").lower() != "kafka":
        key_mode = reader.choice("primary.key.mode", "none", PRIMARY_KEY_MODES)
    else:
        key_mode = "none"
        reader.problem("primary.key.mode", "primary.key.mode=kafka (the topic, partition and offset as "
                                           "the key) makes every record a new row: leave insert.mode="
                                           "insert, which appends them with RECORD_METADATA, or use "
                                           "record_key / record_value")
    fields = tuple(f.strip() for f in (reader.text("primary.key.fields") or "").split(",") if f.strip())
    delete_enabled = reader.boolean("delete.enabled", False)
    truncate_enabled = reader.boolean("truncate.enabled", False)
    changes_table = reader.boolean("floeline.cdc.changes.table", False)
    if insert_mode == "upsert":
        if key_mode == "none":
            reader.problem("primary.key.mode", "insert.mode=upsert needs a primary key: set "
                                               "primary.key.mode=record_key (the record key's fields) "
                                               "or record_value with primary.key.fields")
        if key_mode == "record_value" and not fields:
            reader.problem("primary.key.fields", "primary.key.mode=record_value needs primary.key.fields: "
                                                 "the value fields that make the key, e.g. "
                                                 "primary.key.fields=id")
        if not schematization:
            reader.problem("insert.mode", "insert.mode=upsert writes one column per field and needs "
                                          "snowflake.enable.schematization=true")
        if method == "SNOWPIPE":
            reader.problem("insert.mode", "insert.mode=upsert merges rows into the table and needs "
                                          "snowflake.ingestion.method=SNOWPIPE_STREAMING (the default)")
    if delete_enabled and key_mode != "record_key":
        reader.problem("delete.enabled", "delete.enabled=true needs primary.key.mode=record_key (a delete "
                                         "carries no value to take the key from), as in Debezium's sink")
    if truncate_enabled and insert_mode != "upsert":
        reader.problem("truncate.enabled", "truncate.enabled=true empties a table merged by key and needs "
                                           "insert.mode=upsert; with insert.mode=insert a truncate event "
                                           "is appended as a row like any record: remove the key")
    if changes_table and insert_mode != "upsert":
        reader.problem("floeline.cdc.changes.table", "floeline.cdc.changes.table keeps the change log of "
                                                     "insert.mode=upsert; with insert.mode=insert every "
                                                     "record is appended already: remove the key")
    return ChangeSettings(insert_mode, key_mode, fields, delete_enabled=delete_enabled,
                          truncate_enabled=truncate_enabled, changes_table=changes_table)
