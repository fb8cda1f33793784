"""The transform chain: built and validated once from the connector's settings, applied
per record; and the topic a source topic is routed as."""

from __future__ import annotations

from collections.abc import Mapping

from floeline.config.decoding import PluginSpec, TransformChainSpec, read_transform_chain_spec
from floeline.errors import ConfigError, TransformError
from floeline.records.record import Record
from floeline.records.transforms.base import TransformFailure
from floeline.records.transforms.options import PluginOptions
from floeline.records.transforms.registry import PREDICATE_CLASSES, TRANSFORM_CLASSES


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
            before = current
            try:
                current = stage.apply(current)
            except TransformFailure as exc:
                raise self._error(record, stage, str(exc)) from None
            except Exception as exc:  # a bug or an unforeseen value: still name the record
                raise self._error(record, stage, f"unexpected {type(exc).__name__}: {exc}") from exc
            if current is None:
                return None
            current = _declared_after(before, current, stage.transform)
        return current

    @staticmethod
    def _error(record: Record, stage: _Stage, reason: str) -> TransformError:
        return TransformError(f"transform {stage.alias!r} ({stage.class_name}): {reason}",
                              record.topic, record.partition, record.offset,
                              alias=stage.alias, transform=stage.class_name)


def _declared_after(before: Record, after: Record, transform) -> Record:
    """`after`, without the columns its value's schema declared (Record.field_types)
    when a transform changed the value without saying what that does to them: the
    values' own types then decide, as for schemaless records."""
    if after.field_types is None or after.value is before.value or getattr(transform, "declares_field_types", False):
        return after
    return after.with_(field_types=None)


def transform_chain(settings: Mapping[str, str]) -> TransformChain:
    """Build the chain from connector settings (`transforms`, `transforms.<alias>.*`,
    `predicates`, `predicates.<p>.*`); raise one ConfigError listing every problem, of
    the wiring (config/decoding.py) and of each transform's options."""
    problems: list[str] = []
    chain = build_chain(read_transform_chain_spec(settings, problems), problems)
    _raise_problems(problems)
    return chain


def chain_for(spec: TransformChainSpec) -> TransformChain:
    """The chain of a spec the config read (its wiring checked); raise one ConfigError
    listing every problem of the transforms' own options."""
    problems: list[str] = []
    chain = build_chain(spec, problems)
    _raise_problems(problems)
    return chain


def _raise_problems(problems: list[str]) -> None:
    if problems:
        count = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid transforms config ({count} problem{'s' * (count > 1)}):\n{lines}")


def build_chain(spec: TransformChainSpec, problems: list[str]) -> TransformChain:
    """The chain of `spec`; the problems of each alias's options are appended to
    `problems` (an alias with a problem is left out)."""
    predicates = {}
    for plugin in spec.predicates:
        built = _build_plugin(plugin, problems)
        if built is not None:
            predicates[plugin.alias] = built
    stages = []
    for plugin in spec.transforms:
        transform = _build_plugin(plugin, problems)
        if transform is None or (plugin.predicate is not None and plugin.predicate not in predicates):
            continue
        gate = predicates.get(plugin.predicate) if plugin.predicate is not None else None
        stages.append(_Stage(plugin.alias, plugin.short_name, transform, gate, plugin.predicate, plugin.negate))
    return TransformChain(tuple(stages))


def _build_plugin(plugin: PluginSpec, problems: list[str]):
    """The configured transform or predicate object, or None after a problem."""
    if plugin.family == "transforms":
        cls, side = TRANSFORM_CLASSES[plugin.class_name]
        reserved = ("type", "predicate", "negate")
    else:
        cls, side, reserved = PREDICATE_CLASSES[plugin.class_name], None, ("type",)
    opts = PluginOptions(plugin.prefix, f"{plugin.kind} {plugin.alias!r} ({plugin.short_name})",
                         dict(plugin.options), reserved)
    built = cls(opts, side) if side is not None else cls(opts)
    opts.check_unknown()
    problems.extend(opts.problems)
    return built if not opts.problems else None


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
