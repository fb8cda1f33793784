"""What floeline asks about another process: its command line (a pid can be reused, so
a process counts as the one a pid file names only while its command line still says
so), the pid a pid file records, and the last lines of its log for an error message.
Used by `floeline submit` and by the dev services (floeline/dev/)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def command_line(pid: int) -> str | None:
    """The command line of a live process, None when it is gone."""
    if Path("/proc/self").exists():
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
    done = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
    return done.stdout or None  # no /proc (macOS): ask ps


def recorded_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])
