"""A connector config's problems per key, in Kafka Connect's ConfigInfos shape: what
`PUT /connector-plugins/{plugin}/config/validate` answers and `GET
/connector-plugins/{plugin}/config` lists, and the connector plugins the worker offers.

The problems are those `floeline validate` finds: reading the config (every problem at
once, config.read_config) and each transform's own options. A problem carries its key
(config.Problem); the few that only say it in words (decoding, Kafka security, Kinesis)
are given the key their message starts with or names. A key floeline does not know is
listed as a Connect connector lists a value it has no definition for: "definition":
null and the problem in its errors (Connect itself leaves unknown keys out silently;
floeline's config refuses them, so validate says so). Secret values are masked."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from floeline import __version__
from floeline.config import (
    CONNECTOR_CLASSES, IGNORED_KEYS, IGNORED_PREFIXES, KNOWN_KEYS, PASSTHROUGH_PREFIXES, KeyUse,
    describe_keys, read_config)
from floeline.errors import FloelineError
from floeline.secrets import scrub
from floeline.worker.errors import BadRequest, NotFound
from floeline.worker.masking import mask_value

CONNECTOR_TYPE = "sink"  # both Snowflake classes are sinks; a Kinesis config names neither

# Groups in the order a UI shows them; a key's group is the first whose test matches.
_GROUPS = (
    ("Common", lambda k: k in ("name", "connector.class", "topics", "topics.regex", "floeline.source",
                               "tasks.max", "tasks.max.enforce", "connector.plugin.version",
                               "config.action.reload")),
    ("Converters", lambda k: k.startswith(("key.converter", "value.converter", "header.converter"))),
    ("Transforms", lambda k: k == "transforms" or k.startswith("transforms.")),
    ("Predicates", lambda k: k == "predicates" or k.startswith("predicates.")),
    ("Error Handling", lambda k: k.startswith("errors.")),
    ("Buffer", lambda k: k.startswith("buffer.")),
    ("Kinesis", lambda k: k.startswith(("kinesis.", "aws.", "dynamodb."))),
    ("Kafka", lambda k: k.startswith(("bootstrap.servers", "security.", "sasl.", "ssl.",
                                      "consumer.override.", "producer.override.", "admin.override."))),
    ("floeline", lambda k: k.startswith("floeline.")),
    ("Snowflake", lambda k: k.startswith("snowflake.") and k not in IGNORED_KEYS
                                 and not k.startswith(IGNORED_PREFIXES)),
    ("Accepted, not used", lambda k: k in IGNORED_KEYS or k.startswith(IGNORED_PREFIXES)),
    ("Other", lambda k: True),
)
_IMPORTANT = {"name", "connector.class", "topics", "topics.regex", "floeline.source",
              "kinesis.stream.name", "bootstrap.servers", "floeline.warehouse"}


# ---------------------------------------------------------------- plugins

def connector_plugins() -> list[dict]:
    """GET /connector-plugins: floeline's connector classes."""
    return [{"class": cls, "type": CONNECTOR_TYPE, "version": __version__} for cls in CONNECTOR_CLASSES]


def plugin_class(plugin: str) -> str:
    """The connector class `plugin` names: its full name, its simple name, or its simple
    name without "Connector" (Connect's aliases); NotFound as Connect words it."""
    for cls in CONNECTOR_CLASSES:
        simple = cls.rsplit(".", 1)[-1]
        if plugin in (cls, simple, simple.removesuffix("Connector")):
            return cls
    raise NotFound(f"Unknown plugin {plugin}.")


# ---------------------------------------------------------------- definitions

def _key_uses(settings: Mapping[str, str]) -> dict[str, KeyUse]:
    """How each key is read, for a Kafka and a Kinesis reading of `settings` (a key of
    the other source is only checked for absence there), plus every other known key."""
    source = (settings.get("floeline.source") or "kafka").strip().lower()
    other = "kafka" if source == "kinesis" else "kinesis"
    uses = dict(describe_keys(settings))
    for key, use in describe_keys({**settings, "floeline.source": other}).items():
        if key not in uses or (uses[key] == KeyUse("STRING", None) and use != uses[key]):
            uses[key] = use
    for key in sorted(KNOWN_KEYS):
        uses.setdefault(key, KeyUse("STRING", None))
    for key in settings:  # transforms.<alias>.*, consumer.override.*, ...: defined when given
        if key.startswith(PASSTHROUGH_PREFIXES + IGNORED_PREFIXES):
            uses.setdefault(key, KeyUse("STRING", None))
    return uses


def _group_of(key: str) -> str:
    return next(name for name, matches in _GROUPS if matches(key))


def _documentation(key: str) -> str | None:
    if _group_of(key) == "Accepted, not used":
        return ("Accepted for compatibility with Snowflake's connector or Kafka Connect; "
                "floeline does not use it.")
    return None


def definitions(settings: Mapping[str, str], uses: dict[str, KeyUse] | None = None) -> list[dict]:
    """Connect's ConfigKeyInfo of every key floeline knows, grouped, in group order."""
    uses = _key_uses(settings) if uses is None else uses
    group_order = [name for name, _ in _GROUPS]
    keys = sorted(uses, key=lambda k: (group_order.index(_group_of(k)), k != "name", k))
    order_in_group: dict[str, int] = {}
    found = []
    for key in keys:
        group = _group_of(key)
        order_in_group[group] = order_in_group.get(group, 0) + 1
        use = uses[key]
        found.append({
            "name": key, "type": use.type, "required": key == "name",
            "default_value": use.default, "importance": _importance(key),
            "documentation": _documentation(key), "group": group, "width": "NONE",
            "display_name": key, "dependents": [], "order": order_in_group[group],
        })
    return found


def _importance(key: str) -> str:
    if key in _IMPORTANT:
        return "HIGH"
    return "LOW" if _group_of(key) == "Accepted, not used" else "MEDIUM"


def plugin_config(plugin: str) -> list[dict]:
    """GET /connector-plugins/{plugin}/config."""
    cls = plugin_class(plugin)
    return definitions({"connector.class": cls})


# ---------------------------------------------------------------- problems per key

_LEADING_KEY = re.compile(r"^(?:unknown setting |missing (?:required )?setting:? |setting )?'?([\w.\-]+)'?")


def problems_by_key(settings: Mapping[str, str]) -> dict[str, list[str]]:
    """Every problem `floeline validate` finds in `settings`, by the key it is about."""
    try:
        config, problems = read_config(settings)
    except FloelineError as exc:  # a part that raises instead of collecting
        config, problems = None, [str(exc)]
    if not problems and config is not None:
        problems = _transform_problems(config)
    known = set(KNOWN_KEYS) | set(settings)
    found: dict[str, list[str]] = {}
    for problem in problems:
        key = getattr(problem, "key", None) or _key_named_by(str(problem), known, settings)
        found.setdefault(key, []).append(scrub(str(problem)))
    return found


def _transform_problems(config) -> list[str]:
    """Each transform's and predicate's own options (what check_supported raises)."""
    from floeline.records.transforms.chain import build_chain

    problems: list[str] = []
    try:
        build_chain(config.decoding.transforms, problems)
    except FloelineError as exc:
        problems.append(str(exc))
    return problems


def _key_named_by(message: str, known: set[str], settings: Mapping[str, str]) -> str:
    """The key a keyless problem is about: the one its message starts with, else the
    first given key it names, else "name" (the connector as a whole)."""
    match = _LEADING_KEY.match(message)
    if match:
        word = match.group(1).rstrip(".")
        candidates = sorted((k for k in known if word == k or word.startswith(k + "=")), key=len)
        if candidates:
            return candidates[-1]
        if word.startswith(PASSTHROUGH_PREFIXES + IGNORED_PREFIXES) or word in known:
            return word
    named = [(message.find(k), -len(k), k) for k in settings
             if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", message)]
    return min(named)[2] if named else "name"


# ---------------------------------------------------------------- ConfigInfos

def validate(plugin: str, settings: Mapping[str, str],
             inherit: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None) -> dict:
    """PUT /connector-plugins/{plugin}/config/validate: Connect's ConfigInfos.

    `inherit` is the worker's merge (its defaults under the connector's own keys, as
    create runs it): the config is checked as it would run, so a key left to the worker
    is not reported missing. Values shown are the user's (or the defaults), never the
    worker's; a problem about an inherited key says it comes from the worker."""
    cls = plugin_class(plugin)
    given_class = (settings.get("connector.class") or "").strip()
    if given_class:
        try:
            same = plugin_class(given_class) == cls
        except NotFound:
            same = False
        if not same:
            raise BadRequest(f"Included connector type {given_class} does not match request type {plugin}")
    return config_infos(plugin, settings, inherit)


def config_infos(name: str, settings: Mapping[str, str],
                 inherit: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None) -> dict:
    """{"name", "error_count", "groups", "configs"} for `settings`: one entry per
    defined key (its value, or its default when not given) and one per unknown key.
    With `inherit`, the problems are those of the merged config (see validate)."""
    effective = dict(inherit(settings)) if inherit is not None else dict(settings)
    problems = _marked_inherited(problems_by_key(effective), settings, effective)
    configs, groups = [], []
    uses = _key_uses(settings)
    for definition in definitions(settings, uses):
        key = definition["name"]
        if definition["group"] not in groups:
            groups.append(definition["group"])
        value = settings[key] if key in settings else definition["default_value"]
        configs.append({"definition": definition, "value": _value(key, value, problems.pop(key, []),
                                                                  list(uses[key].accepted))})
    for key in sorted(problems):  # unknown keys, or problems about keys nobody defines
        configs.append({"definition": None,
                        "value": _value(key, settings.get(key), problems[key], [])})
    return {"name": name, "error_count": sum(len(c["value"]["errors"]) for c in configs),
            "groups": groups, "configs": configs}


def _marked_inherited(problems: dict[str, list[str]], settings: Mapping[str, str],
                      effective: Mapping[str, str]) -> dict[str, list[str]]:
    """A problem about a key the user did not send but the worker supplies says so: the
    fix is in the worker's config, or in setting the key on the connector."""
    marked = {}
    for key, errors in problems.items():
        inherited = key not in settings and key in effective
        marked[key] = [f"{e} (the value is inherited from the worker's config; set {key} on the "
                       f"connector to override it)" if inherited else e for e in errors]
    return marked


def _value(key: str, value: str | None, errors: list[str], recommended: list[str]) -> dict:
    return {"name": key, "value": mask_value(key, value), "recommended_values": recommended,
            "errors": errors, "visible": True}
