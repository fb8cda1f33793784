"""Debezium's io.debezium.transforms.ExtractNewRecordState (Debezium 3.x): a change
event's envelope {before, after, op, source, ts_ms, transaction} -> the row it leaves,
`after` (or `before` for a rewritten delete), with chosen envelope fields added as
fields (`add.fields`) or headers (`add.headers`).

Debezium recognises an envelope by its Connect schema's name (`...Envelope`); records
here are schemaless, so a change event is a map with `op` and `before` or `after`
(what every Debezium envelope holds, with or without the schema/payload wrapper, JSON
or Avro). Anything else (heartbeats, schema changes, transaction markers, values of
other producers) passes through unchanged, as in Debezium.

delete.tombstone.handling.mode, as Debezium's DefaultDeleteHandlingStrategy:

  mode                    delete event                 tombstone (null value)   c/u/r
  tombstone (default)     null value (a tombstone)     dropped                  after
  drop                    dropped                      dropped                  after
  rewrite                 before + __deleted="true"    dropped                  after + __deleted="false"
  rewrite-with-tombstone  before + __deleted="true"    kept                     after + __deleted="false"
  delete-to-tombstone     null value (a tombstone)     dropped                  after

A truncate event (op "t": no before, no after) is dropped. Debezium 2.x's
`delete.handling.mode` and `drop.tombstones` were removed in 3.0 (Debezium 3.x
ignores them, so the deletes are handled as the default says); floeline refuses them
with the 3.x setting to use. `drop.fields.*` needs each field's Connect schema
(optional or not), which schemaless records do not carry: refused too."""

from __future__ import annotations

from typing import Any

from floeline.records.record import Record
from floeline.records.transforms.base import TransformFailure, type_name
from floeline.records.transforms.options import PluginOptions

MODES = ("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")
DELETED_FIELD = "__deleted"
_REWRITE = ("rewrite", "rewrite-with-tombstone")
# Fields of the envelope's `transaction` struct; op and the ts_* fields are top-level;
# any other unqualified name is a field of `source` (Debezium's determineStruct).
_TRANSACTION_FIELDS = ("id", "data_collection_order", "total_order")
_TOP_LEVEL_FIELDS = ("op", "ts_ms", "ts_us", "ts_ns")
# Debezium 2.x's (delete.handling.mode, drop.tombstones) -> the 3.x mode giving the same
# stream (none + false kept two tombstones per delete: 3.x keeps one).
_LEGACY_MODES = {("drop", "true"): "drop", ("drop", "false"): "delete-to-tombstone",
                 ("none", "true"): "tombstone", ("none", "false"): "tombstone",
                 ("rewrite", "true"): "rewrite", ("rewrite", "false"): "rewrite-with-tombstone"}
_UNSUPPORTED = ("drop.fields.header.name", "drop.fields.from.key", "drop.fields.keep.schema.compatible")


def is_change_event(value: Any) -> bool:
    """A Debezium change event's envelope, by its shape (see the module's docstring)."""
    return isinstance(value, dict) and "op" in value and ("after" in value or "before" in value)


class EnvelopeField:
    """One `add.fields` / `add.headers` entry: `op`, `table`, `source.ts_ms`,
    `transaction.id`, optionally `:newName`; named prefix + field, prefix + struct_field
    or prefix + newName (Debezium's FieldReference, with its quirk that `a.b.c` reads
    field b of struct a)."""

    def __init__(self, prefix: str, spec: str):
        parts = spec.split(":")
        if len(parts) > 2:
            raise ValueError(f"Unexpected field name: {spec}")
        path = parts[0].split(".")
        self.field = path[0] if len(path) == 1 else path[1]
        self.struct = _struct_of(self.field) if len(path) == 1 else path[0]
        if len(parts) == 2:
            self.name = prefix + parts[1]
        else:
            self.name = prefix + (self.field if len(path) == 1 else f"{self.struct}_{self.field}")

    def column(self, types: dict | None) -> tuple[str, Any] | None:
        """The declared column of the field, from the envelope's FieldTypes (None: unknown)."""
        if types is None:
            return None
        if self.struct is not None and self.struct in types:
            nested = types[self.struct][1] or {}
            if self.field in nested:
                return nested[self.field]
        return types.get(self.field)

    def lookup(self, envelope: dict) -> tuple[bool, Any]:
        """(whether the envelope has the field, its value). A struct that is null (no
        `transaction` in a snapshot) has the field, null; a field its struct lacks is
        looked for at the top level, as another SMT may have put it there."""
        if self.struct is None:
            return (self.field in envelope, envelope.get(self.field))
        if self.struct in envelope:
            parent = envelope[self.struct]
            if parent is None:
                return (True, None)
            if isinstance(parent, dict) and self.field in parent:
                return (True, parent[self.field])
        return (self.field in envelope, envelope.get(self.field))


def _struct_of(field: str) -> str | None:
    if field in _TRANSACTION_FIELDS:
        return "transaction"
    if field in _TOP_LEVEL_FIELDS:
        return None
    return "updateDescription" if field == "updateDescription" else "source"


class ExtractNewRecordState:
    """The SMT (whole record: it may drop a record, null its value, rename its topic
    and add headers). The columns the envelope's schema declared become those of the
    row it leaves: the `after` (or `before`) struct's, __deleted and the added fields."""

    declares_field_types = True

    def __init__(self, opts: PluginOptions):
        mode = opts.string("delete.tombstone.handling.mode", "tombstone")
        self.mode = mode.lower() if mode is not None else "tombstone"
        if self.mode not in MODES:
            opts.bad("delete.tombstone.handling.mode", mode, f"is not valid; accepted values: {', '.join(MODES)}")
        self.route_by_field = opts.string("route.by.field", "") or None
        self.fields = self._references(opts, "add.fields")
        self.headers = self._references(opts, "add.headers")
        opts.boolean("replace.null.with.default", True)  # schema defaults: applied by the converter
        self._refuse_legacy(opts)
        for name in _UNSUPPORTED:
            if name in opts.values:
                opts.bad(name, opts.values.pop(name), "is not supported by floeline: dropping fields by a header "
                         "needs each field's Connect schema, which floeline's records do not keep; drop "
                         "the setting (or use ReplaceField$Value with exclude=...)")

    @staticmethod
    def _refuse_legacy(opts: PluginOptions) -> None:
        """Debezium 2.x's delete settings: one problem naming the 3.x setting to use."""
        given = {name: opts.values.pop(name) for name in ("delete.handling.mode", "drop.tombstones")
                 if name in opts.values}  # reported here, not again as unknown
        if not given:
            return
        handling = given.get("delete.handling.mode", "drop").strip().lower()
        tombstones = given.get("drop.tombstones", "true").strip().lower()
        mode = _LEGACY_MODES.get((handling, tombstones))
        fix = (f"set {opts.prefix}delete.tombstone.handling.mode={mode} instead" if mode else
               f"set {opts.prefix}delete.tombstone.handling.mode instead ({', '.join(MODES)})")
        settings = " and ".join(f"{opts.prefix}{name}={value!r}" for name, value in given.items())
        opts.problems.append(f"{settings} {'was' if len(given) == 1 else 'were'} removed in Debezium 3.0 "
                             f"(which ignores {'it' if len(given) == 1 else 'them'}); {fix} ({opts.label})")

    @staticmethod
    def _references(opts: PluginOptions, name: str) -> list[EnvelopeField]:
        prefix = opts.string(f"{name}.prefix", "__")
        references = []
        for spec in opts.list(name, []) or []:
            if not spec:
                continue
            try:
                references.append(EnvelopeField(prefix, spec))
            except ValueError as exc:
                opts.bad(name, spec, f"is not valid: {exc}; use field, struct.field or field:newName")
        return references

    def apply(self, record: Record) -> Record | None:
        envelope = record.value
        if envelope is None:
            return self._tombstone(record)
        if not is_change_event(envelope):
            return record
        if self.headers:
            record = record.with_(headers=[*record.headers, *self._headers(envelope)])
        before, after = envelope.get("before"), envelope.get("after")
        if after is None and before is None:  # a truncate event
            return None
        if after is None:
            return self._delete(record, envelope, before)
        value = self._with_deleted(after, "false") if self.mode in _REWRITE else after
        envelope_types = record.field_types
        record = record.with_(value=value, field_types=self._row_types(envelope_types, "after"))
        return self._add_fields(self._routed(record, value), envelope, envelope_types)

    def _tombstone(self, record: Record) -> Record | None:
        if self.mode != "rewrite-with-tombstone":
            return None
        ops = [(ref.name, "d") for ref in self.headers if ref.field == "op"]
        return record.with_(headers=[*record.headers, *ops]) if ops else record

    def _delete(self, record: Record, envelope: dict, before: Any) -> Record | None:
        if self.mode == "drop":
            return None
        if self.mode in _REWRITE:
            value = self._with_deleted(before, "true")
        else:  # tombstone, delete-to-tombstone: the key with a null value
            value = None
        if self.route_by_field is not None:
            if not isinstance(before, dict):
                raise TransformFailure("Only Struct objects supported for [Read record to set topic routing "
                                       f"for DELETE], found: {type_name(before)}")
            record = self._routed(record, before)
        envelope_types = record.field_types
        types = None if value is None else self._row_types(envelope_types, "before")
        record = record.with_(value=value, field_types=types)
        return record if value is None else self._add_fields(record, envelope, envelope_types)

    def _row_types(self, envelope_types: dict | None, image: str) -> dict | None:
        """The declared columns of the `after`/`before` image, with __deleted in the
        rewrite modes (None when the envelope had no schema)."""
        if envelope_types is None or envelope_types.get(image, (None, None))[1] is None:
            return None
        types = dict(envelope_types[image][1])
        if self.mode in _REWRITE:
            types[DELETED_FIELD] = ("string", None)
        return types

    @staticmethod
    def _with_deleted(row: Any, flag: str) -> Any:
        """The row with __deleted added (a row that is not a map, as MongoDB's text, as it is)."""
        return {**row, DELETED_FIELD: flag} if isinstance(row, dict) else row

    def _routed(self, record: Record, row: Any) -> Record:
        """The record on the topic `route.by.field` names in `row` (unchanged when blank)."""
        if self.route_by_field is None:
            return record
        if not isinstance(row, dict):
            raise TransformFailure("Only Struct objects supported for [Read record to set topic routing "
                                   f"for CREATE / UPDATE], found: {type_name(row)}")
        if self.route_by_field not in row:
            raise TransformFailure(f"route.by.field names {self.route_by_field!r}, which is not a field of "
                                   f"the row (its fields: {', '.join(map(str, row))})")
        topic = row[self.route_by_field]
        if topic is not None and not isinstance(topic, str):
            raise TransformFailure(f"route.by.field {self.route_by_field!r} holds a {type_name(topic)}, "
                                   "not a topic name (a string)")
        return record if topic is None or not topic.strip() else record.with_(topic=topic)

    def _add_fields(self, record: Record, envelope: dict, envelope_types: dict | None) -> Record:
        if not self.fields:
            return record
        if not isinstance(record.value, dict):
            raise TransformFailure("Only Struct objects supported for [source field insertion], "
                                   f"found: {type_name(record.value)}")
        value = dict(record.value)
        types = dict(record.field_types) if record.field_types is not None else None
        for ref in self.fields:
            present, field_value = ref.lookup(envelope)
            if not present:
                continue
            if ref.name in value:
                raise TransformFailure(f"Cannot create field because of field name duplication {ref.name} "
                                       "(add.fields names a field the row already has: rename it with "
                                       "field:newName or change add.fields.prefix)")
            value[ref.name] = field_value
            if types is not None:
                column = ref.column(envelope_types)
                if column is None:
                    types = None
                else:
                    types[ref.name] = column
        return record.with_(value=value, field_types=types)

    def _headers(self, envelope: dict) -> list[tuple[str, Any]]:
        added = []
        for ref in self.headers:
            present, value = ref.lookup(envelope)
            if present:
                added.append((ref.name, value))
        return added
