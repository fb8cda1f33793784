"""What floeline asks about another process: its command line (a pid can be reused, so
a process counts as the one a pid file names only while its command line still says
so), the pid a pid file records, and the last lines of its log for an error message.
Used by `floeline submit` and by the dev services (floeline/dev/)."""

from __future__ import annotations

import os
import socket
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


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, Linux /proc), None when it
    is gone or unknown: with the pid it names one process, even after pid reuse."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def gone_here(host: str, pid: int, start_ticks: int | None = None) -> bool:
    """True when a process recorded as `pid` on `host` ran on this machine and no longer
    runs; with `start_ticks` (process_start_ticks when it was recorded), a reused pid
    counts as gone too. A process on another host is never known to be gone."""
    if host != socket.gethostname():
        return False
    ticks = process_start_ticks(pid)
    if ticks is not None:
        return start_ticks is not None and ticks != start_ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
