"""The worker's log levels, read and changed at runtime as Kafka Connect's
`/admin/loggers` endpoints do it (Connect 4.x, log4j2): one namespace over two logging
systems, Python's `logging` (floeline, py4j, boto3, ...) and log4j2 in Spark's JVM
(org.apache.spark, io.delta, org.apache.kafka, ...).

- `all_levels()`: every known logger whose level is not OFF, with its effective level
  and when it was last changed here (epoch ms, None if never), `root` included;
- `level(name)`: one logger's, None when no logger has that name (Connect's 404);
- `set_level(namespace, level)`: the namespace's logger and every logger whose name
  starts with it (Connect's setAllLevels), in whichever system has them; a namespace
  neither system knows is the JVM's (Connect creates the log4j logger). `root` sets
  every logger of both. Returns the names whose level changed, sorted.

Levels are log4j's names (OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE, ALL); Python's
levels are shown by the nearest name at or below (WARNING -> WARN, CRITICAL -> FATAL).
Python loggers have no handler of floeline's: their records reach Python's last-resort
handler, which prints WARNING and above; the first level set below WARNING gives the
root a stderr handler, so the lines asked for are printed."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable

ROOT = "root"
LEVELS = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
          "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5,
          "ALL": 1}
_BY_VALUE = sorted(((value, name) for name, value in LEVELS.items()), reverse=True)


def level_name(value: int) -> str:
    """A Python level as log4j's name: the highest log4j level at or below it."""
    for at, name in _BY_VALUE:
        if value >= at:
            return name
    return "ALL"


def valid_level(text: str) -> str | None:
    """log4j's name of `text` (any case), None when it is no level."""
    name = text.strip().upper()
    return name if name in LEVELS else None


class Loggers:
    """The levels of this process's loggers; `jvm()` gives Spark's JVM (py4j) or None
    while there is no Spark session."""

    def __init__(self, jvm: Callable[[], object | None] = lambda: None, clock=time.time):
        self._jvm, self._clock = jvm, clock
        self._modified: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- reading
    def all_levels(self) -> dict[str, dict]:
        levels = {**self._jvm_levels(), **self._python_levels()}
        return {name: self._entry(name, level) for name, level in sorted(levels.items())
                if level != "OFF"}

    def level(self, name: str) -> dict | None:
        if name.lower() in (ROOT, ""):
            return self._entry(ROOT, level_name(logging.root.getEffectiveLevel()))
        python = _python_loggers()
        if name in python:
            return self._entry(name, level_name(python[name].getEffectiveLevel()))
        found = self._jvm_levels().get(name)
        return None if found is None else self._entry(name, found)

    def _entry(self, name: str, level: str) -> dict:
        return {"level": level, "last_modified": self._modified.get(name)}

    # -- changing
    def set_level(self, namespace: str, level: str) -> list[str]:
        """Set `level` (a valid_level name) on `namespace` and its children."""
        with self._lock:
            root = namespace.lower() in (ROOT, "")
            python = _python_loggers()
            python_owned = root or any(n.startswith(namespace) for n in python) \
                or namespace.split(".")[0] in ("floeline", "py4j", "pyspark")
            changed = set(self._set_python(namespace, level, python, root)) if python_owned else set()
            jvm_levels = self._jvm_levels()
            if root or not python_owned or any(n.startswith(namespace) for n in jvm_levels):
                changed |= set(self._set_jvm(namespace, level, jvm_levels, root))
            now = int(self._clock() * 1000)
            for name in changed:
                self._modified[name] = now
            return sorted(changed)

    def _set_python(self, namespace: str, level: str, python: dict, root: bool) -> list[str]:
        value = LEVELS[level]
        targets = dict(python) if root else {n: lg for n, lg in python.items() if n.startswith(namespace)}
        if root:
            targets[ROOT] = logging.root
        elif namespace not in targets:
            targets[namespace] = logging.getLogger(namespace)
        changed = []
        for name, logger in targets.items():
            before = level_name(logger.getEffectiveLevel())
            logger.setLevel(value)
            if before != level:
                changed.append(name)
        if value < logging.WARNING:
            _print_python_records()
        return changed

    def _set_jvm(self, namespace: str, level: str, before: dict[str, str], root: bool) -> list[str]:
        jvm = self._jvm()
        if jvm is None:
            return []
        log4j = jvm.org.apache.logging.log4j
        name = "" if root else namespace
        log4j.core.config.Configurator.setAllLevels(name, log4j.Level.valueOf(level))
        after = self._jvm_levels()
        return [n for n, found in after.items()
                if (root or n.startswith(namespace)) and before.get(n) != found]

    def _jvm_levels(self) -> dict[str, str]:
        """log4j2's loggers (configured and created) and their levels; {} without Spark."""
        jvm = self._jvm()
        if jvm is None:
            return {}
        log4j = jvm.org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        found = {}
        copy = jvm.java.util.ArrayList  # py4j iterates a List (the JVM's collections vary)
        for name in copy(context.getConfiguration().getLoggers().keySet()):
            found[name] = str(context.getLogger(name).getLevel())
        for logger in copy(context.getLoggers()):
            found[logger.getName()] = str(logger.getLevel())
        found[ROOT] = str(log4j.LogManager.getRootLogger().getLevel())
        found.pop("", None)
        return found

    def _python_levels(self) -> dict[str, str]:
        found = {name: level_name(lg.getEffectiveLevel()) for name, lg in _python_loggers().items()}
        found[ROOT] = level_name(logging.root.getEffectiveLevel())
        return found


def _python_loggers() -> dict[str, logging.Logger]:
    return {name: lg for name, lg in list(logging.Logger.manager.loggerDict.items())
            if isinstance(lg, logging.Logger)}


_HANDLER_NAME = "floeline-admin-loggers"


def _print_python_records() -> None:
    """A stderr handler on the root, once, when it has none (see the module doc)."""
    if logging.root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.root.addHandler(handler)


def jvm_of(herder) -> Callable[[], object | None]:
    """The py4j JVM of the herder's Spark session, when it has one."""

    def jvm():
        spark = getattr(herder, "spark", None)
        context = getattr(spark, "sparkContext", None) if spark is not None else None
        return getattr(context, "_jvm", None) if context is not None else None

    return jvm
