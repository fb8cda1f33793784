"""Snowflake's conversion rules in the default pipe: a record's JSON value (a VARIANT)
into a column of a Snowflake type, as Spark SQL expressions (vectorized: no Python on
the rows). A value that does not fit is a row error naming the key, the column and the
reason, never a Spark cast that silently changes it.

The rules are those Snowflake documents for Snowpipe Streaming and its connector's
compatibility suite holds as the reference (the 3.x connector's), by column type:

  NUMBER(p,s)   a number or a numeric string, rounded to s digits; out of range, a
                boolean, an object or an array is an error
  FLOAT         a number or a numeric string ('NaN', 'Infinity', 'inf' too)
  VARCHAR(n)    any value (numbers and booleans as text, objects and arrays as JSON
                text) of at most n characters (16 MiB without n); CHAR is CHAR(1)
  BINARY(n)     a string, base64-decoded (hex with snowflake.validation=client_side),
                at most n bytes (8 MiB)
  BOOLEAN       true/false, 0/1, or 'true' 'false' 't' 'f' 'yes' 'no' 'y' 'n' 'on'
                'off' '1' '0' (any case, trimmed)
  DATE          an ISO date or timestamp string (its local date), or an integer-stored
                timestamp string ('1705312800')
  TIME          'HH:MM[:SS[.fffffffff]]' with an optional offset, which is stripped
                ('13:45:30+05:00' -> 13:45:30), or an integer-stored timestamp string
  TIMESTAMP_NTZ an ISO string (an offset is dropped, the local time kept) or an integer
                epoch, as a JSON number or a string, its unit guessed as Snowflake does
                (seconds, milliseconds, microseconds or nanoseconds by magnitude)
  TIMESTAMP_LTZ/TZ  the same, an offset converting to the instant
  VARIANT       any JSON value as it is; with client-side validation a string is
                parsed as JSON ('{"a":1}' -> {"a": 1}) and one that is not JSON
                ('hello') is an error
  OBJECT        an object, or a string holding one
  ARRAY         an array, or a string holding JSON; anything else is wrapped ('42' ->
                [42], 7 -> [7]); a string that is not JSON is an error

A key that is absent or JSON null gives SQL NULL (NOT NULL columns check that), in
every column type: JSON null into ARRAY is NULL, not [null].

Where the connector's modes differ (Rules): who validates a record decides how a
string lands in BINARY and in VARIANT. With snowflake.validation=client_side (the 3.x
connector, and the 4.x connector's compatibility mode) the connector validates it as
the 3.x connector did: hex BINARY, a VARIANT string parsed as JSON. With server_side
(the 4.x default) Snowflake's server does: base64 BINARY, a VARIANT string kept as a
string. COPY uses hex (BINARY_FORMAT's default) and keeps VARIANT strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from floeline.records.columns import Column, stores_json
from floeline.records.content import sql_string

_INTS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_INT_SQL = ", ".join(f"'{t}'" for t in _INTS)
_TRUE = ("1", "yes", "y", "t", "true", "on")
_FALSE = ("0", "no", "n", "f", "false", "off")
TEXT_BYTES, BINARY_BYTES = 16 * 1024 * 1024, 8 * 1024 * 1024
# ISO dates and timestamps as Java's java.time parses them (a space for the `T` too);
# group 1: the date and time without the offset, group 2: the date.
_TIMESTAMP_RE = (r"^(([0-9]{4}-[0-9]{2}-[0-9]{2})(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}"
                 r"(?:[.][0-9]{1,9})?)?)?)(Z|[+-][0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?$")
_TIME_RE = (r"^([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9])(?:[.]([0-9]{1,9}))?)?"
            r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?)?$")
_INTEGER_RE = r"^[+-]?[0-9]{1,18}$"


def logical_type(column: Column) -> str:
    """The Snowflake type the column stands for: its declared type, or the one its
    Spark type stores (NUMBER, FLOAT, VARCHAR, BINARY, BOOLEAN, DATE, TIME,
    TIMESTAMP_NTZ, TIMESTAMP_LTZ, VARIANT, OBJECT, ARRAY; OTHER for Spark-only types
    of tables made outside floeline)."""
    head = re.match(r"[A-Z_]+", column.declared.upper())
    if head:
        return {"CHAR": "VARCHAR"}.get(head.group(0), head.group(0))
    t = column.type.lower()
    if t.startswith("decimal") or t in ("bigint", "int", "smallint", "tinyint"):
        return "NUMBER"
    return {"double": "FLOAT", "float": "FLOAT", "string": "VARCHAR", "binary": "BINARY",
            "boolean": "BOOLEAN", "date": "DATE", "timestamp_ntz": "TIMESTAMP_NTZ",
            "timestamp": "TIMESTAMP_LTZ", "variant": "VARIANT"}.get(t, "OTHER")


def type_name(column: Column) -> str:
    """The column's type as messages show it (DESCRIBE's words)."""
    from floeline.records.snowflake_sql.types import snowflake_type

    return snowflake_type(column.type, column.declared)


def _length(column: Column) -> int | None:
    found = re.search(r"\((\d+)\)", column.declared)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Rules:
    """The conversion rules that depend on who validates the record (module docstring)."""

    binary_format: str = "BASE64"  # how a string lands in BINARY: BASE64 or HEX
    variant_strings_as_json: bool = False  # a string into VARIANT is parsed as JSON


SERVER_SIDE = Rules()  # snowflake.validation=server_side: the 4.x connector's default
CLIENT_SIDE = Rules("HEX", True)  # client_side: the 3.x connector, 4.x compatibility mode
COPY = Rules("HEX", False)  # COPY INTO ... MATCH_BY_COLUMN_NAME and pipes on files


def rules_for(validation: str) -> Rules:
    """The rules of snowflake.validation=`validation` (server_side or client_side)."""
    return CLIENT_SIDE if validation == "client_side" else SERVER_SIDE


@dataclass(frozen=True)
class Forms:
    """Names of the columns holding one value's forms, each computed once per row in
    its own projection (see shaping): the VARIANT, its kind, its trimmed text and the
    integer it stands for (an epoch)."""

    x: str
    kind: str
    text: str
    number: str


def forms_sql(column: Column, forms: Forms, rules: Rules = SERVER_SIDE) -> list[list[str]]:
    """The projections (in order) that compute the forms `column`'s rule reads from
    `forms.x`: [[kind, text], [number]], fewer when the rule needs fewer."""
    logical = logical_type(column)
    if logical in ("VARCHAR", "OTHER") or (logical == "VARIANT" and not rules.variant_strings_as_json):
        return []
    kind_text = [f"schema_of_variant({forms.x}) AS {forms.kind}",
                 f"trim(BOTH ' \\t\\r\\n' FROM try_variant_get({forms.x}, '$', 'string')) AS {forms.text}"]
    if logical not in ("DATE", "TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ"):
        return [kind_text]
    digits = f"CASE WHEN {forms.kind} = 'STRING' AND {forms.text} RLIKE '{_INTEGER_RE}' THEN CAST({forms.text} AS BIGINT) END"
    if logical.startswith("TIMESTAMP"):  # a JSON integer too
        digits = (f"CASE WHEN {forms.kind} IN ({_INT_SQL}) THEN try_variant_get({forms.x}, '$', 'bigint') "
                  f"ELSE {digits} END")
    return [kind_text, [f"{digits} AS {forms.number}"]]


def value_sql(column: Column, forms: Forms, rules: Rules = SERVER_SIDE) -> str:
    """The value in `column`'s type, NULL when it does not fit (or is absent or JSON
    null), from the forms forms_sql computed. A semi-structured column stored as JSON
    text (floeline.variant.storage=json) gets the VARIANT value's JSON."""
    value = _typed_value_sql(column, forms, rules)
    return f"to_json({value})" if stores_json(column) else value


def _typed_value_sql(column: Column, forms: Forms, rules: Rules) -> str:
    x, kind, text, number = forms.x, forms.kind, forms.text, forms.number
    is_string = f"{kind} = 'STRING'"
    logical = logical_type(column)
    if logical in ("NUMBER", "FLOAT"):
        return f"CASE WHEN {kind} != 'BOOLEAN' THEN try_variant_get({x}, '$', '{column.type}') END"
    if logical == "VARCHAR":
        return f"try_variant_get({x}, '$', 'string')"
    if logical == "BOOLEAN":
        as_number = f"try_variant_get({x}, '$', 'double')"
        return (f"CASE WHEN {kind} = 'BOOLEAN' THEN try_variant_get({x}, '$', 'boolean') "
                f"WHEN {is_string} THEN CASE WHEN lower({text}) IN {_in(_TRUE)} THEN true "
                f"WHEN lower({text}) IN {_in(_FALSE)} THEN false END "
                f"WHEN {as_number} = 1 THEN true WHEN {as_number} = 0 THEN false END")
    if logical == "BINARY":
        decoded = (f"CASE WHEN {text} RLIKE '^([0-9A-Fa-f]{{2}})*$' THEN unhex({text}) END"
                   if rules.binary_format == "HEX" else f"try_to_binary({text}, 'base64')")
        return f"CASE WHEN {is_string} THEN {decoded} END"
    epoch = f"CASE WHEN {number} IS NOT NULL THEN {{}} END"
    if logical == "DATE":
        return (f"CASE WHEN {is_string} AND {text} RLIKE '{_TIMESTAMP_RE}' THEN "
                f"try_to_date(regexp_extract({text}, '{_TIMESTAMP_RE}', 2)) "
                f"ELSE {epoch.format(f'to_date({_epoch_ntz(number)})')} END")
    if logical == "TIMESTAMP_NTZ":
        return (f"CASE WHEN {is_string} AND {text} RLIKE '{_TIMESTAMP_RE}' THEN "
                f"try_cast(regexp_extract({text}, '{_TIMESTAMP_RE}', 1) AS timestamp_ntz) "
                f"ELSE {epoch.format(_epoch_ntz(number))} END")
    if logical == "TIMESTAMP_LTZ":
        return (f"CASE WHEN {is_string} AND {text} RLIKE '{_TIMESTAMP_RE}' THEN try_cast({text} AS timestamp) "
                f"ELSE {epoch.format(f'timestamp_micros({_epoch_micros(number)})')} END")
    if logical == "TIME":
        def part(i: int) -> str:
            return f"regexp_extract({text}, '{_TIME_RE}', {i})"
        written = (f"concat({part(1)}, ':', {part(2)}, ':', CASE WHEN {part(3)} = '' THEN '00' "
                   f"ELSE {part(3)} END, CASE WHEN {part(4)} = '' THEN '' ELSE concat('.', {part(4)}) END)")
        of_day = (f"date_format({_epoch_ntz(number)}, CASE WHEN {_epoch_micros(number)} % 1000000 = 0 "
                  f"THEN 'HH:mm:ss' ELSE 'HH:mm:ss.SSSSSS' END)")
        return (f"CASE WHEN {is_string} AND {text} RLIKE '{_TIME_RE}' THEN {written} "
                f"ELSE {epoch.format(of_day)} END")
    if logical == "VARIANT":
        if rules.variant_strings_as_json:
            return f"CASE WHEN is_variant_null({x}) THEN NULL WHEN {is_string} THEN try_parse_json({text}) ELSE {x} END"
        return f"CASE WHEN NOT is_variant_null({x}) THEN {x} END"
    if logical == "OBJECT":
        return (f"CASE WHEN {kind} LIKE 'OBJECT%' THEN {x} "
                f"WHEN {is_string} AND left({text}, 1) = '{{' THEN try_parse_json({text}) END")
    if logical == "ARRAY":
        parsed = f"try_parse_json({text})"
        return (f"CASE WHEN is_variant_null({x}) THEN NULL WHEN {kind} LIKE 'ARRAY%' THEN {x} "
                f"WHEN {is_string} AND left({text}, 1) = '[' THEN {parsed} "
                f"WHEN {is_string} THEN {_wrap(parsed)} ELSE {_wrap(x)} END")
    return f"try_variant_get({x}, '$', {sql_string(column.type)})"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def _wrap(value: str) -> str:
    """A one-element JSON array holding `value` (NULL stays NULL)."""
    return f"try_parse_json(concat('[', to_json({value}), ']'))"


def _epoch_micros(n: str) -> str:
    """Microseconds since the epoch of integer `n`, its unit guessed by magnitude as
    Snowflake does: seconds below 31536000000 (the year 2969), then milliseconds,
    microseconds, nanoseconds."""
    limit = 31536000000
    return (f"CASE WHEN {n} > -{limit} AND {n} < {limit} THEN {n} * 1000000 "
            f"WHEN {n} > -{limit * 1000} AND {n} < {limit * 1000} THEN {n} * 1000 "
            f"WHEN {n} > -{limit * 1000000} AND {n} < {limit * 1000000} THEN {n} "
            f"ELSE div({n}, 1000) END")


def _epoch_ntz(n: str) -> str:
    """The UTC wall time of epoch `n`, whatever the session's time zone."""
    return (f"TIMESTAMP_NTZ '1970-01-01 00:00:00' + "
            f"make_dt_interval(0, 0, 0, CAST({_epoch_micros(n)} AS DECIMAL(20,0)) / 1000000)")


def reason(column: Column, rules: Rules = SERVER_SIDE) -> str:
    """Why a value does not convert to `column`, in words."""
    logical, name = logical_type(column), type_name(column)
    return {
        "NUMBER": f"not a number, or out of the range of {name}",
        "FLOAT": "not a number",
        "BOOLEAN": "not a boolean (true/false, 0/1, or one of 'true', 'false', 't', 'f', 'yes', "
                   "'no', 'y', 'n', 'on', 'off', '1', '0')",
        "BINARY": ("not a hex string" if rules.binary_format == "HEX" else
                   "not a base64 string (hex strings need snowflake.validation=client_side)"),
        "DATE": "not a date string (YYYY-MM-DD, an ISO timestamp or an integer-stored one)",
        "TIME": "not a time string (HH:MM[:SS[.fffffffff]] with an optional offset, or an "
                "integer-stored timestamp)",
        "TIMESTAMP_NTZ": "not a timestamp (an ISO string, or an integer epoch)",
        "TIMESTAMP_LTZ": "not a timestamp (an ISO string, or an integer epoch)",
        "OBJECT": "not a JSON object (or a string holding one)",
        "ARRAY": "a string that is not valid JSON",
        "VARIANT": ("a string that is not valid JSON (snowflake.validation=client_side parses a "
                    "string into VARIANT as JSON)"),
    }.get(logical, f"does not convert to {name}")


# What a user can do about a value its column cannot hold (a field whose type changed
# in the producer's schema, string -> int, is one no column type holds both ways).
FIT_FIX = ("; to land such values, send them under a new key (schema evolution adds its "
           "column) or recreate the table with a VARCHAR or VARIANT column there")


def error_sql(column: Column, ref: str, x: str, keys: list[str], rules: Rules = SERVER_SIDE) -> str:
    """Why a record's value for `column` does not fit, or NULL: `x` names the record's
    VARIANT value (of the first of `keys` it holds), `ref` the converted one."""
    key = " or ".join(repr(k) for k in keys)
    failed = sql_string(f" of key {key} does not fit column {column.name} of type "
                        f"{type_name(column)}: {reason(column, rules)}{FIT_FIX}")
    limits = limit_error_sql(ref, column) or "NULL"
    return (f"CASE WHEN {ref} IS NULL AND {x} IS NOT NULL AND NOT is_variant_null({x}) THEN "
            f"concat('value ', left(to_json({x}), 200), {failed}) ELSE {limits} END")


def limit_error_sql(ref: str, column: Column) -> str | None:
    """Why the converted value `ref` still does not fit (too long, a year out of
    range), or None when the column has no such limit."""
    logical, name = logical_type(column), type_name(column)
    checks = []
    if logical == "VARCHAR":
        length = _length(column)
        if length is not None:
            checks.append((f"char_length({ref}) > {length}",
                           f"concat('value of ', char_length({ref}), ' characters is longer than {name}')"))
        checks.append((f"octet_length({ref}) > {TEXT_BYTES}",
                       f"'value is over the 16 MiB limit of {name}'"))
    elif logical == "BINARY":
        limit = _length(column) or BINARY_BYTES
        checks.append((f"octet_length({ref}) > {limit}",
                       f"concat('value of ', octet_length({ref}), ' bytes is longer than {limit} bytes ({name})')"))
    elif logical in ("TIMESTAMP_NTZ", "TIMESTAMP_LTZ"):
        checks.append((f"year({ref}) NOT BETWEEN 1 AND 9999",
                       f"'a timestamp outside the years 1 to 9999 does not fit {name}'"))
    if not checks:
        return None
    whens = " ".join(f"WHEN {ref} IS NOT NULL AND {cond} THEN concat({sql_string(f'column {column.name}: ')}, {text})"
                     for cond, text in checks)
    return f"CASE {whens} END"


def always_fits(batch_type: str, column: Column, rules: Rules = SERVER_SIDE) -> bool:
    """True when every JSON value of the batch-wide `batch_type` (from
    schema_of_variant_agg) converts to `column` and fits it, so the per-row check can
    be skipped for that column."""
    head = re.match(r"[A-Z_]+", batch_type)
    head = head.group(0) if head else ""
    logical = logical_type(column)
    if logical == "VARIANT" and rules.variant_strings_as_json:
        return head not in ("STRING", "VARIANT")
    if head == "VOID" or logical == "VARIANT":
        return True
    if logical == "VARCHAR":
        return _length(column) is None
    if logical == "BOOLEAN":
        return head == "BOOLEAN"
    if logical == "FLOAT":
        return head in _INTS + ("DECIMAL", "FLOAT", "DOUBLE")
    if logical == "OBJECT":
        return head == "OBJECT"
    if logical == "ARRAY":
        return head not in ("STRING", "VARIANT")
    if logical == "NUMBER":
        t = column.type.lower()
        if not t.startswith("decimal"):
            return t == "bigint" and head in _INTS
        precision, scale = (int(v) for v in re.findall(r"\d+", t)[:2]) if "(" in t else (10, 0)
        if head in _INTS:
            return precision - scale >= 19
        if head == "DECIMAL":
            p, s = (int(v) for v in re.findall(r"\d+", batch_type)[:2])
            return precision - scale >= p - s
    return False
