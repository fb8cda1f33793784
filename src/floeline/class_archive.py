"""Spark's JVM starts from a class-data archive (the JDK's AppCDS): the classes a
session loads (Spark, Hadoop, Delta's and floeline's on the JVM's class path) are
parsed and verified once, at set-up, into an archive the JVM maps at every later start.
Measured here: a session's start, first job and first Delta write 13 s -> 8 s.

The archive belongs to one JDK and one class path: its file is named by a digest of
both, so a changed JDK or jar set simply finds no archive (and set-up makes a new one).
The JVM checks the archive itself too and, when it does not match, starts as before;
its own warnings about that are turned off, because a start without the archive is
only slower. FLOELINE_CLASS_ARCHIVE=off starts without it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from floeline.cache import cache_dir

# The JVM's own notes about an archive it cannot use (a start is then only slower).
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Set in the set-up's child process: its JVM writes the archive here as it exits.
_RECORD_ENV = "FLOELINE_CLASS_ARCHIVE_RECORD"


def _java() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(settings: dict[str, str]) -> Path | None:
    """Where the archive for this JDK and this session's class path is kept (None when
    no java is found)."""
    java = _java()
    if java is None:
        return None
    import pyspark

    digest = hashlib.sha256()
    jars = Path(pyspark.__file__).parent / "jars"
    stat = java.stat()
    digest.update(f"{java}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for jar in sorted(jars.glob("*.jar")) + [Path(p) for p in settings.get("spark.driver.extraClassPath", "").split(
            os.pathsep) if p]:
        try:
            digest.update(f"{jar}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{jar}:missing\n".encode())
    return cache_dir() / "jvm-class-archive" / f"spark-{digest.hexdigest()[:16]}.jsa"


def driver_java_options(settings: dict[str, str]) -> str:
    """The driver JVM's options for the archive: use it when it is there, write it when
    set-up's recording run asks (see `record`), else nothing."""
    if os.environ.get("FLOELINE_CLASS_ARCHIVE", "").lower() == "off":
        return ""
    recording = os.environ.get(_RECORD_ENV)
    if recording:
        return f"-XX:ArchiveClassesAtExit={recording} {_QUIET}"
    path = archive_path(settings)
    if path is None or not path.exists():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def with_archive(settings: dict[str, str]) -> dict[str, str]:
    """`settings` with the archive's options added to spark.driver.extraJavaOptions."""
    options = driver_java_options(settings)
    if not options:
        return settings
    given = settings.get("spark.driver.extraJavaOptions", "")
    return {**settings, "spark.driver.extraJavaOptions": f"{given} {options}".strip()}


def record(settings: dict[str, str], recording_run: str, timeout_s: float = 600) -> Path | None:
    """Make the archive for `settings`' class path, if it is not there: a child Python
    runs `recording_run` (code that starts a session and exits its JVM in order,
    spark.py's), and its JVM writes the classes it loaded as it exits. None when no
    java is found; RuntimeError when the JVM wrote nothing."""
    path = archive_path(settings)
    if path is None:
        return None
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-", dir=path.parent) as tmp:
        partial = Path(tmp) / path.name
        env = dict(os.environ, **{_RECORD_ENV: str(partial), "FLOELINE_CLASS_ARCHIVE_TMP": tmp})
        env.pop("FLOELINE_CLASS_ARCHIVE", None)
        done = subprocess.run([sys.executable, "-c", recording_run], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout_s)
        if done.returncode != 0 or not partial.exists() or partial.stat().st_size == 0:
            raise RuntimeError(f"the JVM wrote no class archive (exit {done.returncode}): "
                               f"{(done.stdout + done.stderr)[-1500:]}")
        os.replace(partial, path)
    for old in path.parent.glob("spark-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    return path
