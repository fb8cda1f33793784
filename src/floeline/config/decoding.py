"""How a connector decodes its records, read once from its settings: the key and value
converters (`key.converter`, `value.converter` and their `.<option>` settings), the
header converter and header format (`header.converter`,
`snowflake.feature.structured.headers`), and the transform chain (`transforms`,
`transforms.<alias>.*`, `predicates`, `predicates.<alias>.*`).

They become small frozen values (DecodeSpec) on the ConnectorConfig: the driver and the
Spark executors build converters and transforms from them, never from the settings
(which hold secrets). What can be checked without the transforms' code is checked here,
with the config's other problems: the converter classes and the settings they need, the
header converter, and how the transform chain is wired (aliases, classes, predicates).
Each transform's own options are checked where the transforms live (records/transforms/,
through records/support.check_supported), also before Spark starts."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from floeline.config.registry_access import read_registry_access
from floeline.errors import ConfigError, missing_extra
from floeline.retry import RetryPolicy, policy_from_settings

# --- converter classes ------------------------------------------------------------------

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
AVRO_CONVERTER = "io.confluent.connect.avro.AvroConverter"
PROTOBUF_CONVERTER = "io.confluent.connect.protobuf.ProtobufConverter"
JSON_SCHEMA_CONVERTER = "io.confluent.connect.json.JsonSchemaConverter"
SUPPORTED_CONVERTERS = (JSON_CONVERTER, STRING_CONVERTER, BYTES_CONVERTER, AVRO_CONVERTER,
                        PROTOBUF_CONVERTER, JSON_SCHEMA_CONVERTER)
REGISTRY_CONVERTERS = (AVRO_CONVERTER, PROTOBUF_CONVERTER, JSON_SCHEMA_CONVERTER)

# Refused by the spec for Snowpipe Streaming; the value is the converter to use instead.
SNOWFLAKE_CONVERTERS = {
    "com.snowflake.kafka.connector.records.SnowflakeJsonConverter": JSON_CONVERTER,
    "com.snowflake.kafka.connector.records.SnowflakeAvroConverter": AVRO_CONVERTER,
    "com.snowflake.kafka.connector.records.SnowflakeAvroConverterWithoutSchemaRegistry":
        AVRO_CONVERTER,
}

SIMPLE_HEADER_CONVERTER = "org.apache.kafka.connect.storage.SimpleHeaderConverter"
HEADER_CONVERTERS = (SIMPLE_HEADER_CONVERTER, STRING_CONVERTER, BYTES_CONVERTER, JSON_CONVERTER)
STRUCTURED_HEADERS_KEY = "snowflake.feature.structured.headers"

Which = Literal["key", "value"]

# --- transform and predicate classes ----------------------------------------------------

TRANSFORMS_PACKAGE = "org.apache.kafka.connect.transforms."
PREDICATES_PACKAGE = TRANSFORMS_PACKAGE + "predicates."
# Transforms with a $Key and a $Value variant, and those that take the whole record.
KEY_OR_VALUE_TRANSFORMS = ("Cast", "ExtractField", "Flatten", "HoistField", "InsertField",
                           "MaskField", "ReplaceField", "TimestampConverter")
RECORD_TRANSFORMS = ("DropHeaders", "Filter", "InsertHeader", "RegexRouter", "TimestampRouter",
                     "ValueToKey")
PREDICATES = ("HasHeaderKey", "RecordIsTombstone", "TopicNameMatches")
# Transforms of other projects that users keep in their configs (whole-record transforms).
DEBEZIUM_TRANSFORMS_PACKAGE = "io.debezium.transforms."
DEBEZIUM_TRANSFORMS = ("ExtractNewRecordState",)

SUPPORTED_TRANSFORMS = tuple(sorted(
    [f"{TRANSFORMS_PACKAGE}{name}${side}" for name in KEY_OR_VALUE_TRANSFORMS for side in ("Key", "Value")]
    + [TRANSFORMS_PACKAGE + name for name in RECORD_TRANSFORMS]
    + [DEBEZIUM_TRANSFORMS_PACKAGE + name for name in DEBEZIUM_TRANSFORMS]))
SUPPORTED_PREDICATES = tuple(sorted(PREDICATES_PACKAGE + name for name in PREDICATES))
# Short names: Kafka Connect's own plugin aliases (the simple class names that are
# unique, e.g. RegexRouter, TopicNameMatches) plus floeline's HoistField$Value style.
SHORT_NAMES = {name.rsplit(".", 1)[-1]: name for name in [*SUPPORTED_TRANSFORMS, *SUPPORTED_PREDICATES]}

Family = Literal["transforms", "predicates"]


# --- the specs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConverterSpec:
    """`<which>.converter` and its `<which>.converter.<option>` settings (trimmed; blank
    ones left out)."""

    which: Which
    class_name: str | None = None  # None: not set (value: plain JSON, key: its text)
    options: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.which}.converter"

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    @property
    def json_schemas_enabled(self) -> bool:
        """Whether a JsonConverter reads the {"schema", "payload"} envelope: the
        `<which>.converter.schemas.enable` setting, default true as in Kafka Connect. With
        no converter configured floeline reads plain JSON (no envelope)."""
        if self.class_name is None:
            return False
        value = self.option("schemas.enable")
        return True if value is None else value.lower() == "true"


@dataclass(frozen=True)
class HeaderSpec:
    """How header bytes become RECORD_METADATA.headers (records/header_rules.py)."""

    converter: str = SIMPLE_HEADER_CONVERTER  # header.converter
    structured: bool = False  # snowflake.feature.structured.headers
    json_schemas: bool = True  # header.converter.schemas.enable (JsonConverter)
    encoding: str = "UTF-8"  # header.converter.encoding (StringConverter)


@dataclass(frozen=True)
class PluginSpec:
    """One `transforms.<alias>` or `predicates.<alias>`: its class (the full Kafka name)
    and every `<family>.<alias>.<option>` setting as given; for a transform, the
    predicate gating it (the transform runs when predicate XOR negate)."""

    family: Family
    alias: str
    class_name: str
    options: tuple[tuple[str, str], ...] = ()
    predicate: str | None = None
    negate: bool = False

    @property
    def prefix(self) -> str:
        return f"{self.family}.{self.alias}."

    @property
    def kind(self) -> str:
        return "transform" if self.family == "transforms" else "predicate"

    @property
    def short_name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class TransformChainSpec:
    """The transforms in order, and the predicates they name."""

    transforms: tuple[PluginSpec, ...] = ()
    predicates: tuple[PluginSpec, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.transforms


@dataclass(frozen=True)
class DecodeSpec:
    """Everything decoding reads, small and picklable: what Spark ships to executors."""

    key: ConverterSpec = ConverterSpec("key")
    value: ConverterSpec = ConverterSpec("value")
    headers: HeaderSpec = HeaderSpec()
    transforms: TransformChainSpec = TransformChainSpec()
    # errors.retry.*: how long the schema registry is retried when it cannot be reached
    registry_retry: RetryPolicy = RetryPolicy()


# --- reading them ------------------------------------------------------------------------


def read_decode_spec(settings: Mapping[str, str], problems: list[str],
                     registry_retry: RetryPolicy = RetryPolicy()) -> DecodeSpec:
    """The DecodeSpec of `settings` (`registry_retry`: the connector's errors.retry.*);
    every problem found is appended to `problems`."""
    return DecodeSpec(read_converter_spec(settings, "key", problems),
                      read_converter_spec(settings, "value", problems),
                      read_header_spec(settings, problems),
                      read_transform_chain_spec(settings, problems),
                      registry_retry)


def decode_spec(settings: Mapping[str, str]) -> DecodeSpec:
    """The DecodeSpec of `settings` alone (errors.retry.* included), raising one
    ConfigError with every problem."""
    problems: list[str] = []
    try:
        policy = policy_from_settings(settings)
    except ConfigError as exc:
        problems.append(str(exc))
        policy = RetryPolicy()
    spec = read_decode_spec(settings, problems, policy)
    if problems:
        raise ConfigError("invalid decoding settings:\n" + "\n".join(f"  - {p}" for p in problems))
    return spec


def converter_spec(settings: Mapping[str, str], which: Which) -> ConverterSpec:
    """read_converter_spec, raising one ConfigError with every problem."""
    return _raising("invalid converter settings", read_converter_spec, settings, which)


def check_converters(settings: Mapping[str, str]) -> None:
    """Raise one ConfigError naming every bad key/value converter setting (class, registry
    URL, schemas.enable, avro.schema, encoding), each with how to fix it."""
    problems: list[str] = []
    for which in ("key", "value"):
        read_converter_spec(settings, which, problems)
    if problems:
        raise ConfigError("invalid converter settings:\n" + "\n".join(f"  - {p}" for p in problems))


def header_spec(settings: Mapping[str, str]) -> HeaderSpec:
    """read_header_spec, raising one ConfigError with every problem."""
    return _raising("invalid header settings", read_header_spec, settings)


def _raising(title: str, read, *args):
    problems: list[str] = []
    spec = read(*args, problems)
    if problems:
        raise ConfigError(f"{title}:\n" + "\n".join(f"  - {p}" for p in problems))
    return spec


def _trimmed(settings: Mapping[str, str], key: str) -> str | None:
    value = settings.get(key)
    return value.strip() if value is not None and value.strip() else None


def read_converter_spec(settings: Mapping[str, str], which: Which, problems: list[str]) -> ConverterSpec:
    key = f"{which}.converter"
    prefix = key + "."
    options = tuple(sorted((k[len(prefix):], v.strip()) for k, v in settings.items()
                           if k.startswith(prefix) and v is not None and v.strip()))
    spec = ConverterSpec(which, _trimmed(settings, key), options)
    name = spec.class_name
    if name is None:
        pass
    elif name in SNOWFLAKE_CONVERTERS:
        problems.append(
            f"{key}={name} is not supported with Snowpipe Streaming (the Snowflake "
            f"converters send bad records to a table stage, which conflicts with the "
            f"dead-letter queue); use {SNOWFLAKE_CONVERTERS[name]} instead")
    elif name not in SUPPORTED_CONVERTERS:
        problems.append(f"{key}={name} is not a converter floeline knows; supported: "
                        f"{', '.join(SUPPORTED_CONVERTERS)}")
    elif name == AVRO_CONVERTER and spec.option("avro.schema") is not None:
        try:
            parse_avro_schema(spec)
        except ConfigError as exc:
            problems.append(str(exc))
    elif name in REGISTRY_CONVERTERS and spec.option("schema.registry.url") is None:
        problems.append(f"{key}={name} needs {key}.schema.registry.url (the schema "
                        f"registry's base URL, e.g. http://localhost:8081), or for Avro "
                        f"without a registry {key}.avro.schema (the writer schema as JSON)")
    elif name in REGISTRY_CONVERTERS:
        read_registry_access(dict(spec.options), key, problems)  # auth and TLS settings
    elif name == STRING_CONVERTER:
        _check_encoding(f"{key}.encoding", spec.option("encoding") or "UTF-8", problems)
    if name == PROTOBUF_CONVERTER and missing_extra("grpc_tools", "protobuf", ""):
        problems.append(missing_extra("grpc_tools", "protobuf", f"{key}={name}"))
    if name is not None:
        enable = spec.option("schemas.enable")
        if enable is not None and enable.lower() not in ("true", "false"):
            problems.append(f"{key}.schemas.enable={enable!r} is not a boolean; accepted "
                            f"values: true, false")
    return spec


def parse_avro_schema(spec: ConverterSpec):
    """The parsed writer schema of `<which>.converter.avro.schema` (fastavro's form)."""
    import fastavro

    try:
        return fastavro.parse_schema(json.loads(spec.option("avro.schema")))
    except Exception as exc:
        raise ConfigError(f"{spec.key}.avro.schema is not a valid Avro schema (JSON): "
                          f"{type(exc).__name__}: {exc}") from None


def java_charset(encoding: str) -> str:
    """A Java character set name as Python's codec name; LookupError when unknown."""
    name = "".join(encoding.split()).replace("_", "-")
    "".encode(name)
    return name


def _check_encoding(key: str, encoding: str, problems: list[str]) -> None:
    try:
        java_charset(encoding)
    except LookupError:
        problems.append(f"{key}={encoding!r} is not a known character set; use e.g. UTF-8")


def read_header_spec(settings: Mapping[str, str], problems: list[str]) -> HeaderSpec:
    converter = _trimmed(settings, "header.converter") or SIMPLE_HEADER_CONVERTER
    if converter not in HEADER_CONVERTERS:
        problems.append(f"header.converter={converter} is not a header converter floeline "
                        f"knows; supported: {', '.join(HEADER_CONVERTERS)}")
        converter = SIMPLE_HEADER_CONVERTER
    flags = {}
    for key, default in ((STRUCTURED_HEADERS_KEY, "false"), ("header.converter.schemas.enable", "true")):
        text = (settings.get(key) or default).strip().lower()
        if text not in ("true", "false"):
            problems.append(f"{key}={settings.get(key)!r} is not a boolean; accepted values: "
                            f"true, false")
        flags[key] = text == "true"
    encoding = (settings.get("header.converter.encoding") or "UTF-8").strip()
    _check_encoding("header.converter.encoding", encoding, problems)
    return HeaderSpec(converter, flags[STRUCTURED_HEADERS_KEY], flags["header.converter.schemas.enable"],
                      encoding)


def read_transform_chain_spec(settings: Mapping[str, str], problems: list[str]) -> TransformChainSpec:
    """The chain's wiring: the listed aliases, each one's class, and the predicate gating
    each transform. An alias with a problem is left out (its problem is reported)."""
    predicate_aliases = _aliases(settings, "predicates", problems)
    predicates = tuple(p for p in (_plugin(settings, "predicates", a, problems) for a in predicate_aliases)
                       if p is not None)
    built = {p.alias for p in predicates}
    transforms = []
    for alias in _aliases(settings, "transforms", problems):
        plugin = _plugin(settings, "transforms", alias, problems)
        gate = _predicate_of(settings, alias, predicate_aliases, built, problems)
        if plugin is not None and gate is not None:
            transforms.append(PluginSpec("transforms", alias, plugin.class_name, plugin.options, *gate))
    return TransformChainSpec(tuple(transforms), predicates)


def listed_aliases(settings: Mapping[str, str], family: Family) -> list[str]:
    """The aliases `transforms` / `predicates` lists, as written (duplicates kept)."""
    return [a.strip() for a in (settings.get(family) or "").split(",") if a.strip()]


def _aliases(settings: Mapping[str, str], family: Family, problems: list[str]) -> list[str]:
    listed = listed_aliases(settings, family)
    for alias in sorted({a for a in listed if listed.count(a) > 1}):
        problems.append(f"{family} lists the alias {alias!r} more than once")
    return list(dict.fromkeys(listed))


def _plugin(settings: Mapping[str, str], family: Family, alias: str, problems: list[str]) -> PluginSpec | None:
    """The PluginSpec of one alias (predicate left unset), or None after a problem."""
    type_key = f"{family}.{alias}.type"
    class_name = (settings.get(type_key) or "").strip()
    supported = SUPPORTED_TRANSFORMS if family == "transforms" else SUPPORTED_PREDICATES
    kind = "transform" if family == "transforms" else "predicate"
    if not class_name:
        problems.append(f"missing setting {type_key!r} for the {kind} alias {alias!r} listed in {family}")
        return None
    full_name = SHORT_NAMES.get(class_name, class_name)
    if full_name not in supported:
        problems.append(_unknown_class(type_key, alias, class_name, supported, kind))
        return None
    prefix = f"{family}.{alias}."
    options = tuple(sorted((k[len(prefix):], v) for k, v in settings.items() if k.startswith(prefix)))
    return PluginSpec(family, alias, full_name, options)


def _predicate_of(settings, alias, listed, built, problems):
    """(predicate alias, negate) for transforms.<alias>, or None after a problem."""
    prefix = f"transforms.{alias}."
    name = settings.get(prefix + "predicate")
    negate_text = settings.get(prefix + "negate")
    negate = False
    if negate_text is not None:
        if negate_text.strip().lower() not in ("true", "false"):
            problems.append(f"{prefix}negate={negate_text!r} is not a boolean; accepted values: true, false")
            return None
        negate = negate_text.strip().lower() == "true"
    if name is None:
        if negate_text is not None:
            problems.append(f"{prefix}negate is set but there is no {prefix}predicate defining a "
                            "predicate to be negated")
            return None
        return (None, False)
    name = name.strip()
    if name not in listed:
        problems.append(f"{prefix}predicate={name!r} names a predicate that is not listed in predicates "
                        f"(it lists: {', '.join(listed) or 'nothing'}); add it to predicates and set "
                        f"predicates.{name}.type")
        return None
    if name not in built:
        return None  # its own problem is reported already
    return (name, negate)


def _unknown_class(type_key, alias, class_name, supported, kind) -> str:
    full = lambda name: SHORT_NAMES.get(name, name)  # noqa: E731
    base = class_name.rsplit("$", 1)[0]
    if full(f"{base}$Value") in supported:
        return (f"{type_key}={class_name}: {kind} {alias!r} must name the $Key or $Value variant, "
                f"e.g. {full(base + '$Value')}")
    shorts = sorted(name.rsplit(".", 1)[-1] for name in supported)
    close = difflib.get_close_matches(class_name.rsplit(".", 1)[-1], shorts, n=1, cutoff=0.8)
    hint = f" (did you mean {full(close[0])}?)" if close else ""
    other = SUPPORTED_PREDICATES if kind == "transform" else SUPPORTED_TRANSFORMS
    if full(class_name) in other:
        hint = f" (it is a {'predicate' if kind == 'transform' else 'transform'})"
    package = TRANSFORMS_PACKAGE if kind == "transform" else PREDICATES_PACKAGE
    bases = sorted({n.rsplit(".", 1)[-1].split("$")[0] + ("$Key/$Value" if "$" in n else "")
                    for n in supported if n.startswith(package)})
    others = "".join(f" and {n}" for n in supported if not n.startswith(package))
    return (f"{type_key}={class_name}: unknown {kind} class for alias {alias!r}{hint}; floeline "
            f"supports {package}{{{', '.join(bases)}}}{others}")
