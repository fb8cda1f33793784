"""Every quick start of the README and docs/ as a new user runs it: its files saved and
its commands run as written, one after the other, in an empty directory of its own,
with floeline's virtualenv on the PATH and none of floeline's environment variables
but the cache (tests/unit/quick_starts.py reads them from the Markdown).

The services are the quick starts' own: `floeline kafka start` / `floeline aws start`
in the quick start's directory, on the ports the pages give (19092, 4568, 5000; the
worker's 8083), so nothing is shared with the session's broker, which is on a free
port. When a documented port is taken on this machine (a `make demo` broker left
running), the quick start runs on a free port instead, through the variable the command
honours (FLOELINE_KAFKA_PORT, FLOELINE_KINESIS_PORT, FLOELINE_MOTO_PORT) and the same
address rewritten in its files and commands, and the test says so; the worker's 8083
has no such variable, so the worker's quick start is skipped then. What the quick start
started is stopped at its end (`floeline kafka stop`, `floeline aws stop`, SIGTERM to a
command left running with `&`).

A command left running (`floeline worker &`) is waited for until it prints its first
line (the worker's `rest.url=`, once it serves). A `floeline sql` query after it runs
once the command's output shows a batch with records (`[orders] batch 0: read=3 ...`),
as the page tells the user to wait for.
Each quick start must end with rows on the terminal and no `spark-warehouse/` in its
directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from quick_starts import Block, commands, is_background, quick_starts  # noqa: E402

from floeline.dev.services import free_port, port_free  # noqa: E402

pytestmark = pytest.mark.integration

QUICK_STARTS = quick_starts()
# The ports the pages give, and the variable each command that starts the service honours.
DOCUMENTED_PORTS = {19092: "FLOELINE_KAFKA_PORT", 4568: "FLOELINE_KINESIS_PORT",
                    5000: "FLOELINE_MOTO_PORT", 8083: None}
COMMAND_TIMEOUT_S = 600
ROWS_TIMEOUT_S = 180
ROWS = re.compile(r"^\((\d+) rows?\)$", re.M)
BATCH_WITH_RECORDS = re.compile(r"^\[[^\]]+\] batch \d+: read=[1-9]")


@pytest.fixture(scope="module")
def ports():
    """Documented port -> the port the quick starts use on this machine."""
    chosen = {}
    for port, variable in DOCUMENTED_PORTS.items():
        chosen[port] = port if port_free(port) else free_port()
        if chosen[port] != port:
            print(f"quick starts: port {port} is taken here; they use {chosen[port]}"
                  + (f" ({variable})" if variable else " (the worker's quick start is skipped)"))
    return chosen


@pytest.mark.parametrize("name", sorted(QUICK_STARTS))
def test_quick_start_runs_as_written(name, ports, tmp_path):
    if "worker" in name and ports[8083] != 8083:
        pytest.skip("port 8083, the worker's default listener, is taken on this machine")
    user_dir = tmp_path / name
    user_dir.mkdir()
    run = QuickStart(user_dir, ports)
    try:
        for block in QUICK_STARTS[name]:
            run.block(block)
        assert run.rows_shown, f"quick start {name} never showed a row:\n{run.transcript()}"
        leftovers = sorted(p.name for p in user_dir.iterdir() if p.name == "spark-warehouse")
        assert not leftovers, f"quick start {name} left {leftovers} in the user's directory"
    finally:
        run.stop_everything()
    run.check_stopped_cleanly()


class QuickStart:
    """One quick start's directory, environment, commands run and their output."""

    def __init__(self, directory: Path, ports: dict[int, int]):
        self.directory, self.ports = directory, ports
        self.env = _user_environment(ports)
        self.log: list[tuple[str, str]] = []  # (command, output)
        self.background: list[tuple[str, subprocess.Popen, list[str]]] = []
        self.rows_shown = 0

    def text(self, text: str) -> str:
        """`text` with each documented address moved to this machine's port."""
        for documented, actual in self.ports.items():
            if documented != actual:
                text = text.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{actual}")
        return text

    def block(self, block: Block) -> None:
        if block.kind == "file":
            (self.directory / block.path).write_text(self.text(block.text), encoding="utf-8")
            return
        for command in commands(block.text):
            self.command(self.text(command), block)

    def command(self, command: str, block: Block) -> None:
        if is_background(command):
            self.start_background(command, block)
            return
        if self.background and _is_query(command):
            self.wait_for_a_batch_with_records(block)
        done = subprocess.run(["bash", "-c", command], cwd=self.directory, env=self.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        output = done.stdout + done.stderr
        rows = _rows(done.stdout) if _is_query(command) else None
        self.log.append((command, output))
        assert done.returncode == 0, (
            f"{block.where()}: `{command}` exited {done.returncode}:\n{output}\n{self.transcript()}")
        if rows:
            self.rows_shown = rows
        if command.startswith("floeline run "):
            assert re.search(r"^connector \S+: starting Spark \(", done.stdout, re.M), done.stdout
            assert re.search(r"^connector \S+: caught up; ", done.stdout, re.M), done.stdout

    def start_background(self, command: str, block: Block) -> None:
        code = re.sub(r"\s*&\s*(#.*)?$", "", command)
        process = subprocess.Popen(["bash", "-c", f"exec {code}"], cwd=self.directory, env=self.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        lines: list[str] = []
        first = threading.Event()

        def read():
            for line in process.stdout:
                lines.append(line)
                first.set()
            first.set()

        threading.Thread(target=read, daemon=True).start()
        self.background.append((command, process, lines))
        first.wait(COMMAND_TIMEOUT_S)
        assert lines and process.poll() is None, (
            f"{block.where()}: `{command}` printed nothing or ended:\n{''.join(lines)}")

    def wait_for_a_batch_with_records(self, block: Block) -> None:
        """What the page tells the user to wait for before querying what a command left
        running writes: its `[name] batch N: read=M` line with M > 0."""
        deadline = time.monotonic() + ROWS_TIMEOUT_S
        while not any(BATCH_WITH_RECORDS.match(line) for _c, _p, lines in self.background
                      for line in list(lines)):
            assert time.monotonic() < deadline, (
                f"{block.where()}: no batch with records {ROWS_TIMEOUT_S} s after the commands "
                f"left running started:\n{self.transcript()}")
            time.sleep(0.2)  # a scan of the lines read so far: cheap, and the query starts sooner

    def stop_everything(self) -> None:
        for _command, process, _lines in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _command, process, _lines in self.background:
            try:
                process.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        for service, state in (("kafka", ".floeline/kafka"), ("aws", ".floeline/aws")):
            # `floeline kafka|aws stop` stops what the state dir's pid files name, and
            # removes each: none left (the quick start ran its own stop) is nothing to stop.
            if any((self.directory / state).glob("*.pid")):
                subprocess.run(["floeline", service, "stop"], cwd=self.directory, env=self.env,
                               capture_output=True, timeout=120)

    def check_stopped_cleanly(self) -> None:
        """A command left running stops cleanly on SIGTERM, as the docs say (exit 0)."""
        for command, process, lines in self.background:
            assert process.returncode == 0, f"`{command}` exited {process.returncode}:\n{''.join(lines)}"

    def transcript(self) -> str:
        shown = [f"$ {command}\n{output}" for command, output in self.log]
        shown += [f"$ {command}  (left running)\n{''.join(lines)}" for command, _p, lines in self.background]
        return "\n".join(shown)


def _user_environment(ports: dict[int, int]) -> dict[str, str]:
    """A new user's environment: floeline's virtualenv first on the PATH, none of
    floeline's variables but the cache and Spark's heap; the moved ports' variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLOELINE_") or k in ("FLOELINE_CACHE", "FLOELINE_DRIVER_MEMORY")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for documented, variable in DOCUMENTED_PORTS.items():
        if variable and ports[documented] != documented:
            env[variable] = str(ports[documented])
    return env


def _is_query(command: str) -> bool:
    return bool(re.match(r"floeline sql \"SELECT", command, re.I))


def _rows(stdout: str) -> int:
    """The rows a `floeline sql` table showed (its `(N rows)` line), 0 when none."""
    counts = [int(n) for n in ROWS.findall(stdout)]
    return counts[-1] if counts else 0
