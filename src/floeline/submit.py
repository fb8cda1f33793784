"""`floeline submit CONFIG --master spark://HOST:PORT`: the job `floeline run` runs, run by
PySpark's own spark-submit on a cluster (a Spark standalone master, or any master
spark-submit takes). The driver runs here (client mode); the executors run on the
cluster's workers.

What the spark-submit line carries, and why:
- `--packages`/`--exclude-packages`: Delta and Spark's Kafka source, exactly as local runs
  ask for them (spark.py's PACKAGES/EXCLUDES); spark-submit's Ivy resolves them on this
  machine from its cache, the executors fetch them from the driver.
- `--jars`: what floeline's set-up fetched and built (`spark.setup_jars`: the Kafka token
  provider, the s3a jars, floeline's JVM functions). Nothing is fetched or compiled here:
  a missing jar stops the command with a message naming `make setup`.
- `--py-files`: a zip of the floeline package this command runs, so the driver and the
  executors' Python workers import the same code. Its dependencies (pyarrow,
  confluent-kafka, ...) are not in it: they come from the interpreter below.
- `spark.pyspark.python`: the interpreter of the driver and of the executors' Python
  workers; by default this one (`--python` names another: on a real cluster, an
  interpreter with floeline's requirements at that path on every worker).
- the primary file, a small script that runs `floeline run CONFIG` (or, for
  `floeline submit --worker worker.properties`, `floeline worker worker.properties`) in
  the driver.
Everything after `--` goes to spark-submit as it is (after floeline's options, so it
wins: `-- --driver-memory 4g --conf spark.sql.shuffle.partitions=8`). The master, the
driver's address and every --conf are left as given: under spark-submit the session
(spark.py) only adds floeline's SQL and Delta settings that the conf does not set."""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from floeline.cache import cache_dir, install_once
from floeline.errors import FloelineError
from floeline.processes import command_line, last_lines, recorded_pid
from floeline.secrets import SECRET_KEY_REGEX

DRIVER_SCRIPT = '''"""spark-submit's primary file for `floeline submit`: the floeline command line given
after it (`run CONFIG ...`), in the driver's Python. It records its pid where
$FLOELINE_SUBMIT_DRIVER_PID says, so `floeline submit` can pass a stop signal to it."""
import faulthandler
import os
import sys

faulthandler.enable()  # a crash in a native library (librdkafka, Arrow) names its stack
if os.environ.get("FLOELINE_SUBMIT_DRIVER_PID"):
    with open(os.environ["FLOELINE_SUBMIT_DRIVER_PID"], "w") as f:
        f.write(str(os.getpid()))

from floeline.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
'''
PID_ENV = "FLOELINE_SUBMIT_DRIVER_PID"


def spark_submit_path() -> Path:
    """PySpark's own bin/spark-submit (the wheel's, the same Spark floeline runs)."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def _package_files() -> list[tuple[str, Path]]:
    """(name in the zip, file) for every file of the floeline package, sorted."""
    import floeline

    root = Path(floeline.__file__).parent
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and p.suffix != ".pyc"]
    return sorted((f"floeline/{p.relative_to(root).as_posix()}", p) for p in files)


def python_bundle() -> Path:
    """A directory holding `floeline.zip` (the package as it is now) and `driver.py`,
    in floeline's cache under a digest of their contents: made once per version of the
    code, never half-made (cache.install_once)."""
    files = _package_files()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(DRIVER_SCRIPT.encode())
    stamp = digest.hexdigest()[:16]

    def build(tmp: Path) -> Path:
        out = tmp / "bundle"
        out.mkdir()
        with zipfile.ZipFile(out / "floeline.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            for name, path in files:
                zf.write(path, name)
        (out / "driver.py").write_text(DRIVER_SCRIPT)
        return out

    return install_once(cache_dir() / "submit" / f"floeline-{stamp}", stamp, build)


def submit_command(config_path: str, master: str, *, name: str, until_caught_up: bool = False,
                   deploy_mode: str = "client", python: str | None = None,
                   spark_args: list[str] | tuple[str, ...] = (), command: str = "run") -> list[str]:
    """The spark-submit command line that runs the connector of `config_path` on `master`
    (see the module's doc), or with command="worker" the worker of the worker config
    `config_path`. Raises SetupMissing when set-up has not built the jars."""
    from floeline.spark import (
        DRIVER_MEMORY, EXCLUDES, PACKAGES, WORKER_DRIVER_MEMORY, driver_memory, setup_jars)

    if deploy_mode != "client":
        raise FloelineError(f"--deploy-mode {deploy_mode}: floeline submit runs the driver on this "
                            "machine (client mode); Spark runs Python applications on a standalone "
                            "cluster in client mode only")
    jars = setup_jars()
    bundle = python_bundle()
    cmd = [str(spark_submit_path()),
           "--master", master, "--deploy-mode", deploy_mode, "--name", f"floeline-{name}",
           "--packages", ",".join(PACKAGES), "--exclude-packages", ",".join(EXCLUDES),
           "--jars", ",".join(str(j) for j in jars),
           "--py-files", str(bundle / "floeline.zip"),
           "--driver-memory", driver_memory(WORKER_DRIVER_MEMORY if command == "worker" else DRIVER_MEMORY),
           "--conf", f"spark.pyspark.python={python or sys.executable}",
           # read by the JVM at start, before floeline's session defaults apply
           "--conf", f"spark.redaction.regex={SECRET_KEY_REGEX}",
           *spark_args,
           str(bundle / "driver.py"), command, os.path.abspath(config_path)]
    if until_caught_up:
        cmd.append("--until-caught-up")
    return cmd


def shell_line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in cmd)


def run_submit(cmd: list[str], out=None) -> int:
    """Run spark-submit and return its exit status (the connector's: 0 once it stopped
    cleanly). The driver's output (floeline's lines; under spark-submit its stderr comes
    merged into stdout) goes to `out`'s terminal as usual; Spark's own log (spark-submit's
    stderr) to ~/.cache/floeline/spark-driver.log, as for `floeline run`
    (FLOELINE_SPARK_STDERR=1 keeps it on the terminal).

    Stopping: spark-submit runs in a session of its own, so a Ctrl-C in the terminal
    reaches this command alone. The first SIGINT or SIGTERM is passed to the driver's
    Python only (its pid comes from the driver script): the connector lets the batch in
    flight commit, stops its query and exits 0, and so does spark-submit. Were Spark's
    JVM signalled too, it would stop itself under the query and exit 143. Before the
    driver runs (spark-submit still starting), and for a second signal, the signal goes
    to spark-submit's whole session."""
    import tempfile

    out = out or sys.stdout
    to_terminal = os.environ.get("FLOELINE_SPARK_STDERR") == "1"
    log_path = cache_dir() / "spark-driver.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out.flush()
    with tempfile.TemporaryDirectory(prefix="floeline-submit-") as tmp:
        pid_file = Path(tmp) / "driver.pid"
        with open(log_path, "ab") as log:
            start = log.tell()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                    env={**os.environ, PID_ENV: str(pid_file)},
                                    stderr=None if to_terminal else log, start_new_session=True)
        signalled = []

        def forward(signum, _frame):
            signalled.append(signum)
            driver = recorded_pid(pid_file)
            try:
                if len(signalled) == 1 and driver and "driver.py" in (command_line(driver) or ""):
                    os.kill(driver, signum)
                else:
                    os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

        saved = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            status = proc.wait()
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
    if status != 0 and not to_terminal:
        with open(log_path, "rb") as log:
            log.seek(start)
            this_run = last_lines(log.read().decode(errors="replace"), 10)
        print(f"spark-submit exited with status {status}; Spark's log: {log_path}"
              + (f"; its last lines:\n{this_run}" if this_run else ""), file=sys.stderr)
    return status
