"""The transform chain: built and validated once from the connector's settings, applied
per record; and the topic a source topic is routed as."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from floeline.errors import ConfigError, TransformError
from floeline.records.record import Record
from floeline.records.transforms.base import TransformFailure
from floeline.records.transforms.options import PluginOptions
from floeline.records.transforms.registry import (
    PACKAGE, PREDICATE_CLASSES, PREDICATES_PACKAGE, SHORT_NAMES, TRANSFORM_CLASSES)


class _Stage:
    """One transforms.<alias>: the transform, and the predicate gating it (if any).
    As in Kafka's TransformationStage, the transform runs when predicate XOR negate."""

    def __init__(self, alias: str, class_name: str, transform, predicate=None,
                 predicate_alias: str | None = None, negate: bool = False):
        self.alias, self.class_name, self.transform = alias, class_name, transform
        self.predicate, self.predicate_alias, self.negate = predicate, predicate_alias, negate

    def apply(self, record: Record) -> Record | None:
        if self.predicate is not None and self.predicate.test(record) == self.negate:
            return record
        return self.transform.apply(record)

    def describe(self) -> str:
        text = f"{self.alias}: {self.class_name}"
        if self.predicate_alias is not None:
            text += f" (when {'not ' if self.negate else ''}{self.predicate_alias})"
        return text


class TransformChain:
    """The configured transforms in order. `apply` returns the transformed record, or
    None when a transform (Filter) dropped it; later transforms then do not run."""

    def __init__(self, stages: tuple[_Stage, ...] = ()):
        self.stages = tuple(stages)

    @property
    def empty(self) -> bool:
        return not self.stages

    def describe(self) -> list[str]:
        """One "alias: ClassName" line per transform, for `floeline validate`."""
        return [stage.describe() for stage in self.stages]

    def apply(self, record: Record) -> Record | None:
        current: Record | None = record
        for stage in self.stages:
            try:
                current = stage.apply(current)
            except TransformFailure as exc:
                raise self._error(record, stage, str(exc)) from None
            except Exception as exc:  # a bug or an unforeseen value: still name the record
                raise self._error(record, stage, f"unexpected {type(exc).__name__}: {exc}") from exc
            if current is None:
                return None
        return current

    @staticmethod
    def _error(record: Record, stage: _Stage, reason: str) -> TransformError:
        return TransformError(f"transform {stage.alias!r} ({stage.class_name}): {reason}",
                              record.topic, record.partition, record.offset,
                              alias=stage.alias, transform=stage.class_name)


def transform_chain(settings: Mapping[str, str]) -> TransformChain:
    """Build the chain from raw connector settings (`transforms`, `transforms.<alias>.*`,
    `predicates`, `predicates.<p>.*`); raise one ConfigError listing every problem."""
    problems: list[str] = []
    predicate_aliases = _aliases(settings, "predicates", problems)
    predicates = {}
    for alias in predicate_aliases:
        built = _build_plugin(settings, "predicates", alias, problems)
        if built is not None:
            predicates[alias] = built[1]
    stages = []
    for alias in _aliases(settings, "transforms", problems):
        built = _build_plugin(settings, "transforms", alias, problems)
        gate = _predicate_of(settings, alias, predicate_aliases, predicates, problems)
        if built is not None and gate is not None:
            class_name, transform = built
            stages.append(_Stage(alias, class_name, transform, *gate))
    if problems:
        count = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid transforms config ({count} problem{'s' * (count > 1)}):\n{lines}")
    return TransformChain(tuple(stages))


def _aliases(settings: Mapping[str, str], family: str, problems: list[str]) -> list[str]:
    listed = [a.strip() for a in (settings.get(family) or "").split(",") if a.strip()]
    for alias in sorted({a for a in listed if listed.count(a) > 1}):
        problems.append(f"{family} lists the alias {alias!r} more than once")
    return list(dict.fromkeys(listed))


def _build_plugin(settings, family: str, alias: str, problems: list[str]):
    """(short class name, configured object) for one alias, or None after a problem."""
    type_key = f"{family}.{alias}.type"
    class_name = (settings.get(type_key) or "").strip()
    registry = TRANSFORM_CLASSES if family == "transforms" else PREDICATE_CLASSES
    kind = "transform" if family == "transforms" else "predicate"
    if not class_name:
        problems.append(f"missing setting {type_key!r} for the {kind} alias {alias!r} listed in {family}")
        return None
    entry = registry.get(class_name) or registry.get(SHORT_NAMES.get(class_name, ""))
    if entry is None:
        problems.append(_unknown_class(type_key, alias, class_name, registry, kind))
        return None
    full_name, (cls, side) = _full_name(class_name), entry
    short = full_name.rsplit(".", 1)[-1]
    reserved = ("type", "predicate", "negate") if family == "transforms" else ("type",)
    opts = PluginOptions(f"{family}.{alias}.", f"{kind} {alias!r} ({short})", settings, reserved)
    plugin = cls(opts, side) if side is not None else cls(opts)
    opts.check_unknown()
    problems.extend(opts.problems)
    return (short, plugin) if not opts.problems else None


def _predicate_of(settings, alias, listed, predicates, problems):
    """(predicate, predicate alias, negate) for transforms.<alias>, or None after a problem."""
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
        return (None, None, False)
    name = name.strip()
    if name not in listed:
        problems.append(f"{prefix}predicate={name!r} names a predicate that is not listed in predicates "
                        f"(it lists: {', '.join(listed) or 'nothing'}); add it to predicates and set "
                        f"predicates.{name}.type")
        return None
    if name not in predicates:
        return None  # its own problem is reported already
    return (predicates[name], name, negate)


def _full_name(class_name: str) -> str:
    return SHORT_NAMES.get(class_name, class_name)


def _unknown_class(type_key, alias, class_name, registry, kind) -> str:
    base = class_name.rsplit("$", 1)[0]
    if _full_name(f"{base}$Value") in registry:
        return (f"{type_key}={class_name}: {kind} {alias!r} must name the $Key or $Value variant, "
                f"e.g. {_full_name(base + '$Value')}")
    names = sorted(registry)
    shorts = sorted(name.rsplit(".", 1)[-1] for name in names)
    close = difflib.get_close_matches(class_name.rsplit(".", 1)[-1], shorts, n=1, cutoff=0.8)
    hint = f" (did you mean {_full_name(close[0])}?)" if close else ""
    other = PREDICATE_CLASSES if kind == "transform" else TRANSFORM_CLASSES
    if _full_name(class_name) in other:
        hint = f" (it is a {'predicate' if kind == 'transform' else 'transform'})"
    bases = sorted({n.rsplit(".", 1)[-1].split("$")[0] + ("$Key/$Value" if "$" in n else "")
                    for n in names})
    package = PACKAGE if kind == "transform" else PREDICATES_PACKAGE
    return (f"{type_key}={class_name}: unknown {kind} class for alias {alias!r}{hint}; floeline "
            f"supports {package}{{{', '.join(bases)}}}")



def routed_topic(chain: TransformChain | None, topic: str) -> str:
    """The topic a source topic's records are routed as when transforms rename topics
    (RegexRouter, TimestampRouter): the chain run on an empty record of `topic`.
    Routing that depends on a record's content shows only per record."""
    if chain is None or chain.empty:
        return topic
    try:
        routed = chain.apply(Record(topic, 0, 0, None, -1, None, {}))
    except Exception:  # a transform that needs real content: route as the topic
        return topic
    return routed.topic if routed is not None else topic
