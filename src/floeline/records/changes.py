"""Change events -> change rows, for insert.mode=upsert (issue 27; the settings are
config/changes.py).

A record is one change to one row of a source table, identified by its primary key:

  Debezium's envelope   a value with `op` and `before`/`after` (`source`, `ts_ms`
                        optional). op c (create), u (update), r (snapshot read) upsert
                        the `after` image; d deletes. Connect's {"schema", "payload"}
                        wrapper is already gone with value.converter.schemas.enable=true;
                        a wrapper read as plain JSON is unwrapped here.
  a flattened record    any other object (ExtractNewRecordState's output, or a plain
                        row) is upserted as it is; `__deleted` = "true" (the SMT's
                        rewrite mode) or `__op` = "d" deletes; `__op` names the op.
  a tombstone           (a null or empty value) deletes its key.
  a truncate            Debezium's op t (`source`, no after image, no key) empties the
                        table with truncate.enabled=true (upsert_sink.py applies it).

Deletes and tombstones are applied with delete.enabled=true and truncates with
truncate.enabled=true; otherwise they are skipped (and counted), as Debezium's sink
skips them: they never become errors then, even without a key. The primary key comes from
the record key's fields (primary.key.mode=record_key: primary.key.fields selects them,
all of the key's fields when empty; a key that is not a struct is the one column
primary.key.fields names) or from the `after` image (record_value). Under record_value
an update whose `before` image holds another key also deletes that old key: the row
moved.

Each step is Spark SQL over the general path's decoded rows (`v` the value as VARIANT,
`_tombstone`, `_key` the record key as VARIANT, `_meta` RECORD_METADATA): `change_events`
classifies each record and names its row error (`_change_error`), `change_rows` gives
the rows to apply (the default pipe's input layout, with `_delete` and `_ts_ms`), and
`latest_per_key` keeps the last change of each key once the rows have their columns."""

from __future__ import annotations

from dataclasses import dataclass

from floeline.records.content import parse_object_schema, sql_string, variant_path

UPSERT_OPS = ("c", "u", "r")  # create, update, snapshot read: the after image is the row
DELETE_OP = "d"
TRUNCATE_OP = "t"  # the source table was emptied (Debezium's TRUNCATE event)
CHANGE_STAGE = "change event"  # the stage a change's row error is reported at


@dataclass(frozen=True)
class ChangePlan:
    """How one table's records become changes: where the primary key comes from, its
    fields (for record_key with primary.key.fields empty, the record key's fields as the
    table or the batch knows them) and whether deletes and truncates are applied."""
    key_mode: str  # "record_key" | "record_value"
    key_fields: tuple[str, ...]
    delete_enabled: bool
    truncate_enabled: bool = False

    @property
    def from_record_key(self) -> bool:
        return self.key_mode == "record_key"


# ---- the record key -------------------------------------------------------------------

def record_key_sql(key_json: str | None, raw_key: str = "_raw_key") -> str:
    """SQL: the record key as a VARIANT. `key_json`: the column holding the converted key
    as JSON text (the decode stage's); else the key's bytes in `raw_key` are read as JSON
    when they are JSON (a Connect {"schema", "payload"} wrapper unwrapped), else as a
    string. NULL: no key."""
    if key_json:
        return f"try_parse_json({key_json})"
    text = f"CAST({raw_key} AS STRING)"
    parsed = f"try_parse_json({text})"
    return (f"CASE WHEN {raw_key} IS NULL THEN NULL "
            f"WHEN {parsed} IS NULL THEN CAST({text} AS VARIANT) "
            f"ELSE {_unwrapped_sql(parsed, check_op=False)} END")


def key_fields_of(key_schema: str | None) -> tuple[str, ...]:
    """The fields of record keys whose merged schema (schema_of_variant_agg) is
    `key_schema`, sorted; empty when the keys are not objects."""
    return tuple(sorted(name for name, _type in parse_object_schema(key_schema or "")))


# ---- classify each record -------------------------------------------------------------

def change_events(rows, plan: ChangePlan):
    """`rows` (decoded, bad records taken out) with what each record does:
    `_op` (c, u, r, d, or the __op of a flattened record; NULL when it has none),
    `_ts_ms` (the change's time: Debezium's ts_ms, else source.ts_ms / __ts_ms),
    `_delete`, `_truncate` (a truncate event), `_skipped` (a delete with
    delete.enabled=false, a truncate with truncate.enabled=false), `_image` (the row to
    write: the after image with the key's fields, or for a delete the key alone),
    `_old_key` (record_value: the key an update moved the row from) and
    `_change_error` (why the record cannot be applied, naming the fix; NULL when fine)."""
    doc = rows.selectExpr("*", f"CASE WHEN _tombstone THEN NULL ELSE {_unwrapped_sql('v')} END AS _d")
    shape = doc.selectExpr("*", f"{_envelope_sql('_d')} AS _envelope",
                           f"{_get('_d', 'op')} IS NOT NULL AS _has_op")
    ops = shape.selectExpr(
        "*",
        f"CASE WHEN _tombstone THEN '{DELETE_OP}' "
        f"WHEN _envelope THEN try_variant_get(_d, '$.op', 'string') "
        f"WHEN {_flag_deleted_sql('_d')} THEN '{DELETE_OP}' "
        f"ELSE try_variant_get(_d, '$.__op', 'string') END AS _op",
        "CASE WHEN _envelope THEN coalesce(try_variant_get(_d, '$.ts_ms', 'bigint'), "
        "try_variant_get(_d, '$.source.ts_ms', 'bigint')) "
        "ELSE coalesce(try_variant_get(_d, '$.__ts_ms', 'bigint'), "
        "try_variant_get(_d, '$.__source_ts_ms', 'bigint')) END AS _ts_ms",
        f"CASE WHEN _envelope THEN {_get('_d', 'after')} ELSE _d END AS _after",
        f"CASE WHEN _envelope THEN {_get('_d', 'before')} END AS _before")
    ops = ops.selectExpr("*", f"_op <=> '{DELETE_OP}' AS _delete",
                         f"_envelope AND _op <=> '{TRUNCATE_OP}' AS _truncate")
    ops = ops.selectExpr("*", f"{_structural_error_sql()} AS _shape_error")
    ops = ops.selectExpr("*", f"_shape_error IS NULL AND ((_delete AND NOT {_bool(plan.delete_enabled)}) "
                              f"OR (_truncate AND NOT {_bool(plan.truncate_enabled)})) AS _skipped")
    keyed = ops.selectExpr("*", f"{_key_object_sql(plan)} AS _key_obj",
                           *([f"{_is_object_sql('_key')} AS _key_is_object"] if plan.from_record_key else []))
    keyed = keyed.selectExpr("*", f"{_key_error_sql(plan)} AS _key_error")
    imaged = keyed.selectExpr("*", f"CASE WHEN _delete THEN _key_obj ELSE {_upsert_image_sql(plan)} END AS _image",
                              f"{_old_key_sql(plan)} AS _old_key")
    return imaged.selectExpr(
        *[c for c in imaged.columns if c not in _WORK_COLUMNS],
        "coalesce(_shape_error, _key_error, CASE WHEN NOT _skipped AND NOT _truncate AND _image IS NULL "
        f"THEN {sql_string(_NOT_AN_OBJECT)} END) AS _change_error")


# The intermediate columns change_events drops from its output.
_WORK_COLUMNS = frozenset({"_d", "_envelope", "_has_op", "_shape_error", "_key_error", "_key_obj",
                           "_key_is_object", "_after", "_before"})


def change_rows(events):
    """The changes to apply: one row per change that is neither an error, skipped nor a
    truncate (upsert_sink.py applies truncates); an update that moved its key under
    record_value gives two (the old key's delete and the new row). In the default pipe's
    input layout (records/shaping.py: `v` the
    row, `_meta` RECORD_METADATA with the change's `op` and `ts_ms`) plus `_delete` and
    `_ts_ms`. Call it on `change_events` without its errors."""
    applied = events.where("NOT _skipped AND NOT _truncate")
    # (`_meta_json`, the metadata without the change's fields, is dropped: `_meta` is used)
    kept = [c for c in applied.columns if c not in ("v", "_meta", "_meta_json", "_image", "_old_key", "_delete")]
    pairs = applied.selectExpr(
        *kept, f"{metadata_with_change_sql('_meta')} AS _meta",
        "inline(filter(array(named_struct('v', _image, '_delete', _delete), "
        "CASE WHEN _old_key IS NOT NULL THEN named_struct('v', _old_key, '_delete', true) END), "
        "x -> x IS NOT NULL))")
    return pairs


def metadata_with_change_sql(meta: str) -> str:
    """SQL: RECORD_METADATA `meta` with the change's `op` and `ts_ms` (when it has them)."""
    change = "map_filter(map('op', CAST(_op AS VARIANT), 'ts_ms', CAST(_ts_ms AS VARIANT)), (k, x) -> x IS NOT NULL)"
    held = f"map_filter(try_variant_get({meta}, '$', 'map<string,variant>'), (k, x) -> k NOT IN ('op', 'ts_ms'))"
    return f"CASE WHEN {meta} IS NULL THEN NULL ELSE to_variant_object(map_concat({held}, {change})) END"


# ---- the last change per key ------------------------------------------------------------

def latest_per_key(shaped, key_columns: list[str], several_channels: bool, prefix: str = "_src_"):
    """The last change of each key in `shaped` (the default pipe's rows, `_src_*`
    columns and `_ts_ms` carried): within a channel by position; across channels by the
    change's ts_ms, then the record's timestamp. `key_columns`: the shaped key columns
    (`_c<i>`); `prefix`: of the channel, position and timestamp columns ("" for the
    source's own). One shuffle: both windows share the partitioning by key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    channel, position, timestamp = (f"{prefix}{c}" for c in ("channel", "position", "timestamp"))
    by_position = [F.length(position).desc(), F.col(position).desc()]
    if not several_channels:
        window = Window.partitionBy(*key_columns).orderBy(*by_position)
        return shaped.withColumn("_rank", F.row_number().over(window)).where("_rank = 1").drop("_rank")
    rows = shaped.repartition(*key_columns)
    in_channel = Window.partitionBy(*key_columns, channel).orderBy(*by_position)
    across = Window.partitionBy(*key_columns).orderBy(
        F.col("_ts_ms").desc_nulls_last(), F.col(timestamp).desc_nulls_last(),
        F.col(channel).desc())
    rows = rows.withColumn("_rank", F.row_number().over(in_channel)).where("_rank = 1")
    return rows.withColumn("_rank", F.row_number().over(across)).where("_rank = 1").drop("_rank")


# ---- the SQL pieces ---------------------------------------------------------------------

_NOT_AN_OBJECT = ("the change's row (its after image, or the record's value) is not a JSON object: "
                  "send Debezium change events or flattened rows (transforms=unwrap, "
                  "transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState)")


def _get(doc: str, key: str) -> str:
    """SQL: the VARIANT at first-level `key` of `doc` (NULL when absent)."""
    path = variant_path(key)
    if path is None:
        return f"try_variant_get({doc}, '$', 'map<string,variant>')[{sql_string(key)}]"
    return f"try_variant_get({doc}, {path}, 'variant')"


def _present(expr: str) -> str:
    """SQL: TRUE when `expr` (a VARIANT) holds a value that is not JSON null."""
    return f"({expr} IS NOT NULL AND NOT is_variant_null({expr}))"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _is_object_sql(expr: str) -> str:
    return f"coalesce(schema_of_variant({expr}) LIKE 'OBJECT<%', false)"


def _unwrapped_sql(doc: str, check_op: bool = True) -> str:
    """SQL: `doc`, or its `payload` when it is Connect's {"schema", "payload"} wrapper
    read as plain JSON (value.converter.schemas.enable=false on a wrapped topic)."""
    no_op = f"{_get(doc, 'op')} IS NULL AND " if check_op else ""
    return (f"CASE WHEN {no_op}{_get(doc, 'schema')} IS NOT NULL AND {_get(doc, 'payload')} IS NOT NULL "
            f"THEN {_get(doc, 'payload')} ELSE {doc} END")


def _envelope_sql(doc: str) -> str:
    """SQL: TRUE when `doc` is Debezium's envelope: a before and/or after image with
    `op` (or, without op, with `source` or both images: an envelope missing its op), or
    a truncate event (op t with `source`: its images may be left out)."""
    before, after = f"{_get(doc, 'before')} IS NOT NULL", f"{_get(doc, 'after')} IS NOT NULL"
    source = f"{_get(doc, 'source')} IS NOT NULL"
    truncate = f"try_variant_get({doc}, '$.op', 'string') <=> '{TRUNCATE_OP}' AND {source}"
    return (f"coalesce(({before} OR {after}) AND ({_get(doc, 'op')} IS NOT NULL OR "
            f"{source} OR ({before} AND {after})), false) OR coalesce({truncate}, false)")


def _flag_deleted_sql(doc: str) -> str:
    """SQL: ExtractNewRecordState marked the flattened row deleted (`__deleted`)."""
    return f"coalesce(lower(try_variant_get({doc}, '$.__deleted', 'string')) = 'true', false)"


def _structural_error_sql() -> str:
    """SQL over the classified columns: the record is not a change floeline can apply."""
    known = ", ".join(f"'{op}'" for op in (*UPSERT_OPS, DELETE_OP))
    missing_op = ("the value is a Debezium change event (before/after) without op: Debezium "
                  "always writes op (c, u, d or r); fix the producer, or flatten the events "
                  "with transforms=unwrap (io.debezium.transforms.ExtractNewRecordState)")
    unknown = (" is not an op floeline applies (c, u, r upsert, d deletes; t truncates in a "
               "Debezium envelope only): drop such events with a Filter transform or at the source")
    no_after = ("has no after image: Debezium writes the row's after image for c, u and r; "
                "fix the producer")
    return (f"CASE WHEN _envelope AND NOT _has_op THEN {sql_string(missing_op)} "
            f"WHEN _op IS NOT NULL AND _op NOT IN ({known}) AND NOT _truncate "
            f"THEN concat('change event op ', _op, {sql_string(unknown)}) "
            f"WHEN _envelope AND NOT _delete AND NOT _truncate AND NOT {_present('_after')} "
            f"THEN concat('change event op ', _op, ' ', {sql_string(no_after)}) END")


def _key_object_sql(plan: ChangePlan) -> str:
    """SQL: the change's primary key as an object of its fields (values may be missing:
    `_key_error` says so)."""
    if not plan.key_fields:
        return "CAST(NULL AS VARIANT)"
    if plan.from_record_key:
        fields = ", ".join(f"{sql_string(f)}, {_get('_key', f)}" for f in plan.key_fields)
        from_object = f"to_variant_object(map_filter(map({fields}), (k, x) -> x IS NOT NULL))"
        if len(plan.key_fields) == 1:  # a key that is not a struct is the one field's value
            primitive = f"to_variant_object(map({sql_string(plan.key_fields[0])}, _key))"
            return f"CASE WHEN {_is_object_sql('_key')} THEN {from_object} ELSE {primitive} END"
        return from_object
    fields = ", ".join(f"{sql_string(f)}, {_get('_after', f)}" for f in plan.key_fields)
    return f"to_variant_object(map_filter(map({fields}), (k, x) -> x IS NOT NULL))"


def _key_error_sql(plan: ChangePlan) -> str:
    """SQL: why an applied change has no usable primary key (NULL when it has one)."""
    applies = "_shape_error IS NULL AND NOT _skipped AND NOT _truncate"
    if plan.from_record_key:
        no_key = ("the change has no record key, and primary.key.mode=record_key takes the "
                  "primary key from it: produce the records with their key (Debezium does), or "
                  "set primary.key.mode=record_value with primary.key.fields")
        if not plan.key_fields:
            not_struct = ("the record key is not a struct, so primary.key.fields must name its "
                          "column: set primary.key.fields=<column>")
            return (f"CASE WHEN NOT ({applies}) THEN NULL WHEN NOT {_present('_key')} "
                    f"THEN {sql_string(no_key)} ELSE {sql_string(not_struct)} END")
        where, source = "_key", "record key"
        primitive = ""
        if len(plan.key_fields) > 1:
            primitive = (f"WHEN NOT _key_is_object THEN "
                         f"{sql_string(_primitive_key_error(plan.key_fields))} ")
        head = f"CASE WHEN NOT ({applies}) THEN NULL WHEN NOT {_present('_key')} THEN {sql_string(no_key)} " + primitive
        if len(plan.key_fields) == 1:
            head += "WHEN NOT _key_is_object THEN NULL "
    else:
        where, source = "_after", "after image"
        head = f"CASE WHEN NOT ({applies}) OR _delete THEN NULL "
    missing = ", ".join(f"CASE WHEN NOT {_present(_get(where, f))} THEN {sql_string(f)} END"
                        for f in plan.key_fields)
    fix = (f": every change needs a value for each primary key field "
           f"(primary.key.fields={','.join(plan.key_fields)}); fix the producer or primary.key.fields")
    return (f"{head}WHEN concat_ws(', ', {missing}) != '' THEN concat('primary key field ', "
            f"concat_ws(', ', {missing}), {sql_string(' is missing or null in the ' + source + fix)}) END")


def _primitive_key_error(fields: tuple[str, ...]) -> str:
    return (f"the record key is not a struct, but primary.key.fields names {len(fields)} fields "
            f"({', '.join(fields)}): a key that is a single value is one column; name exactly one")


def _upsert_image_sql(plan: ChangePlan) -> str:
    """SQL: the row an upsert writes (NULL when its image is not an object): the after
    image, with the record key's fields under record_key (they win over the image's)."""
    if not plan.from_record_key or not plan.key_fields:
        return f"CASE WHEN {_is_object_sql('_after')} THEN _after END"
    names = ", ".join(sql_string(f) for f in plan.key_fields)
    after = f"try_variant_get(_after, '$', 'map<string,variant>')"
    key = "try_variant_get(_key_obj, '$', 'map<string,variant>')"
    return (f"to_variant_object(map_concat(map_filter({after}, (k, x) -> NOT array_contains(array({names}), k)), "
            f"{key}))")


def _old_key_sql(plan: ChangePlan) -> str:
    """SQL (record_value): the key an update moved its row from, when its before image
    holds the key and it differs from the after image's; else NULL."""
    if plan.from_record_key or not plan.key_fields:
        return "CAST(NULL AS VARIANT)"
    complete = " AND ".join(_present(_get("_before", f)) for f in plan.key_fields)
    pairs = ", ".join(f"{sql_string(f)}, {_get('_before', f)}" for f in plan.key_fields)
    old = f"to_variant_object(map({pairs}))"
    return (f"CASE WHEN _op = 'u' AND _shape_error IS NULL AND _key_error IS NULL AND {complete} "
            f"AND to_json({old}) != to_json(_key_obj) THEN {old} END")
