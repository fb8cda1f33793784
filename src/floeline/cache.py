"""Where floeline keeps what it downloads or builds once per machine (Spark jars, the
compiled JVM functions, the `floeline submit` bundle, the dev services' installs), and
the install-once rule that fills it: an install is renamed into place only when it is
complete, so an interrupted one is never used and two processes racing both end up with
one complete directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

COMPLETE_MARKER = ".floeline-complete"


def cache_dir() -> Path:
    """`$FLOELINE_CACHE` or `~/.cache/floeline`, shared by every state dir and run."""
    return Path(os.environ.get("FLOELINE_CACHE") or Path.home() / ".cache" / "floeline").expanduser()


def installed_stamp(home: Path) -> str | None:
    """The stamp of a complete install in `home`, None when there is none."""
    try:
        return (home / COMPLETE_MARKER).read_text().strip()
    except FileNotFoundError:
        return None


def install_once(home: Path, stamp: str, build: Callable[[Path], Path]) -> Path:
    """`home`, installed by `build(tmp)`, which makes the install under the private temp
    dir `tmp` and returns its directory. That directory is renamed into place only once
    complete (its marker, holding `stamp`, written last), so an interrupted install is
    never used, a changed stamp installs again, and two processes racing here both end
    up with one complete directory."""
    if installed_stamp(home) == stamp:
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"install-{home.name}-", dir=home.parent) as tmp:
        staged = build(Path(tmp))
        (staged / COMPLETE_MARKER).write_text(stamp)
        if home.exists() and installed_stamp(home) != stamp:
            shutil.rmtree(home, ignore_errors=True)  # incomplete, or of another stamp
        try:
            staged.rename(home)
        except OSError:
            if installed_stamp(home) != stamp:
                raise
            # another process finished first; its directory is just as good
    return home
